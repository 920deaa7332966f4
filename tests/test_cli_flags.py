"""The ruff habits: `--add-noqa`, `--ignore-noqa`, `--exit-non-zero-on-fix`, `--watch` and
`amplint rule CODE --output-format json`."""

import json
import os
import subprocess
import sys
import time

import pytest

from amplint.lint.diagnostics import FileResult
from amplint.lint.noqa import apply_line_edits, edits_adding_codes, parse_suppressions
from amplint.rules import ALL_RULES
from conftest import BUGGY
from test_cli import CLEAN, LOOP_IN_AUTOCAST
from test_notebooks import LOOP, SETUP, notebook

CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"


def add(source, rows):
    edits, impossible = edits_adding_codes(source, rows)
    return apply_line_edits(source, edits), impossible


# --------------------------------------------------------------------------- --add-noqa


def test_edits_add_a_directive_or_merge_into_the_lines_own():
    source = "a = 1\nb = 2  # noqa: E501\nc = 3  # type: ignore\nd = 4  # noqa\ne = 5  # noqa: AMP003\n"
    text, impossible = add(source, {1: ["AMP003", "AMP006"], 2: ["AMP003"], 3: ["AMP004"], 4: ["AMP004"], 5: ["AMP003", "AMP004"]})
    assert impossible == []
    assert text.splitlines() == [
        "a = 1  # noqa: AMP003, AMP006",
        "b = 2  # noqa: E501, AMP003",
        "c = 3  # type: ignore  # noqa: AMP004",
        "d = 4  # noqa",  # a blanket directive already covers it
        "e = 5  # noqa: AMP003, AMP004",
    ]
    # Again: nothing left to add.
    assert edits_adding_codes(text, {1: ["AMP003"], 2: ["AMP003"], 3: ["AMP004"], 5: ["AMP004"]}) == ([], [])


def test_edits_never_break_a_line_a_comment_cannot_end():
    # Inside a string that goes on, and after a backslash: the directive goes where the
    # string or the statement ends (ruff's rule), and suppresses the finding there.
    source = 'x = f(1); s = """one\ntwo"""\ny = 1 + \\\n    2\nz = 3\n'
    text, impossible = add(source, {1: ["AMP003"], 3: ["AMP004"], 5: ["AMP006"]})
    assert impossible == []
    assert text == 'x = f(1); s = """one\ntwo"""  # noqa: AMP003\ny = 1 + \\\n    2  # noqa: AMP004\nz = 3  # noqa: AMP006\n'
    compile(text, "t.py", "exec")
    suppressions = parse_suppressions(text)
    assert suppressions.suppresses(1, "AMP003") and suppressions.suppresses(3, "AMP004")
    assert not suppressions.suppresses(2, "AMP004")


def test_edits_keep_line_endings_and_leave_untokenizable_sources_alone():
    text, _ = add("a = 1\r\nb = 2\r\n", {1: ["AMP003"]})
    assert text == "a = 1  # noqa: AMP003\r\nb = 2\r\n"
    assert edits_adding_codes("a = 1\rb = 2\n", {1: ["AMP003"]}) == ([], [1])  # a lone carriage return
    assert edits_adding_codes('s = """never closed\n', {1: ["AMP003"]}) == ([], [1])


