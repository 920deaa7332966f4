"""Output that cannot be turned against its reader (reliability round 3, D7, D9, D10).

A repository controls its file names and the code that messages quote. In the formats people
read (full, concise, pylint, the GitHub log, JUnit views, the notes on standard error) a
control character, a line break, a bidi override or a non-UTF-8 byte is written as an escape
(`\\x1b`, `\\n`, `\\xff`); GitLab survives a non-UTF-8 name; JUnit is always well-formed XML;
json, json-lines and SARIF keep the exact path (their own escaping is already safe).
"""

import json
import re
import sys
import xml.etree.ElementTree as ET

import pytest

from amplint.output import FORMATS
from amplint.escape import unicode_safe, visible
from conftest import BUGGY

CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
# Raw ESC/BEL/VT/DEL, NEL and a right-to-left override inside a string literal that the
# AMP003 title quotes (short enough to be quoted whole): retitle the terminal.
PAYLOAD = "\x1b]0;pwn\x07\x0b\x7f\x85\u202e"
EVIL_CALL = f"torch.nn.utils.clip_grad_norm_(p, 1, foreach='{PAYLOAD}')"
EVIL = BUGGY.replace(CLIP, EVIL_CALL)
CONTROL_NAME = "bad\x01ctl\x1b[31m.py"
NEWLINE_NAME = "x\n::error file=a.py,line=1::fake.py"
NOT_UTF8_NAME = b"non\xffutf8.py"
BROKEN_NAME = "broken\x07\r.py"  # not linted: a syntax error, named on standard error
BROKEN = "import torch\nwith torch.autocast('cuda'):\n    x = (\n"

HUMAN = ["full", "concise", "pylint", "github", "junit"]
EXACT = ["json", "json-lines", "sarif"]
ALL = [name for name in FORMATS if name != "text"]
# What may be raw in a human format: tab and the line feed that ends each line.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


@pytest.fixture
def hostile(tmp_path):
    for name in (CONTROL_NAME, NEWLINE_NAME, "evil.py"):
        (tmp_path / name).write_text(EVIL if name == "evil.py" else BUGGY)
    with open(bytes(tmp_path) + b"/" + NOT_UTF8_NAME, "wb") as handle:
        handle.write(BUGGY.encode())
    (tmp_path / BROKEN_NAME).write_text(BROKEN)
    return tmp_path


def test_visible_escapes_what_acts_on_a_terminal():
    assert visible("a\nb\rc") == "a\\nb\\rc"
    assert visible("\x1b[2J\x07\x00\x0b\x0c\x7f") == "\\x1b[2J\\x07\\x00\\x0b\\x0c\\x7f"
    assert visible("\x85\x9b") == "\\x85\\x9b"  # C1: NEL, CSI
    assert visible("\u202e\u2066\u200f\u061c\u2028") == "\\u202e\\u2066\\u200f\\u061c\\u2028"
    assert visible("non\udcffutf8.py") == "non\\xffutf8.py"  # a non-UTF-8 name's byte
    assert visible("\ud800\ufffe") == "\\ud800\\ufffe"
    # What is safe stays as written: tab, backslashes, quotes, non-ASCII text, emoji.
    text = "\tx = 'a\\nb'  # 損失 café 🙂 \u200b"
    assert visible(text) == text


def test_unicode_safe_only_replaces_what_utf8_cannot_encode():
    assert unicode_safe("a\x01\nb\udcffc\ud800") == "a\x01\nb\\xffc\\ud800"
    unicode_safe("non\udcffutf8.py").encode("utf-8")


@pytest.mark.parametrize("output_format", ALL)
def test_every_format_survives_hostile_names_and_code(amplint, hostile, output_format):
    result = amplint("--no-cache", "--output-format", output_format, ".", cwd=hostile)
    assert result.returncode == 2, result.stderr  # findings, and the broken file
    assert "internal error" not in result.stderr
    # UTF-8 throughout, whatever the names' bytes (D7: GitLab crashed here).
    result.stdout.encode("utf-8")
    result.stderr.encode("utf-8")
    # Standard error is read by people (and parsed by GitHub Actions) in every format.
    assert not UNSAFE.search(result.stderr)
    assert "broken\\x07\\r.py: syntax error" in result.stderr
    if output_format in HUMAN:
        assert not UNSAFE.search(result.stdout), repr(UNSAFE.search(result.stdout))
        # (The title folds whitespace, VT and NEL included, to single spaces.)
        assert "\\x1b]0;pwn\\x07 \\x7f \\u202e" in result.stdout
        assert "non\\xffutf8.py" in result.stdout and "bad\\x01ctl\\x1b[31m.py" in result.stdout
        assert "x\\n::error file=a.py" in result.stdout or "x\\n%3A%3Aerror file=a.py%2C" in result.stdout
    # No line the linted tree wrote can start a GitHub workflow command.
    commands = [line for line in result.stdout.splitlines() if line.startswith("::")]
    if output_format == "github":
        assert len(commands) == 5 and all(line.startswith("::error file=") for line in commands)
        assert len(result.stdout.splitlines()) == 5
    else:
        assert not commands


