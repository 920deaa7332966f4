"""The torch fixes must work on (amplint.config.torch_target): `target-torch-version`, else the oldest
torch the project's requirement admits, else 2.4; and AMP014's rewrites, safe only where that
torch has the name they write (issue 23, item 5)."""

import json
import textwrap

import pytest

from amplint.config.options import ConfigError, load
from amplint.lint.engine import lint_source
from amplint.rules import ALL_RULES
from amplint.config.torch_target import ASSUMED, admitted, declared_torch, oldest_admitted, parse_torch_version, poetry_oldest, requirement_version

SCALER = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
FIXED_SCALER = 'import torch\nscaler = torch.amp.GradScaler("cuda")\n'
PYPROJECT = '[project]\nname = "p"\ndependencies = ["numpy", "{requirement}"]\n'


def write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def amp014_fixes(result):
    return [item["fix"]["applicability"] for item in json.loads(result.stdout) if item["code"] == "AMP014" and item["fix"]]


# --------------------------------------------------------------------------- reading requirements


@pytest.mark.parametrize(
    "specifier, oldest",
    [
        (">=1.13", (1, 13)),
        (">=1.13, <3", (1, 13)),
        ("==2.1.*", (2, 1)),
        ("==2.1.0+cu118", (2, 1)),
        ("~=2.2.0", (2, 2)),
        (">2.1", (2, 1)),
        (">=2.4.0a0", (2, 4)),
        ("!=2.0.0", None),  # no bound: unknown
        ("", None),
        ("<2.3", (2, 2)),  # only an upper bound: at most its newest release
        ("<=2.2.1", (2, 2)),
        ("<2.3.1", (2, 3)),
        ("<2", (1, 999)),
        ("<3", ASSUMED),  # ... and never newer than assumed
        ("latest", None),
    ],
)
def test_the_oldest_release_a_specifier_admits(specifier, oldest):
    assert oldest_admitted(specifier) == oldest


@pytest.mark.parametrize(
    "specifier, newest",
    [
        (">=1.13", None),  # no upper bound
        ("==1.13.1", (1, 13)),
        ("==2.1.*", (2, 1)),
        ("==2.*", (2, 999)),
        ("~=2.2.0", (2, 2)),
        ("~=2.2", (2, 999)),
        (">=1.13,<2.4", (2, 3)),
        ("<2", (1, 999)),
    ],
)
def test_the_newest_release_a_specifier_admits(specifier, newest):
    found = admitted(specifier)
    assert found is not None and found[1] == newest


def test_a_declaration_without_a_bound_admits_any_newest(tmp_path):
    # `torch` alone (or poetry's "*") beside a pin: the project supports the newest torch too.
    write(tmp_path / "bare", {"requirements.txt": "torch==2.1.0\n", "requirements-dev.txt": "torch\n"})
    assert declared_torch(str(tmp_path / "bare")).newest is None
    write(tmp_path / "poetry", {"requirements.txt": "torch==2.1.0\n", "pyproject.toml": '[tool.poetry.dependencies]\ntorch = "*"\n'})
    assert declared_torch(str(tmp_path / "poetry")).newest is None
    # setup.py is a program: a requirement on torch in it may be anything (not torchvision's).
    write(tmp_path / "setup", {"requirements.txt": "torch==2.1.0\n", "setup.py": 'setup(install_requires=["torch>=1.13"])\n'})
    assert declared_torch(str(tmp_path / "setup")).newest is None
    write(tmp_path / "vision", {"requirements.txt": "torch==2.1.0\n", "setup.py": 'setup(install_requires=["torchvision"])\n'})
    assert declared_torch(str(tmp_path / "vision")).newest == (2, 1)
    # A poetry dependency by path, URL or git: any torch.
    write(tmp_path / "path", {"pyproject.toml": '[tool.poetry.dependencies]\ntorch = {path = "wheels/torch.whl"}\n[tool.poetry.group.dev.dependencies]\ntorch = "~1.13"\n'})
    assert declared_torch(str(tmp_path / "path")).newest is None


def test_several_declarations_admit_the_newest_any_of_them_does(tmp_path):
    write(tmp_path, {"requirements.txt": "torch==1.13.1\n", "requirements-dev.txt": "torch>=1.13,<2.2\n"})
    declared = declared_torch(str(tmp_path))
    assert (declared.version, declared.newest) == ((1, 13), (2, 1))
    write(tmp_path, {"pyproject.toml": PYPROJECT.format(requirement="torch>=1.12")})
    assert declared_torch(str(tmp_path)).newest is None