def test_add_noqa_marks_every_finding_and_the_run_is_then_clean(amplint, project):
    root = project(
        {
            "train.py": BUGGY,
            "loop.py": LOOP_IN_AUTOCAST.replace("optimizer.step()", "optimizer.step()  # noqa: E501"),
            "clean.py": CLEAN,
            "latin.py": "# -*- coding: latin-1 -*-\n# caf\xe9\n" + BUGGY,
        }
    )
    (root / "latin.py").write_bytes(("# -*- coding: latin-1 -*-\n# caf\xe9\n" + BUGGY).encode("latin-1"))
    before = amplint("--output-format", "json", ".", cwd=root)
    assert len(json.loads(before.stdout)) == 4
    result = amplint("--add-noqa", ".", cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and "Added 4 noqa directives in 3 files." in result.stderr
    assert f"    {CLIP}  # noqa: AMP003\n" in (root / "train.py").read_text()
    loop = (root / "loop.py").read_text()
    assert "loss.backward()  # noqa: AMP006\n" in loop and "optimizer.step()  # noqa: E501, AMP004\n" in loop
    assert (root / "clean.py").read_text() == CLEAN
    assert (root / "latin.py").read_bytes().decode("latin-1").startswith("# -*- coding: latin-1 -*-\n# caf\xe9\n")
    after = amplint(".", cwd=root)
    assert after.returncode == 0, after.stdout
    again = amplint("--add-noqa", ".", cwd=root)
    assert again.returncode == 0 and "Added 0 noqa directives." in again.stderr


def test_add_noqa_leaves_notebooks_and_unused_directives_alone(amplint, project):
    root = project({"explore.ipynb": notebook(SETUP, LOOP), "stale.py": "import torch\nx = torch.ones(1)  # noqa: AMP003\n"})
    before = {path.name: path.read_bytes() for path in root.iterdir()}
    result = amplint("--add-noqa", ".", cwd=root)
    assert result.returncode == 0
    assert "explore.ipynb: no `# noqa` added: notebooks are not edited by --add-noqa" in result.stderr
    assert "Added 0 noqa directives." in result.stderr
    assert {path.name: path.read_bytes() for path in root.iterdir() if path.name in before} == before


def test_add_noqa_is_not_combined_with_fixing_or_standard_input(amplint, project):
    root = project({"train.py": BUGGY})
    for args in (["--fix"], ["--diff"], ["--fix-only"], ["-", "--stdin-filename", "x.py"]):
        result = amplint("--add-noqa", *args, cwd=root, input=BUGGY)
        assert result.returncode == 2 and "--add-noqa" in result.stderr, args
    assert (root / "train.py").read_text() == BUGGY


def test_add_noqa_with_a_file_that_cannot_be_linted_exits_2(amplint, project):
    root = project({"train.py": BUGGY, "broken.py": "import torch\nscaler = torch.amp.GradScaler()\ndef f(:\n"})
    result = amplint("--add-noqa", ".", cwd=root)
    assert result.returncode == 2 and "broken.py" in result.stderr
    assert "# noqa: AMP003" in (root / "train.py").read_text()


# --------------------------------------------------------------------------- --ignore-noqa


def test_ignore_noqa_reports_what_the_directives_suppress(amplint, project):
    root = project(
        {
            "line.py": BUGGY.replace(CLIP, CLIP + "  # noqa: AMP003"),
            "file.py": "# amplint: noqa\n" + BUGGY,
            "stale.py": "import torch\nx = torch.ones(1)  # noqa: AMP003\n",
        }
    )
    quiet = amplint("--output-format", "json", ".", cwd=root)
    assert [item["code"] for item in json.loads(quiet.stdout)] == ["AMP100"]  # stale.py's unused directive
    # Cached results of the run above must not answer for this one.
    loud = amplint("--output-format", "json", "--ignore-noqa", ".", cwd=root)
    found = sorted((os.path.basename(item["filename"]), item["code"]) for item in json.loads(loud.stdout))
    assert found == [("file.py", "AMP003"), ("line.py", "AMP003")]  # and no unused-directive reports
    assert loud.returncode == 1
    assert json.loads(amplint("--output-format", "json", ".", cwd=root).stdout) == json.loads(quiet.stdout)
    assert "AMPLINT_IGNORE_NOQA" not in os.environ


def test_ignore_noqa_lets_fix_apply_to_suppressed_lines(amplint, project):
    root = project({"train.py": BUGGY.replace(CLIP, CLIP + "  # noqa: AMP003")})
    assert amplint("--fix", "train.py", cwd=root).returncode == 0
    assert "unscale_" not in (root / "train.py").read_text()
    assert amplint("--fix", "--ignore-noqa", "train.py", cwd=root).returncode == 0
    assert "scaler.unscale_(optimizer)" in (root / "train.py").read_text()


# --------------------------------------------------------------------------- --exit-non-zero-on-fix


def test_exit_non_zero_on_fix(amplint, project):
    root = project({"train.py": BUGGY})
    assert amplint("--fix", "--exit-non-zero-on-fix", "train.py", cwd=root).returncode == 1
    assert "scaler.unscale_(optimizer)" in (root / "train.py").read_text()
    # Nothing left to fix: 0.
    assert amplint("--fix", "--exit-non-zero-on-fix", "train.py", cwd=root).returncode == 0
    (root / "train.py").write_text(BUGGY)
    assert amplint("--fix", "train.py", cwd=root).returncode == 0  # without the flag, as before
    (root / "train.py").write_text(BUGGY)
    assert amplint("--fix-only", "--exit-non-zero-on-fix", "train.py", cwd=root).returncode == 1
    (root / "train.py").write_text(BUGGY)
    assert amplint("--fix", "--exit-non-zero-on-fix", "--exit-zero", "train.py", cwd=root).returncode == 0
    # Standard input: what was fixed is on standard output, and the exit says so.
    piped = amplint("--fix", "--exit-non-zero-on-fix", "-", "--stdin-filename", "t.py", cwd=root, input=BUGGY)
    assert piped.returncode == 1 and "scaler.unscale_(optimizer)" in piped.stdout


# --------------------------------------------------------------------------- --watch


def _read_until(stream, marker, deadline):
    seen = ""
    while marker not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"no {marker!r} in {seen!r}")
        line = stream.readline()
        if not line:
            raise AssertionError(f"the watch ended before {marker!r}: {seen!r}")
        seen += line
    return seen


