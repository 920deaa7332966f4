"""The linter never imports torch and never runs the code it lints."""

import subprocess
import sys

from conftest import REPO, run_amplint

POISON = 'raise ImportError("amplint imported torch")\n'


def test_linting_works_with_a_poisoned_torch(tmp_path):
    (tmp_path / "poison" / "torch").mkdir(parents=True)
    (tmp_path / "poison" / "torch" / "__init__.py").write_text(POISON)
    # The linted code would blow up if it were executed or imported.
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "train.py").write_text(
        "import torch\nraise SystemExit('executed!')\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n"
        "    loss = model(x)\n    loss.backward()\n"
    )
    env = {"PYTHONPATH": f"{tmp_path / 'poison'}"}
    result = run_amplint("--concise", str(tmp_path / "work"), str(REPO / "tests" / "cases"), env=env)
    assert result.returncode == 1, result.stderr
    assert "train.py:5:5: AMP006" in result.stdout
    assert "executed!" not in result.stdout + result.stderr
    assert "imported torch" not in result.stderr


def test_no_linter_module_imports_torch():
    code = (
        "import sys, importlib, pkgutil, amplint, amplint.rules, amplint.output\n"
        "for pkg in (amplint, amplint.rules, amplint.output):\n"
        "    for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + '.'):\n"
        "        if not info.name.endswith('__main__'):\n"
        "            importlib.import_module(info.name)\n"
        "from amplint.lint.engine import lint_text\n"
        "lint_text('import torch\\nwith torch.autocast(\"cuda\"):\\n    y = m(x)\\n')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