@pytest.mark.parametrize(
    "requirement, oldest",
    [
        ("torch>=1.13", (1, 13)),
        ("torch (>=1.13)", (1, 13)),
        ('Torch[opt-einsum]>=2.0; python_version > "3.8"', (2, 0)),
        ("torch", None),
        ("torch @ https://download.pytorch.org/whl/torch-2.1.0.whl", None),
        ("torchvision>=0.15", None),
        ("pytorch-lightning>=2.0", None),
    ],
)
def test_a_requirement_names_torch_and_its_bound(requirement, oldest):
    assert requirement_version(requirement) == oldest


@pytest.mark.parametrize("constraint, oldest", [("^2.1", (2, 1)), ("~2.1.0", (2, 1)), ("2.1.*", (2, 1)), (">=1.13,<3", (1, 13)), ("*", None)])
def test_poetry_constraints(constraint, oldest):
    assert poetry_oldest(constraint) == oldest


@pytest.mark.parametrize("value, version", [("2.2", (2, 2)), ("1.13.1", (1, 13)), ("2", None), (2.2, None), ("two", None)])
def test_target_torch_version_values(value, version):
    assert parse_torch_version(value) == version


def test_declarations_are_read_beside_the_project_root_and_the_oldest_wins(tmp_path):
    write(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "p"\ndependencies = ["torch>=2.1"]\n'
            '[project.optional-dependencies]\nold = ["torch==1.13.*"]\n',
            "src/pkg/train.py": SCALER,
        },
    )
    declared = declared_torch(str(tmp_path / "src" / "pkg"))
    assert declared.version == (1, 13) and declared.where == "pyproject.toml: torch==1.13.*"
    # Requirements files, with their includes, and requirements/*.txt.
    write(tmp_path, {"requirements/base.txt": "# pinned\n-r ../constraints.txt\nnumpy\n", "constraints.txt": "torch==1.12.1  # cu116\n"})
    assert declared_torch(str(tmp_path)).version == (1, 12)


def test_requirements_txt_alone_and_setup_cfg(tmp_path):
    write(tmp_path, {"requirements.txt": "--extra-index-url https://x\ntorch>=2.2 --hash=sha256:00\n"})
    assert declared_torch(str(tmp_path)).version == (2, 2)
    write(tmp_path, {"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    torch>=2.0\n"})
    assert declared_torch(str(tmp_path)).version == (2, 0)


def test_the_nearest_project_root_decides_and_a_bare_torch_says_nothing(tmp_path):
    write(tmp_path, {"requirements.txt": "torch>=1.9\n", "sub/pyproject.toml": PYPROJECT.format(requirement="torch")})
    # sub/ is a project of its own that declares torch without a bound: unknown, not its parent's.
    assert declared_torch(str(tmp_path / "sub")) is None
    assert declared_torch(str(tmp_path)).version == (1, 9)


def test_a_broken_declaration_is_passed_over(tmp_path):
    write(tmp_path, {"pyproject.toml": "[project\n", "requirements.txt": "torch>=1.13\n"})
    assert declared_torch(str(tmp_path)).version == (1, 13)


def test_the_configuration_key_wins_over_the_declaration(tmp_path):
    write(tmp_path, {"pyproject.toml": PYPROJECT.format(requirement="torch>=2.4") + '[tool.amplint]\ntarget-torch-version = "2.2"\n'})
    config = load(str(tmp_path / "pyproject.toml"), str(tmp_path))
    assert config.torch() == ((2, 2), "target-torch-version")
    write(tmp_path, {"pyproject.toml": PYPROJECT.format(requirement="torch>=2.4")})
    assert load(None, str(tmp_path), str(tmp_path)).torch() == ((2, 4), "pyproject.toml: torch>=2.4")
    assert load(None, str(tmp_path / "elsewhere"), str(tmp_path / "elsewhere")).torch()[0] == ASSUMED
    write(tmp_path, {"amplint.toml": "target-torch-version = 2.2\n"})
    with pytest.raises(ConfigError, match="target-torch-version must be a torch release as a string"):
        load(str(tmp_path / "amplint.toml"), str(tmp_path))


# --------------------------------------------------------------------------- AMP014's fixes


def fixes_at(source, torch_target):
    result = lint_source(textwrap.dedent(source), "t.py", ALL_RULES, torch_target=torch_target)
    return [(f.fix.applicability, f.fix.title) for f in result.findings if f.code == "AMP014" and f.fix is not None]


def test_grad_scaler_needs_2_3():
    assert [a for a, _ in fixes_at(SCALER, (2, 2))] == ["unsafe"]
    assert fixes_at(SCALER, (2, 2))[0][1].endswith("(needs torch 2.3; the project supports torch 2.2)")
    assert [a for a, _ in fixes_at(SCALER, (2, 3))] == ["safe"]
    assert [a for a, _ in fixes_at(SCALER, None)] == ["safe"]  # nothing known: assumed new enough


