"""An empty selection is a usage error, not a silent "All checks passed!" (reliability round 3, D14).

`amplint --select "$RULES"` with RULES unset in CI would otherwise switch the gate off. An empty
`--extend-select` or `--ignore` is accepted: it adds or removes nothing, so the gate stays as it
was.
"""

import pytest

from conftest import BUGGY


@pytest.mark.parametrize("value", ["", ",", " ", " , ,"])
def test_an_empty_select_on_the_command_line_is_a_usage_error(amplint, project, value):
    root = project({"train.py": BUGGY})
    result = amplint("--select", value, "train.py", cwd=root)
    assert result.returncode == 2
    assert result.stderr.startswith("amplint: error: --select names no rule")
    assert "All checks passed" not in result.stdout and "AMP003" not in result.stdout


def test_an_empty_select_is_refused_even_with_other_options(amplint, project):
    root = project({"train.py": BUGGY})
    for args in (["--select", "", "--extend-select", "AMP003"], ["--select", "", "--show-settings"], ["--select", "", "--select", ","]):
        result = amplint(*args, "train.py", cwd=root)
        assert result.returncode == 2, args
        assert "--select names no rule" in result.stderr


def test_a_select_with_some_rule_among_empty_parts_is_fine(amplint, project):
    root = project({"train.py": BUGGY})
    assert amplint("--select", ",AMP003,", "train.py", cwd=root).returncode == 1
    assert amplint("--select", "", "--select", "AMP003", "train.py", cwd=root).returncode == 1


@pytest.mark.parametrize("option", ["--extend-select", "--ignore"])
@pytest.mark.parametrize("value", ["", ",", " "])
def test_an_empty_extend_select_or_ignore_changes_nothing(amplint, project, option, value):
    root = project({"train.py": BUGGY})
    result = amplint(option, value, "--concise", "train.py", cwd=root)
    assert result.returncode == 1, result.stderr
    assert "train.py:8:5: AMP003" in result.stdout


@pytest.mark.parametrize("select", ["[]", "['']", "[' ', '']"])
def test_an_empty_select_in_the_configuration_is_an_error(amplint, project, select):
    root = project({"pyproject.toml": f"[tool.amplint]\nselect = {select}\n", "train.py": BUGGY})
    result = amplint("train.py", cwd=root)
    assert result.returncode == 2
    assert "`select` names no rule" in result.stderr and "pyproject.toml" in result.stderr
    # The command line's --select replaces the configuration's: then it is not in the way.
    assert amplint("--select", "AMP003", "train.py", cwd=root).returncode == 1


def test_an_empty_extend_select_or_ignore_in_the_configuration_is_fine(amplint, project):
    root = project({"pyproject.toml": "[tool.amplint]\nextend-select = []\nignore = []\n", "train.py": BUGGY})
    assert amplint("train.py", cwd=root).returncode == 1


def test_the_language_server_reports_an_empty_select_as_a_configuration_error(project):
    from amplint.lsp.settings import rules_for
    from amplint.config.selection import SelectionError

    root = project({"pyproject.toml": "[tool.amplint]\nselect = []\n", "train.py": BUGGY})
    with pytest.raises(SelectionError, match="names no rule"):
        rules_for(str(root / "train.py"))
