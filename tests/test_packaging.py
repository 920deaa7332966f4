"""The wheel ships rules and fixtures inside the amplint namespace, never as top-level packages."""

import subprocess
import sys
import zipfile

import pytest

from conftest import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"the wheel does not build: {result.stderr.strip()[-1000:]}"
    (path,) = out.glob("amplint-*.whl")
    return zipfile.ZipFile(path)


@pytest.mark.slow(seconds=12)
def test_wheel_layout(wheel):
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"amplint"}, "no top-level `rules` or `fixtures` package (django-rules owns `rules`)"
    assert "amplint/rules/amp003_clip_before_unscale.py" in names
    assert "amplint/fixtures/AMP003/buggy.py" in names
    assert "amplint/fixtures/AMP003/fixed.py" in names
    assert "amplint/harness/__init__.py" in names
    metadata = wheel.read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert not any("torch" in line and "extra ==" not in line for line in requires), "torch must stay optional"
    entry_points = wheel.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "amplint = amplint.cli:main" in entry_points

    # One build serves both checks: a second test on the module's wheel could land on another
    # xdist worker, which would build it again.
    _check_light_install_and_extras(wheel)


def _check_light_install_and_extras(wheel):
    metadata = wheel.read(next(n for n in wheel.namelist() if n.endswith("METADATA"))).decode()
    assert "Requires-Python: >=3.10" in metadata
    extras = {line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Provides-Extra:")}
    assert {"lsp", "harness", "test"} <= extras
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    # The language server's dependency is an extra: the linter's own install stays light.
    assert any(line.startswith("Requires-Dist: pygls") and 'extra == "lsp"' in line for line in requires)
    assert not any("pygls" in line and "extra ==" not in line for line in requires)
    assert "amplint/lsp/server.py" in wheel.namelist()


def test_no_syntax_newer_than_requires_python():
    # requires-python says 3.10: nothing amplint ships may need a newer parser.
    import ast

    for path in [*(REPO / "amplint").rglob("*.py"), *(REPO / "rules").glob("*.py")]:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 10))