@pytest.mark.slow(seconds=5)
def test_watch_lints_again_when_a_file_changes(project):
    root = project({"train.py": BUGGY})
    process = subprocess.Popen(
        [sys.executable, "-m", "amplint", "--watch", "--watch-runs", "3", "--concise", "--no-cache", "."],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 120
        first = _read_until(process.stdout, "watching for file changes", deadline)
        assert "train.py:8:5: AMP003" in first
        (root / "train.py").write_text(CLEAN)
        second = _read_until(process.stdout, "watching for file changes", deadline)
        assert "file change detected" in second and "All checks passed!" in second
        # A new file in a watched directory is a change too.
        (root / "other.py").write_text(BUGGY)
        third = process.communicate(timeout=120)[0]
        assert "other.py:8:5: AMP003" in third
        assert process.returncode == 1  # the last run's exit code
    finally:
        process.kill()
        process.wait()


def test_watch_is_not_for_standard_input(amplint):
    result = amplint("--watch", "-", input="")
    assert result.returncode == 2 and "--watch" in result.stderr


# --------------------------------------------------------------------------- rule --output-format json


def test_rule_as_json(amplint):
    page = amplint("rule", "AMP003", "--output-format", "json")
    assert page.returncode == 0
    rule = json.loads(page.stdout)
    assert rule["code"] == "AMP003" and rule["name"] == "clip-before-unscale" and rule["linter"] == "amplint"
    assert rule["fix"] == "safe" and rule["severity"] == "error"
    assert rule["explanation"] == amplint("rule", "AMP003").stdout
    listing = json.loads(amplint("rule", "--all", "--output-format", "json").stdout)
    assert [item["code"] for item in listing] == [rule.code for rule in ALL_RULES]
    assert amplint("rule", "AMP003", "--output-format", "xml").returncode == 2


def test_add_noqa_leaves_a_file_that_changed_since_it_was_linted(tmp_path):
    """The rows are the lint's: on a file edited meanwhile they would mark other lines."""
    from amplint.lint.add_noqa import add_noqa
    from amplint.lint.engine import lint_text

    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    result = FileResult(str(path), findings=lint_text(BUGGY, path=str(path)), source=BUGGY)
    assert result.findings
    path.write_text("# a line added by an editor meanwhile\n" + BUGGY)
    added = add_noqa([result], [str(tmp_path)])
    assert added.directives == 0 and "changed while amplint ran" in added.errors[0].message
    assert path.read_text() == "# a line added by an editor meanwhile\n" + BUGGY