def test_custom_fwd_and_bwd_need_2_4():
    source = """\
    import torch
    class F(torch.autograd.Function):
        @staticmethod
        @torch.cuda.amp.custom_fwd
        def forward(ctx, x):
            return x
        @staticmethod
        @torch.cuda.amp.custom_bwd
        def backward(ctx, g):
            return g
    """
    assert [a for a, _ in fixes_at(source, (2, 3))] == ["unsafe", "unsafe"]
    assert [a for a, _ in fixes_at(source, (2, 4))] == ["safe", "safe"]


def test_autocast_needs_what_its_spelling_needs():
    # `torch.amp.autocast` came in 1.12; `torch.autocast`, the name a file may already import, in 1.10.
    amp = "import torch\nwith torch.cuda.amp.autocast():\n    y = model(x)\n"
    assert [a for a, _ in fixes_at(amp, (1, 11))] == ["unsafe"]
    assert [a for a, _ in fixes_at(amp, (1, 12))] == ["safe"]
    bound = "import torch\nfrom torch import autocast\nwith torch.cuda.amp.autocast():\n    y = model(x)\nwith autocast('cpu'):\n    z = model(x)\n"
    assert fixes_at(bound, (1, 10)) == [("safe", 'Use `torch.amp.autocast` with `"cuda"`')]


def test_cpu_grad_scaler_is_no_older_than_its_replacement():
    # torch.cpu.amp.GradScaler came with torch.amp.GradScaler (2.3): code that calls it needs 2.3 already.
    assert [a for a, _ in fixes_at("import torch\ns = torch.cpu.amp.GradScaler()\n", (1, 13))] == ["safe"]


def test_one_fix_for_several_uses_takes_the_newest_need():
    source = """\
    from torch.cuda.amp import GradScaler
    a = GradScaler()
    b = GradScaler(init_scale=1024)
    """
    assert {a for a, _ in fixes_at(source, (2, 2))} == {"unsafe"}


# --------------------------------------------------------------------------- the command


def test_a_project_on_torch_1_13_gets_the_rewrite_only_with_unsafe_fixes(amplint, tmp_path):
    write(tmp_path, {"pyproject.toml": PYPROJECT.format(requirement="torch>=1.13"), "train.py": SCALER})
    result = amplint("--no-cache", "--output-format", "json", ".", cwd=tmp_path)
    assert amp014_fixes(result) == ["unsafe"], result.stderr
    amplint("--no-cache", "--fix", ".", cwd=tmp_path)
    assert (tmp_path / "train.py").read_text() == SCALER
    amplint("--no-cache", "--fix", "--unsafe-fixes", ".", cwd=tmp_path)
    assert (tmp_path / "train.py").read_text() == FIXED_SCALER


def test_a_project_on_torch_2_4_gets_it_as_safe(amplint, tmp_path):
    write(tmp_path, {"pyproject.toml": PYPROJECT.format(requirement="torch>=2.4"), "train.py": SCALER})
    amplint("--no-cache", "--fix", ".", cwd=tmp_path)
    assert (tmp_path / "train.py").read_text() == FIXED_SCALER


def test_the_setting_overrides_the_declaration_and_the_flag_overrides_the_setting(amplint, tmp_path):
    write(
        tmp_path,
        {
            "pyproject.toml": PYPROJECT.format(requirement="torch>=2.4") + '[tool.amplint]\ntarget-torch-version = "2.2"\n',
            "train.py": SCALER,
        },
    )
    assert amp014_fixes(amplint("--no-cache", "--output-format", "json", ".", cwd=tmp_path)) == ["unsafe"]
    amplint("--no-cache", "--fix", ".", cwd=tmp_path)
    assert (tmp_path / "train.py").read_text() == SCALER
    assert amp014_fixes(amplint("--no-cache", "--output-format", "json", "--target-torch-version", "2.3", ".", cwd=tmp_path)) == ["safe"]
    assert amp014_fixes(amplint("--no-cache", "--output-format", "json", "--config", "target-torch-version = '2.3'", ".", cwd=tmp_path)) == ["safe"]
    bad = amplint("--target-torch-version", "latest", ".", cwd=tmp_path)
    assert bad.returncode == 2 and "--target-torch-version: target-torch-version must be" in bad.stderr


def test_requirements_txt_is_read_by_the_command(amplint, tmp_path):
    write(tmp_path, {"requirements.txt": "torch>=2.2,<3\n", "train.py": SCALER})
    assert amp014_fixes(amplint("--no-cache", "--output-format", "json", ".", cwd=tmp_path)) == ["unsafe"]
    settings = amplint("--show-settings", ".", cwd=tmp_path).stdout
    assert 'target-torch-version = "2.2"  # requirements.txt: torch>=2.2,<3; newest admitted 2.x' in settings


