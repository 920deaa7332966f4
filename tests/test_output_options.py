"""The output formats ruff users know, and the options around them: -o, --statistics with JSON,
severity in every format, colour, progress, --show-files, --show-settings, "did you mean"."""

import io
import json
import os
import pty
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

from amplint import cli
from amplint.run import progress
from amplint.output.terminal import use_color
from conftest import BUGGY

CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
TITLE = f"`{CLIP}` clips gradients that still carry the loss scale"
# A stale suppression: AMP100, the one rule whose severity is `warning`.
STALE = "import torch\nx = torch.ones(1)  # noqa: AMP003\n"
BROKEN = "with torch.autocast('cuda'):\n    x = (\n"


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "stale.py").write_text(STALE)
    (tmp_path / "broken.py").write_text(BROKEN)
    return tmp_path


def test_concise_is_one_line_per_finding_with_the_title(amplint, tree):
    result = amplint("--output-format", "concise", "train.py", cwd=tree)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"train.py:8:5: AMP003 [*] {TITLE}", "Found 1 error.", "[*] 1 fixable with the `--fix` option."]
    # --concise and the old name `text` keep working.
    assert amplint("--concise", "train.py", cwd=tree).stdout == result.stdout
    assert amplint("--output-format", "text", "--concise", "train.py", cwd=tree).stdout == result.stdout
    assert amplint("--output-format", "text", "train.py", cwd=tree).stdout == amplint("train.py", cwd=tree).stdout


def test_full_counts_errors_and_warnings(amplint, tree):
    result = amplint("train.py", "stale.py", cwd=tree)
    assert result.stdout.splitlines()[-2:] == ["Found 1 error and 1 warning.", "[*] 2 fixable with the `--fix` option."]
    assert "AMP100 [*] Unused `noqa` directive (unused: `AMP003`)\n --> stale.py:2:20\n" in result.stdout


def test_json_has_title_help_severity_and_the_files_not_linted(amplint, tree):
    result = amplint("--output-format", "json", ".", cwd=tree)
    assert result.returncode == 2
    items = json.loads(result.stdout)
    by_code = {item["code"]: item for item in items}
    assert set(by_code) == {"AMP003", "AMP100", None}
    finding = by_code["AMP003"]
    assert finding["message"] == TITLE
    assert finding["help"].endswith("Call `scaler.unscale_(optimizer)` before clipping.")
    assert finding["severity"] == "error"
    # ruff's fix object: the edit inserts the unscale before the clip's line.
    assert finding["fix"] == {
        "applicability": "safe",
        "edits": [{"content": "    scaler.unscale_(optimizer)\n", "end_location": {"column": 1, "row": 8}, "location": {"column": 1, "row": 8}}],
        "message": "Unscale before clipping: `scaler.unscale_(optimizer)`",
    }
    assert by_code["AMP100"]["severity"] == "warning"
    not_linted = by_code[None]
    assert not_linted["filename"] == str(tree / "broken.py")
    assert not_linted["message"].startswith("syntax error at 2:")
    # At the syntax error, where the message says it is.
    assert not_linted["location"] == {"row": 2, "column": 9} and not_linted["noqa_row"] is None


def test_json_lines_is_the_json_items_one_per_line(amplint, tree):
    lines = amplint("--output-format", "json-lines", ".", cwd=tree).stdout.splitlines()
    assert [json.loads(line) for line in lines] == json.loads(amplint("--output-format", "json", ".", cwd=tree).stdout)