def test_junit_is_well_formed_xml(amplint, hostile):
    result = amplint("--no-cache", "--output-format", "junit", ".", cwd=hostile)
    root = ET.fromstring(result.stdout)
    suites = sorted(suite.get("name") for suite in root.iter("testsuite"))
    assert suites == ["bad\\x01ctl\\x1b[31m.py", "broken\\x07\\r.py", "evil.py", "non\\xffutf8.py", "x\\n::error file=a.py,line=1::fake.py"]
    messages = [failure.get("message") for failure in root.iter("failure")]
    assert any("\\x1b]0;pwn" in message for message in messages)


def test_junit_of_a_report_with_xml_invalid_characters_parses():
    """Whatever reaches the renderer: every character XML 1.0 forbids, in every field."""
    from amplint.lint.diagnostics import FileError, Finding, RunReport

    forbidden = "".join(map(chr, [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0xD800, 0xDCFF, 0xFFFE, 0xFFFF]))
    finding = Finding(path=f"a{forbidden}.py", row=1, column=1, code="AMP001", message=forbidden, help=forbidden)
    text = FORMATS["junit"](RunReport([finding], [FileError(f"b{forbidden}.py", forbidden)], 2, {}))
    ET.fromstring(text.encode("utf-8"))


@pytest.mark.parametrize("output_format", EXACT)
def test_machine_formats_keep_the_exact_path(amplint, hostile, output_format):
    result = amplint("--no-cache", "--output-format", output_format, ".", cwd=hostile)
    if output_format == "sarif":
        uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in json.loads(result.stdout)["runs"][0]["results"]}
        assert {"bad%01ctl%1B%5B31m.py", "x%0A%3A%3Aerror%20file%3Da.py%2Cline%3D1%3A%3Afake.py", "non%FFutf8.py"} <= uris
        return
    items = json.loads(result.stdout) if output_format == "json" else [json.loads(line) for line in result.stdout.splitlines()]
    names = {item["filename"].rsplit("/", 1)[-1] for item in items}
    assert {CONTROL_NAME, NEWLINE_NAME, "non\udcffutf8.py", BROKEN_NAME} <= names
    assert any("\x1b]0;pwn\x07 \x7f \u202e" in item["message"] for item in items)


def test_gitlab_writes_a_non_utf8_name_with_escapes_and_fingerprints_it(amplint, hostile):
    result = amplint("--no-cache", "--output-format", "gitlab", ".", cwd=hostile)
    issues = json.loads(result.stdout)
    paths = sorted(issue["location"]["path"] for issue in issues)
    # Exact where JSON can say it; the non-UTF-8 byte as an escape.
    assert paths == sorted([CONTROL_NAME, NEWLINE_NAME, "non\\xffutf8.py", "evil.py", BROKEN_NAME])
    assert len({issue["fingerprint"] for issue in issues}) == len(issues)
    # The fingerprint is stable: the same run gives the same ones.
    again = json.loads(amplint("--no-cache", "--output-format", "gitlab", ".", cwd=hostile).stdout)
    assert [issue["fingerprint"] for issue in again] == [issue["fingerprint"] for issue in issues]


def test_the_code_frame_shows_escapes_and_the_carets_stay_under_the_code(amplint, hostile):
    result = amplint("--no-cache", "evil.py", cwd=hostile)
    lines = result.stdout.splitlines()
    code = next(i for i, line in enumerate(lines) if line.startswith("8 |"))
    shown = lines[code][len("8 | "):]
    assert shown == "    " + visible(EVIL_CALL)
    carets = lines[code + 1][len("  | "):]
    assert carets == "    " + "^" * (len(shown) - 4)