def test_a_project_pinned_below_the_warning_gets_no_deprecation(amplint, tmp_path):
    # torch 2.1 has the old names without a warning: there is nothing to report.
    write(tmp_path, {"requirements.txt": "torch==2.1.0\n", "train.py": SCALER})
    cache = ["--cache-dir", str(tmp_path / "cache"), "--output-format", "json", "."]
    assert amp014_fixes(amplint(*cache, cwd=tmp_path)) == []
    assert "newest admitted 2.1" in amplint("--show-settings", ".", cwd=tmp_path).stdout
    # A declaration that admits a newer torch too, beside it, or in its place (the cache follows).
    write(tmp_path, {"pyproject.toml": PYPROJECT.format(requirement="torch>=2.0")})
    assert amp014_fixes(amplint(*cache, cwd=tmp_path)) == ["unsafe"]
    (tmp_path / "pyproject.toml").unlink()
    # A target given on the command line says nothing of the newest.
    assert amp014_fixes(amplint("--target-torch-version", "2.0", *cache, cwd=tmp_path)) == ["unsafe"]
    (tmp_path / "requirements.txt").write_text("torch~=2.3\n")
    assert amp014_fixes(amplint(*cache, cwd=tmp_path)) == ["safe"]


def test_with_nothing_declared_the_rewrite_is_safe(amplint, tmp_path):
    write(tmp_path, {"pyproject.toml": PYPROJECT.format(requirement="torch"), "train.py": SCALER})
    assert amp014_fixes(amplint("--no-cache", "--output-format", "json", ".", cwd=tmp_path)) == ["safe"]
    assert 'target-torch-version = "2.4"  # assumed' in amplint("--show-settings", ".", cwd=tmp_path).stdout


def test_the_cache_never_serves_a_result_computed_for_another_target(amplint, tmp_path):
    write(tmp_path, {"pyproject.toml": PYPROJECT.format(requirement="torch>=1.13"), "train.py": SCALER})
    cache = ["--cache-dir", str(tmp_path / "cache"), "--output-format", "json", "."]
    assert amp014_fixes(amplint(*cache, cwd=tmp_path)) == ["unsafe"]
    assert amp014_fixes(amplint(*cache, cwd=tmp_path)) == ["unsafe"]  # a hit
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.format(requirement="torch>=2.4"))
    assert amp014_fixes(amplint(*cache, cwd=tmp_path)) == ["safe"]
    assert amp014_fixes(amplint("--target-torch-version", "2.0", *cache, cwd=tmp_path)) == ["unsafe"]
    # ... and a --fix run on a cached result fixes with the run's target.
    amplint("--fix", *cache, cwd=tmp_path)
    assert (tmp_path / "train.py").read_text() == FIXED_SCALER


def test_the_language_server_uses_the_projects_target(tmp_path):
    from amplint.lsp.settings import rules_for

    write(tmp_path, {"requirements.txt": "torch>=1.13\n", "train.py": SCALER})
    rules, _, torch_target = rules_for(str(tmp_path / "train.py"))
    assert torch_target == (1, 13) and any(rule.code == "AMP014" for rule in rules)


def test_standard_input_is_configured_with_its_projects_target(amplint, tmp_path):
    write(tmp_path, {"requirements.txt": "torch>=1.13\n"})
    result = amplint("--output-format", "json", "--stdin-filename", "train.py", "-", cwd=tmp_path, input=SCALER)
    assert amp014_fixes(result) == ["unsafe"], result.stderr
    assert amplint("--fix", "--stdin-filename", "train.py", "-", cwd=tmp_path, input=SCALER).stdout == SCALER
    fixed = amplint("--fix", "--unsafe-fixes", "--stdin-filename", "train.py", "-", cwd=tmp_path, input=SCALER)
    assert fixed.stdout == FIXED_SCALER


def test_fix_keeps_the_target_in_a_file_with_other_safe_fixes(amplint, tmp_path):
    # The fixer lints the file again to fix it: it must do so for the same torch.
    from conftest import BUGGY

    source = BUGGY.replace('torch.amp.GradScaler("cuda")', "torch.cuda.amp.GradScaler()")
    write(tmp_path, {"requirements.txt": "torch>=1.13\n", "train.py": source})
    amplint("--no-cache", "--fix", ".", cwd=tmp_path)
    fixed = (tmp_path / "train.py").read_text()
    assert "scaler.unscale_(optimizer)" in fixed and "torch.cuda.amp.GradScaler()" in fixed
    result = amplint("--fix", "--stdin-filename", "train.py", "-", cwd=tmp_path, input=source)
    assert "scaler.unscale_(optimizer)" in result.stdout and "torch.cuda.amp.GradScaler()" in result.stdout