def test_junit(amplint, tree):
    result = amplint("--output-format", "junit", ".", cwd=tree)
    root = ET.fromstring(result.stdout)
    assert root.tag == "testsuites" and root.get("name") == "amplint"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "1")
    cases = {case.get("name"): case for case in root.iter("testcase")}
    clip = cases["amplint.AMP003"]
    assert (clip.get("classname"), clip.get("line"), clip.get("column")) == ("train", "8", "5")
    failure = clip.find("failure")
    assert failure.get("message") == TITLE and failure.get("type") == "error"
    assert "Call `scaler.unscale_(optimizer)`" in failure.text
    # A warning does not fail the run by default, so it is no failed test: it says what it found.
    stale = cases["amplint.AMP100"]
    assert stale.find("failure") is None
    assert stale.find("system-out").text.startswith("warning (does not fail at --fail-level error): stale.py:2:")
    assert cases["amplint.file-not-linted"].find("error").get("message").startswith("syntax error")
    clean = ET.fromstring(amplint("--output-format", "junit", "stale.py", "--ignore", "AMP100", cwd=tree).stdout)
    assert [case.get("name") for case in clean.iter("testcase")] == ["No errors found"]


@pytest.mark.parametrize("fail_level", ["error", "warning"])
def test_junit_fails_what_the_exit_code_fails(amplint, tree, fail_level):
    """A CI system reading the report and one reading the exit code see the same verdict."""
    result = amplint("--no-cache", "--output-format", "junit", "--fail-level", fail_level, "stale.py", cwd=tree)
    root = ET.fromstring(result.stdout)
    failed = [case.find("failure").get("type") for case in root.iter("testcase") if case.find("failure") is not None]
    assert (result.returncode, failed) == ((0, []) if fail_level == "error" else (1, ["warning"]))
    assert root.get("failures") == root.find("testsuite").get("failures") == str(len(failed))


def test_gitlab_code_quality(amplint, tree, tmp_path):
    env = {"CI_PROJECT_DIR": str(tree)}
    (tree / "sub").mkdir()
    (tree / "sub" / "again.py").write_text(BUGGY)
    result = amplint("--output-format", "gitlab", ".", cwd=tree / "sub", env=env)
    issues = json.loads(result.stdout)
    assert [issue["location"]["path"] for issue in issues] == ["sub/again.py"]
    (issue,) = issues
    assert issue["check_name"] == "AMP003" and issue["severity"] == "major"
    assert issue["description"] == f"AMP003 {TITLE}"
    assert issue["location"]["positions"] == {"begin": {"line": 8, "column": 5}, "end": {"line": 8, "column": 60}}
    everything = json.loads(amplint("--output-format", "gitlab", ".", cwd=tree, env=env).stdout)
    severities = {issue["check_name"]: issue["severity"] for issue in everything}
    assert severities == {"AMP003": "major", "AMP100": "minor", "amplint/file-not-linted": "critical"}
    fingerprints = [issue["fingerprint"] for issue in everything]
    assert len(set(fingerprints)) == len(fingerprints)
    # Stable across runs: GitLab compares them to tell new findings from old.
    again = json.loads(amplint("--output-format", "gitlab", ".", cwd=tree, env=env).stdout)
    assert [issue["fingerprint"] for issue in again] == fingerprints


def test_pylint(amplint, tree):
    result = amplint("--output-format", "pylint", ".", cwd=tree)
    assert result.stdout.splitlines() == [
        "stale.py:2: [AMP100] Unused `noqa` directive (unused: `AMP003`)",
        f"train.py:8: [AMP003] {TITLE}",
        "broken.py:2: [amplint] could not lint this file: syntax error at 2:9: '(' was never closed",
    ]


def test_severity_reaches_github_and_sarif(amplint, tree):
    github = amplint("--output-format", "github", "stale.py", "train.py", cwd=tree).stdout.splitlines()
    assert github[0].startswith("::warning file=stale.py,line=2,col=20,")
    assert github[1].startswith("::error file=train.py,line=8,")
    assert "%0Ahelp: The loss scale is 65536 at start" in github[1]
    sarif = json.loads(amplint("--output-format", "sarif", "stale.py", "train.py", cwd=tree).stdout)
    run = sarif["runs"][0]
    assert [(r["ruleId"], r["level"]) for r in run["results"]] == [("AMP100", "warning"), ("AMP003", "error")]
    levels = {rule["id"]: rule["defaultConfiguration"]["level"] for rule in run["tool"]["driver"]["rules"]}
    assert levels["AMP100"] == "warning" and levels["AMP003"] == "error"
    assert run["results"][1]["message"]["text"].startswith(TITLE + ". The loss scale")


