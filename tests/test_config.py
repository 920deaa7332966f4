"""Configuration files and their precedence (ruff's), `--config PATH|KEY=VALUE`, `--per-file-ignores`,
and the run settings a configuration can hold (output-format, cache-dir, jobs)."""

import json
import os

import pytest

from amplint.config.options import ConfigError, find_config, load
from conftest import BUGGY

# BUGGY has one AMP003 finding; with AMP003 ignored it is clean.
IGNORE_AMP003 = 'ignore = ["AMP003"]\n'
SELECT_AMP001 = 'select = ["AMP001"]\n'


def write(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def codes(result):
    return [item["code"] for item in json.loads(result.stdout)]


@pytest.mark.parametrize(
    "files, chosen",
    [
        # In one directory: .amplint.toml, then amplint.toml, then pyproject.toml.
        ({".amplint.toml": "", "amplint.toml": "", "pyproject.toml": "[tool.amplint]\n"}, ".amplint.toml"),
        ({"amplint.toml": "", "pyproject.toml": "[tool.amplint]\n"}, "amplint.toml"),
        ({"pyproject.toml": "[tool.amplint]\n"}, "pyproject.toml"),
        # A pyproject.toml without [tool.amplint] is passed over: the parent's file applies.
        ({"pyproject.toml": "[project]\nname = 'x'\n", "../amplint.toml": ""}, "../amplint.toml"),
        # The closest directory wins, whatever the kind of file.
        ({"pyproject.toml": "[tool.amplint]\n", "../.amplint.toml": ""}, "pyproject.toml"),
        ({}, None),
    ],
)
def test_which_configuration_file_is_found(tmp_path, files, chosen):
    project = tmp_path / "outer" / "project"
    project.mkdir(parents=True)
    write(project, files)
    found = find_config(str(project / "train.py"))
    assert found == (None if chosen is None else os.path.normpath(str(project / chosen)))


def test_amplint_toml_takes_top_level_keys(amplint, tmp_path):
    write(tmp_path, {"amplint.toml": IGNORE_AMP003, "pyproject.toml": f"[tool.amplint]\n{SELECT_AMP001}", "train.py": BUGGY})
    result = amplint("--output-format", "json", cwd=tmp_path)
    assert result.returncode == 0 and codes(result) == [], result.stderr
    # Unknown keys stay errors, named with the file.
    (tmp_path / "amplint.toml").write_text("selct = ['AMP003']\n")
    result = amplint(cwd=tmp_path)
    assert result.returncode == 2
    assert "amplint.toml: unknown key(s): selct (known: select," in result.stderr
    # A [tool.amplint] table in amplint.toml is read as in a pyproject.toml.
    (tmp_path / "amplint.toml").write_text(f"[tool.amplint]\n{IGNORE_AMP003}")
    assert amplint(cwd=tmp_path).returncode == 0


def test_amplint_toml_target_version_falls_back_to_requires_python_beside_it(tmp_path):
    write(tmp_path, {"amplint.toml": IGNORE_AMP003, "pyproject.toml": "[project]\nrequires-python = '>=3.9'\n"})
    assert load(str(tmp_path / "amplint.toml"), str(tmp_path)).target_version == (3, 9)
    (tmp_path / "amplint.toml").write_text('target-version = "py311"\n')
    assert load(str(tmp_path / "amplint.toml"), str(tmp_path)).target_version == (3, 11)


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("pyproject.toml", "[project]\nname = 'x'\n", "pyproject.toml has no [tool.amplint] table"),
        ("other.toml", "[tool.black]\nline-length = 100\n", "other.toml has nothing for amplint: no [tool.amplint] table and no top-level amplint key (it has: tool)"),
        ("empty.toml", "", "empty.toml has nothing for amplint: no [tool.amplint] table and no top-level amplint key (it is empty)"),
        ("other.toml", "selct = ['AMP003']\nignore = []\n", "other.toml: unknown key(s): selct"),
        ("missing.toml", None, "cannot read missing.toml"),
    ],
)
def test_config_path_with_nothing_for_amplint_is_a_usage_error(amplint, tmp_path, name, text, message):
    write(tmp_path, {"train.py": BUGGY})
    if text is not None:
        write(tmp_path, {name: text})
    result = amplint("--config", name, "train.py", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr


def test_config_path_reads_ruff_style_and_pyproject_style_files(amplint, tmp_path):
    write(tmp_path, {"ci.toml": SELECT_AMP001, "legacy.toml": f"[tool.amplint]\n{SELECT_AMP001}", "train.py": BUGGY})
    assert amplint("train.py", cwd=tmp_path).returncode == 1
    assert amplint("--config", "ci.toml", "train.py", cwd=tmp_path).returncode == 0
    assert amplint("--config", "legacy.toml", "train.py", cwd=tmp_path).returncode == 0
    two = amplint("--config", "ci.toml", "--config", "legacy.toml", "train.py", cwd=tmp_path)
    assert two.returncode == 2 and "one configuration file" in two.stderr
    isolated = amplint("--isolated", "--config", "ci.toml", "train.py", cwd=tmp_path)
    assert isolated.returncode == 2 and "--isolated" in isolated.stderr


def test_config_key_value_overrides_the_file_and_repeats(amplint, tmp_path):
    write(tmp_path, {"amplint.toml": SELECT_AMP001, "train.py": BUGGY})
    assert amplint("train.py", cwd=tmp_path).returncode == 0
    result = amplint("--output-format", "json", "--config", "select = ['ALL']", "train.py", cwd=tmp_path)
    assert codes(result) == ["AMP003"]
    # Repeatable; each sets its key; with a file named too, on top of that file.
    write(tmp_path, {"ci.toml": IGNORE_AMP003})
    result = amplint("--config", "ci.toml", "--config", "select = ['ALL']", "--config", "output-format = 'json'", "train.py", cwd=tmp_path)
    assert result.returncode == 0 and codes(result) == []
    # With --isolated and with no file at all, the overrides still apply.
    (tmp_path / "amplint.toml").unlink()
    assert amplint("--config", IGNORE_AMP003.strip(), "train.py", cwd=tmp_path).returncode == 0
    assert amplint("--isolated", "--config", IGNORE_AMP003.strip(), "train.py", cwd=tmp_path).returncode == 0


@pytest.mark.parametrize(
    "override, message",
    [
        ("selct = ['AMP003']", "unknown key(s): selct"),
        ("select = 'AMP003'", "`select` must be a list of strings"),
        ("select = [", "is neither a file nor a valid `KEY = VALUE` TOML line"),
        ("jobs = -1", "jobs must be a whole number"),
        ("output-format = 'xml'", "output-format must be one of full, concise"),
        ("per-file-ignores = {'x.py' = ['AMP999']}", "unknown rule selector `AMP999`"),
        ("not-a-file.toml", "cannot read not-a-file.toml"),
    ],
)
def test_bad_config_overrides_are_usage_errors(amplint, tmp_path, override, message):
    write(tmp_path, {"train.py": BUGGY})
    result = amplint("--config", override, "train.py", cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_per_file_ignores_on_the_command_line(amplint, tmp_path):
    write(
        tmp_path,
        {
            "amplint.toml": 'per-file-ignores = { "scripts/*" = ["AMP003"] }\n',
            "train.py": BUGGY,
            "scripts/run.py": BUGGY,
            "tests/test_loop.py": BUGGY,
        },
    )

    def flagged(*args):
        result = amplint("--output-format", "json", *args, ".", cwd=tmp_path)
        return sorted(os.path.relpath(item["filename"], tmp_path) for item in json.loads(result.stdout))

    assert flagged() == ["tests/test_loop.py", "train.py"]
    # --extend-per-file-ignores adds to the config's; --per-file-ignores replaces them.
    assert flagged("--extend-per-file-ignores", "tests/*:AMP003") == ["train.py"]
    assert flagged("--per-file-ignores", "tests/*:AMP003") == ["scripts/run.py", "train.py"]
    # Repeatable, several codes after one pattern, and ruff's `a:CODE,b:CODE` in one value.
    assert flagged("--per-file-ignores", "tests/*:AMP001,AMP003", "--per-file-ignores", "train.py:AMP003") == ["scripts/run.py"]
    assert flagged("--per-file-ignores", "tests/*:AMP003,train.py:AMP003") == ["scripts/run.py"]
    for bad, message in [
        ("tests/*", "expected GLOB:CODES"),
        (":AMP003", "a pattern is missing"),
        ("tests/*:", "no rule codes"),
        ("tests/*:AMP999", "unknown rule selector `AMP999`"),
        ("[z-a]:AMP003", "invalid pattern `[z-a]` in --per-file-ignores"),
    ]:
        result = amplint("--per-file-ignores", bad, ".", cwd=tmp_path)
        assert result.returncode == 2 and message in result.stderr, (bad, result.stderr)


def test_output_format_cache_dir_and_jobs_in_the_configuration(amplint, tmp_path):
    write(tmp_path, {"amplint.toml": 'output-format = "json"\ncache-dir = "cache/amplint"\njobs = 1\n', "train.py": BUGGY})
    result = amplint("train.py", cwd=tmp_path)
    assert codes(result) == ["AMP003"]
    assert (tmp_path / "cache" / "amplint").is_dir() and not (tmp_path / ".amplint_cache").exists()
    settings = amplint("--show-settings", "train.py", cwd=tmp_path).stdout
    assert 'output-format = "json"' in settings and "jobs = 1" in settings
    # The command line wins: its format, its jobs, its cache directory (and the environment's).
    assert amplint("--output-format", "concise", "train.py", cwd=tmp_path).stdout.startswith("train.py:8:5: AMP003")
    assert amplint("--concise", "train.py", cwd=tmp_path).stdout.startswith("train.py:8:5: AMP003")
    assert "jobs = 3" in amplint("--show-settings", "-j", "3", "train.py", cwd=tmp_path).stdout
    assert 'fail-level = "error"' in settings and "analysis-limit = 1.0" in settings
    shown = amplint("--show-settings", "--fail-level", "warning", "--analysis-limit", "2.5", "train.py", cwd=tmp_path).stdout
    assert 'fail-level = "warning"' in shown and "analysis-limit = 2.5" in shown
    amplint("--cache-dir", "elsewhere", "train.py", cwd=tmp_path)
    assert (tmp_path / "elsewhere").is_dir()
    amplint("train.py", cwd=tmp_path, env={"AMPLINT_CACHE_DIR": str(tmp_path / "from-env")})
    assert (tmp_path / "from-env").is_dir()


def test_a_config_error_names_the_override(tmp_path):
    with pytest.raises(ConfigError, match="--config KEY=VALUE: jobs must be"):
        load(None, str(tmp_path), overrides={"jobs": True})


def test_a_configured_cache_dir_outside_the_project_is_not_used(amplint, tmp_path):
    """The configuration comes with the repository: it may not point amplint's writes outside
    the project (a user who wants that names the directory with --cache-dir)."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    write(project, {"amplint.toml": f'cache-dir = "{outside}"\n', "train.py": BUGGY})
    result = amplint("--output-format", "json", "train.py", cwd=project)
    assert codes(result) == ["AMP003"]
    assert "not caching: the configured cache-dir" in result.stderr and "outside the project" in result.stderr
    assert not outside.exists() and not (project / ".amplint_cache").exists()
    write(project, {"amplint.toml": 'cache-dir = "../outside"\n'})
    assert "outside the project" in amplint("--concise", "train.py", cwd=project).stderr
    assert not outside.exists()