def test_with_colour_only_amplints_own_escapes_reach_the_terminal(amplint, hostile):
    result = amplint("--no-cache", "--color", "always", "evil.py", cwd=hostile)
    # Every ESC in the output starts one of amplint's SGR colour codes.
    assert all(match.group(1) is not None for match in re.finditer(r"\x1b(\[[0-9;]*m)?", result.stdout))
    assert "\\x1b]0;pwn" in result.stdout


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file names")
def test_a_real_terminal_process_writes_a_non_utf8_name_in_a_strict_locale(hostile):
    """Standard output in a UTF-8 locale is strict: a raw surrogate would be an internal error."""
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", "amplint", "--no-cache", "--concise", "."],
        cwd=hostile,
        capture_output=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "PYTHONUTF8": "0", "PYTHONIOENCODING": "utf-8:strict"},
    )
    assert result.returncode == 2, result.stderr
    assert b"non\\xffutf8.py:8:5: AMP003" in result.stdout
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", result.stdout + result.stderr)


def test_usage_errors_quote_the_configuration_visibly(amplint, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\n"\\u001b]0;pwn\\u0007\\n::error::x" = 1\n')
    (tmp_path / "train.py").write_text(BUGGY)
    result = amplint("train.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown key(s) in [tool.amplint]: \\x1b]0;pwn\\x07\\n::error::x" in result.stderr
    assert not UNSAFE.search(result.stderr) and result.stderr.count("\n") == 1


@pytest.mark.parametrize("options", [["--show-files"], ["--diff"], ["--fix", "--show-fixes"]])
def test_file_listings_and_diff_headers_escape_names(amplint, tmp_path, options):
    """--show-files, the --diff headers and --show-fixes name files too (the diff's code lines
    stay as written: they must apply)."""
    (tmp_path / CONTROL_NAME).write_text(BUGGY)
    (tmp_path / NEWLINE_NAME).write_text(BUGGY)
    result = amplint("--no-cache", *options, ".", cwd=tmp_path)
    assert "internal error" not in result.stderr
    assert not UNSAFE.search(result.stdout), repr(UNSAFE.search(result.stdout))
    assert not any(line.startswith("::error") for line in result.stdout.splitlines())
    assert visible(CONTROL_NAME) in result.stdout


# Every way a run reports (issue 42, N3: --add-noqa printed names and notes raw). A new mode
# or a new line on standard error that skips the escaping fails here.
MODES = [
    *(["--output-format", name] for name in ALL),
    ["--statistics"],
    ["--statistics", "--output-format", "json"],
    ["--show-files"],
    ["--show-settings"],
    ["--fix"],
    ["--fix", "--show-fixes", "--unsafe-fixes"],
    ["--fix-only"],
    ["--diff"],
    ["--add-noqa"],
    ["--watch", "--watch-runs", "1"],
]
NOTEBOOK_NAME = "x\n::error file=a.py,line=1::pwned.ipynb"
TITLE_NAME = "bad\x1b]0;title\x07.py"


@pytest.mark.parametrize("options", MODES, ids=" ".join)
def test_no_mode_writes_what_a_hostile_name_holds(amplint, tmp_path, options):
    """The report's tree: a notebook whose name starts a workflow command (--add-noqa leaves
    notebooks alone, with a note that names it), a file with a syntax error whose name
    retitles the terminal, and the names of every other kind."""
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": BUGGY}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / NOTEBOOK_NAME).write_text(json.dumps(notebook))
    (tmp_path / TITLE_NAME).write_text("def f(:\n")
    for name in (CONTROL_NAME, NEWLINE_NAME):
        (tmp_path / name).write_text(BUGGY)
    with open(bytes(tmp_path) + b"/" + NOT_UTF8_NAME, "wb") as handle:
        handle.write(BUGGY.encode())
    result = amplint("--no-cache", *options, ".", cwd=tmp_path)
    assert "internal error" not in result.stderr
    for stream in (result.stdout, result.stderr):
        assert not UNSAFE.search(stream), repr(UNSAFE.search(stream))
        commands = [line for line in stream.splitlines() if line.startswith("::")]
        if options[-1] == "github" and stream is result.stdout:
            assert commands and all(line.startswith(("::error file=", "::warning file=")) for line in commands)
            assert not any(line.startswith("::error file=a.py") for line in commands)
        else:
            assert not commands, commands
    if options == ["--add-noqa"]:
        assert "amplint: note: x\\n::error file=a.py,line=1::pwned.ipynb: no `# noqa` added" in result.stderr
        assert "amplint: error: bad\\x1b]0;title\\x07.py: syntax error" in result.stderr