def test_output_file(amplint, tree):
    result = amplint("--output-format", "json", "-o", "reports/amplint.json", "train.py", cwd=tree)
    assert result.returncode == 1 and result.stdout == ""
    assert json.loads((tree / "reports" / "amplint.json").read_text())[0]["code"] == "AMP003"
    # A file is not a terminal: no colour in it, even with a colour-forcing terminal setting.
    amplint("--output-file", "out.txt", "train.py", cwd=tree, env={"FORCE_COLOR": "1"})
    assert "\033[" not in (tree / "out.txt").read_text() and "--> train.py:8:5" in (tree / "out.txt").read_text()
    bad = amplint("-o", "train.py/x.txt", "train.py", cwd=tree)
    assert bad.returncode == 2 and "cannot write" in bad.stderr


def test_statistics_honours_json(amplint, tree):
    (tree / "again.py").write_text(BUGGY)
    result = amplint("--statistics", "--output-format", "json", ".", cwd=tree)
    assert json.loads(result.stdout) == [
        {"code": "AMP003", "name": "clip-before-unscale", "count": 2, "fixable": True},
        {"code": "AMP100", "name": "unused-noqa", "count": 1, "fixable": True},
        {"code": None, "name": "files-not-linted", "count": 1, "fixable": False},
    ]
    text = amplint("--statistics", ".", cwd=tree).stdout
    assert text.splitlines()[:2] == ["2\tAMP003\t[*] clip-before-unscale", "1\tAMP100\t[*] unused-noqa"]


