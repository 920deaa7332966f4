"""The severity policy (issue 21, item 2): only `error` findings fail a run by default; warnings
are reported and exit 0 unless `--fail-level warning` (or `fail-level = "warning"`) asks."""

import pytest

from conftest import BUGGY

# AMP014 (deprecated `torch.cuda.amp` API) is a warning rule.
DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"


@pytest.fixture
def warnings_only(project):
    return project({"old.py": DEPRECATED})


def test_warnings_are_reported_and_pass_by_default(amplint, warnings_only):
    result = amplint("--no-cache", "--concise", ".", cwd=warnings_only)
    assert result.returncode == 0
    assert "old.py:3:10: AMP014" in result.stdout and "Found 1 warning." in result.stdout


def test_fail_level_warning_fails_on_warnings(amplint, warnings_only):
    assert amplint("--no-cache", "--fail-level", "warning", ".", cwd=warnings_only).returncode == 1
    assert amplint("--no-cache", "--fail-level", "error", ".", cwd=warnings_only).returncode == 0


def test_fail_level_in_the_config_and_the_command_line_wins(amplint, warnings_only):
    (warnings_only / "pyproject.toml").write_text('[tool.amplint]\nfail-level = "warning"\n')
    assert amplint("--no-cache", ".", cwd=warnings_only).returncode == 1
    assert amplint("--no-cache", "--fail-level", "error", ".", cwd=warnings_only).returncode == 0


def test_a_bad_fail_level_is_a_usage_error(amplint, warnings_only):
    (warnings_only / "pyproject.toml").write_text('[tool.amplint]\nfail-level = "info"\n')
    result = amplint("--no-cache", ".", cwd=warnings_only)
    assert result.returncode == 2 and "fail-level must be one of 'error', 'warning'" in result.stderr
    assert amplint("--isolated", "--fail-level", "info", ".", cwd=warnings_only).returncode == 2


def test_errors_fail_at_either_level_and_exit_zero_still_wins(amplint, project):
    root = project({"old.py": DEPRECATED, "train.py": BUGGY})
    assert amplint("--no-cache", ".", cwd=root).returncode == 1
    assert amplint("--no-cache", "--fail-level", "warning", ".", cwd=root).returncode == 1
    assert amplint("--no-cache", "--exit-zero", "--fail-level", "warning", ".", cwd=root).returncode == 0


def test_a_file_not_linted_exits_2_whatever_the_level(amplint, project):
    root = project({"old.py": DEPRECATED, "broken.py": "x = torch.autocast(\n"})
    assert amplint("--no-cache", ".", cwd=root).returncode == 2
    assert amplint("--no-cache", "--exit-zero", ".", cwd=root).returncode == 2


def test_sarif_with_warnings_only_exits_0(amplint, warnings_only):
    # Code scanning fails the check on its own alerts: the lint step must not fail it twice.
    result = amplint("--no-cache", "--output-format", "sarif", ".", cwd=warnings_only)
    assert result.returncode == 0 and '"level": "warning"' in result.stdout


def test_stdin_follows_the_policy(amplint, tmp_path):
    assert amplint("-", "--stdin-filename", "old.py", cwd=tmp_path, input=DEPRECATED).returncode == 0
    assert amplint("-", "--stdin-filename", "old.py", "--fail-level", "warning", cwd=tmp_path, input=DEPRECATED).returncode == 1