@pytest.mark.parametrize(
    "choice, env, tty, expected",
    [
        ("auto", {}, True, True),
        ("auto", {}, False, False),
        ("auto", {"NO_COLOR": "1"}, True, False),
        ("auto", {"NO_COLOR": ""}, True, True),  # no-color.org: only a non-empty value counts
        ("auto", {"FORCE_COLOR": "1"}, False, True),
        ("auto", {"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, True),  # as ruff: FORCE_COLOR wins
        ("auto", {"FORCE_COLOR": ""}, False, False),
        ("never", {"FORCE_COLOR": "1"}, True, False),  # the command line wins
        ("always", {"NO_COLOR": "1"}, False, True),
    ],
)
def test_colour_choice(choice, env, tty, expected):
    class Stream(io.StringIO):
        def isatty(self):
            return tty

    assert use_color(choice, Stream(), env) is expected


def test_force_color_end_to_end(amplint, tree):
    coloured = amplint("--concise", "train.py", cwd=tree, env={"FORCE_COLOR": "1"}).stdout
    assert "\033[1;31mAMP003\033[0m" in coloured
    assert "\033[" not in amplint("--concise", "train.py", cwd=tree).stdout  # a pipe: no colour
    json_out = amplint("--output-format", "json", "train.py", cwd=tree, env={"FORCE_COLOR": "1"}).stdout
    assert "\033[" not in json_out


# --------------------------------------------------------------------------- progress


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_appears_only_after_the_delay_and_is_erased():
    stream = FakeTerminal()
    quick = progress.Progress(3, stream=stream, delay=60)
    for _ in range(3):
        quick.advance()
    quick.close()
    assert stream.getvalue() == ""  # a short run shows nothing
    stream = FakeTerminal()
    slow = progress.Progress(3, stream=stream, delay=0)
    for _ in range(3):
        slow.advance()
    slow.close()
    text = stream.getvalue()
    assert "amplint: 3/3 files linted" in text
    assert text.endswith("\r")  # erased, so the findings start on a clean line
    assert "\n" not in text


def test_progress_is_never_wanted_off_a_terminal_or_in_ci():
    assert progress.wanted(FakeTerminal(), {}) is True
    assert progress.wanted(io.StringIO(), {}) is False
    assert progress.wanted(FakeTerminal(), {"CI": "true"}) is False


def test_a_long_run_shows_progress_on_a_terminal(tmp_path, monkeypatch, capsys):
    for i in range(12):
        (tmp_path / f"m{i}.py").write_text(BUGGY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(progress, "DELAY_SECONDS", 0)
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    monkeypatch.delenv("CI", raising=False)
    assert cli.main(["--output-format", "json", "-j", "1", "."]) == 1
    assert "amplint: 12/12 files linted" in sys.stderr.getvalue()
    assert "files linted" not in capsys.readouterr().out  # stdout stays the JSON
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    cli.main(["-q", "-j", "1", "."])
    assert "files linted" not in sys.stderr.getvalue()


def test_a_short_run_on_a_real_terminal_prints_no_progress(tree):
    # stderr is a real pseudo-terminal; the run is far below the delay.
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    try:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "amplint", "--output-format", "json", "train.py"],
            cwd=tree, stdout=subprocess.PIPE, stderr=follower, env=env, timeout=60,
        )
        elapsed = time.monotonic() - started
        os.close(follower)
        follower = None
        written = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            written += chunk
    finally:
        if follower is not None:
            os.close(follower)
        os.close(leader)
    assert result.returncode == 1
    # The delay is wall-clock time: on a loaded machine the whole run (start-up included) may
    # outlast it, and then a progress line is allowed. A run shorter than it shows none.
    if elapsed < progress.DELAY_SECONDS:
        assert b"files linted" not in written
    assert json.loads(result.stdout)[0]["code"] == "AMP003"


# --------------------------------------------------------------------------- show, did you mean


def test_show_files(amplint, tree):
    (tree / "build").mkdir()
    (tree / "build" / "gen.py").write_text(BUGGY)
    (tree / "nb.ipynb").write_text("{}")
    result = amplint("--show-files", ".", cwd=tree)
    assert result.returncode == 0
    assert result.stdout.splitlines() == ["broken.py", "nb.ipynb", "stale.py", "train.py"]
    assert amplint("--show-files", "--extend-exclude", "stale.py", cwd=tree).stdout.splitlines() == [
        "broken.py", "nb.ipynb", "train.py"
    ]


def test_show_settings(amplint, tree):
    (tree / "pyproject.toml").write_text(
        '[tool.amplint]\nignore = ["AMP006"]\nextend-exclude = ["generated"]\n'
        'per-file-ignores = { "scripts/*.py" = ["AMP004"] }\n'
    )
    result = amplint("--show-settings", "--output-format", "sarif", cwd=tree)
    assert result.returncode == 0
    settings = dict(line.split(" = ", 1) for line in result.stdout.splitlines())
    assert settings["settings-file"] == json.dumps(str(tree / "pyproject.toml"))
    rules = json.loads(settings["rules"])
    assert "AMP006 (backward-inside-autocast)" not in rules and "AMP100 (unused-noqa)" in rules
    assert json.loads(settings["extend-exclude"]) == ["generated"]
    assert settings["per-file-ignores"] == '{ "scripts/*.py" = ["AMP004"] }'
    assert settings["output-format"] == '"sarif"'
    # The command line's --select replaces the configured selection, as in a real run.
    selected = amplint("--show-settings", "--select", "AMP006", cwd=tree).stdout
    assert 'rules = ["AMP006 (backward-inside-autocast)"]' in selected
    assert "no [tool.amplint] found" in amplint("--show-settings", "--isolated", cwd=tree).stdout


@pytest.mark.parametrize(
    "typed, meant", [("chek", "check"), ("rules", "rule"), ("verfy", "verify"), ("sever", "server"), ("lsp", "server")]
)
def test_did_you_mean(amplint, tmp_path, typed, meant):
    result = amplint(typed, cwd=tmp_path)
    assert result.returncode == 2
    assert f"did you mean `amplint {meant}`?" in result.stderr


def test_a_path_that_looks_like_a_command_is_still_a_path(amplint, tmp_path):
    (tmp_path / "chek").mkdir()
    (tmp_path / "chek" / "train.py").write_text(BUGGY)
    assert amplint("chek", cwd=tmp_path).returncode == 1
    missing = amplint("trian.py", cwd=tmp_path)
    assert missing.returncode == 2 and "did you mean" not in missing.stderr
