"""AMP100 unused-noqa: `# noqa` codes that suppressed nothing, and `AMPxxx` codes no rule has."""

import json
import textwrap

import pytest

from amplint.lint.engine import lint_source, lint_text
from amplint.rules import ALL_RULES

# AMP004 (line 7) and AMP006 (line 6).
LOOP = textwrap.dedent(
    """\
    import torch

    with torch.autocast("cuda", dtype=torch.bfloat16):
        for x in loader:
            loss = model(x).sum()
            loss.backward(){backward}
            optimizer.step(){step}
    """
)


def loop(backward="", step=""):
    return LOOP.format(backward=backward, step=step)


def found(source, rules=ALL_RULES):
    return [(f.row, f.column, f.code, f.message) for f in lint_source(source, "t.py", rules).findings]


def test_a_used_directive_is_silent():
    assert found(loop("  # noqa: AMP006", "  # noqa: AMP004")) == []


def test_an_unused_code_is_reported_at_the_comment():
    (finding,) = lint_text(loop("  # noqa: AMP006", "  # noqa: AMP004, AMP003"))
    assert (finding.row, finding.column, finding.end_column) == (7, 27, 49)
    assert finding.code == "AMP100" and finding.name == "unused-noqa" and finding.severity == "warning"
    assert finding.message == "Unused `noqa` directive (unused: `AMP003`)"
    assert finding.help == "amplint reports no `AMP003` finding on this line: remove `AMP003` from the comment."


def test_a_directive_whose_only_code_is_unused_should_go():
    source = "import torch\nx = torch.ones(1)  # noqa: AMP003\n"
    (finding,) = lint_text(source)
    assert (finding.row, finding.column, finding.code) == (2, 20, "AMP100")
    assert finding.help.endswith(": remove the comment.")


def test_unknown_amplint_codes_are_reported_other_tools_codes_are_not():
    source = loop("  # noqa: AMP006, AMP03, E501", "  # noqa: AMP004, W291")
    (finding,) = lint_text(source)
    assert finding.row == 6
    assert finding.message == "Unused `noqa` directive (unknown: `AMP03`)"
    assert "`AMP03` is no amplint rule" in finding.help


def test_plain_noqa_belongs_to_every_linter_and_is_never_reported():
    assert found("import torch\nx = torch.ones(1)  # noqa\ny = 2  # NOQA: E501\n") == []


def test_file_level_directives():
    # `# amplint: noqa: AMP004` exempts the file from AMP004, and is used.
    assert [f[2] for f in found("# amplint: noqa: AMP004\n" + loop())] == ["AMP006"]
    # Unused file-level code.
    codes = found("# amplint: noqa: AMP002\n" + loop("  # noqa: AMP006", "  # noqa: AMP004"))
    assert codes == [(1, 1, "AMP100", "Unused `noqa` directive (unused: `AMP002`)")]
    # A blanket `# amplint: noqa` is amplint's own: reported when it suppressed nothing.
    assert found("# amplint: noqa\nimport torch\n") == [(1, 1, "AMP100", "Unused blanket `# amplint: noqa` directive")]
    assert found("# amplint: noqa\n" + loop()) == []


def test_codes_whose_rules_did_not_run_are_not_judged():
    source = loop("  # noqa: AMP006", "  # noqa: AMP004")
    only_unused_noqa = [rule for rule in ALL_RULES if rule.code in ("AMP006", "AMP100")]
    # AMP004 did not run: its directive cannot be judged, so it is left alone.
    assert found(source, only_unused_noqa) == []
    # A blanket `# amplint: noqa` is judged only when every rule ran.
    assert found("# amplint: noqa\nimport torch\n", only_unused_noqa) == []
    # Unknown codes are unknown whatever ran.
    assert [f[2] for f in found("x = 1  # noqa: AMP999\n", only_unused_noqa)] == ["AMP100"]


def test_only_a_directive_naming_amp100_suppresses_it():
    assert found("import torch\nx = torch.ones(1)  # noqa: AMP003, AMP100\n") == []
    assert found("# amplint: noqa: AMP100\nimport torch\nx = torch.ones(1)  # noqa: AMP003\n") == []
    # A blanket directive does not: a stale comment must not hide its own report.
    assert [f[2] for f in found("# amplint: noqa\nimport torch\n")] == ["AMP100"]


def test_a_noqa_in_a_string_is_not_a_directive():
    assert found('s = "# noqa: AMP003"\n') == []


def test_files_without_amp_code_are_still_checked_but_not_parsed(monkeypatch):
    import amplint.lint.engine as engine

    def no_parse(*_):
        raise AssertionError("parsed a file with no AMP code")

    monkeypatch.setattr(engine.cst, "parse_module", no_parse)
    result = lint_source("import os\nx = 1  # noqa: AMP003\ny = 2  # noqa: E501\n", "t.py", ALL_RULES)
    assert [(f.row, f.code) for f in result.findings] == [(2, "AMP100")]
    assert result.source is not None  # for the code frame


@pytest.mark.parametrize(
    "comment, reported",
    [
        ("# noqa: E501", False),
        ("# noqa", False),
        ("# NOQA:E501,W291", False),
        ("# noqa: AMP003", True),
        ("# NOQA:amp003", True),
        ("# noqa: E501, AMP999", True),
        ("# amplint: noqa: AMP003", True),
    ],
)
def test_only_files_whose_directives_can_be_reported_are_tokenized(monkeypatch, comment, reported):
    import amplint.lint.engine as engine

    tokenized = []
    real = engine.parse_suppressions
    monkeypatch.setattr(engine, "parse_suppressions", lambda source: tokenized.append(source) or real(source))
    result = lint_source(f"import os\nx = 1  {comment}\n", "t.py", ALL_RULES)
    assert bool(tokenized) == reported
    assert [f.code for f in result.findings] == (["AMP100"] if reported else [])


def test_a_file_level_blanket_directive_with_nothing_to_suppress_is_reported():
    assert [f.code for f in lint_source("# amplint: noqa\nimport os\n", "t.py", ALL_RULES).findings] == ["AMP100"]


def test_the_command_line_selects_and_ignores_it(amplint, tmp_path):
    (tmp_path / "stale.py").write_text("import torch\nx = torch.ones(1)  # noqa: AMP003\n")
    (tmp_path / "train.py").write_text(loop("  # noqa: AMP006", "  # noqa: AMP004"))
    result = amplint("--output-format", "json", "--fail-level", "warning", ".", cwd=tmp_path)
    assert result.returncode == 1
    assert [(i["code"], i["location"]["row"]) for i in json.loads(result.stdout)] == [("AMP100", 2)]
    assert amplint("--fail-level", "warning", "--ignore", "AMP100", ".", cwd=tmp_path).returncode == 0
    only = amplint("--output-format", "json", "--select", "AMP100", ".", cwd=tmp_path)
    # With only AMP100 selected, no other rule ran: no directive can be judged unused.
    assert json.loads(only.stdout) == []
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nper-file-ignores = { "stale.py" = ["AMP003"] }\n')
    assert amplint(".", cwd=tmp_path).returncode == 0  # AMP003 did not run on stale.py


def test_in_a_notebook_cell(amplint, tmp_path):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Train"]},
        {"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
         "source": ["import torch\n", "x = torch.ones(1)  # noqa: AMP003\n"]},
    ]
    notebook = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "n.ipynb").write_text(json.dumps(notebook))
    result = amplint("--concise", "n.ipynb", cwd=tmp_path)
    assert result.stdout.splitlines()[0] == "n.ipynb:cell 2:2:20: AMP100 [*] Unused `noqa` directive (unused: `AMP003`)"
    amplint("--fix", "n.ipynb", cwd=tmp_path)
    fixed = json.loads((tmp_path / "n.ipynb").read_text())
    assert fixed["cells"][1]["source"] == ["import torch\n", "x = torch.ones(1)\n"]


@pytest.mark.parametrize("rule", [r for r in ALL_RULES if r.code != "AMP100"], ids=lambda r: r.code)
def test_every_invalid_example_with_its_noqa_is_clean(rule):
    # The suppression each rule documents works, and is then not reported as unused.
    for example in rule.INVALID:
        lines = example.source.split("\n")
        for row, _ in example.at:
            lines[row - 1] += f"  # noqa: {rule.code}"
        suppressed = "\n".join(lines)
        try:
            findings = lint_text(suppressed, rules=[rule, *[r for r in ALL_RULES if r.code == "AMP100"]])
        except ValueError:
            continue  # a noqa appended inside a multi-line string would not be a comment
        assert [f for f in findings if f.code in (rule.code, "AMP100")] == [], suppressed


# --------------------------------------------------------------------------- the fix (ruff's RUF100)

from amplint.lint.fix_loop import fix_source, wanted_by  # noqa: E402


@pytest.mark.parametrize(
    "before, after",
    [
        # One code of two unused: that code goes, the other stays.
        (loop("  # noqa: AMP006", "  # noqa: AMP004, AMP003"), loop("  # noqa: AMP006", "  # noqa: AMP004")),
        # Nothing used: the directive goes, with the space before it.
        (loop("  # noqa: AMP006", "  # noqa: AMP004") + "y = 2  # noqa: AMP003\n", loop("  # noqa: AMP006", "  # noqa: AMP004") + "y = 2\n"),
        # Other tools' codes stay, and so does their spelling.
        ("x = 1  #NOQA:AMP003,E501\n", "x = 1  #NOQA:E501\n"),
        # An unknown code is taken out too.
        ("x = 1  # noqa: AMP030\n", "x = 1\n"),
        # Other text in the comment stays a comment.
        ("x = 1  # noqa: AMP003 kept for the 1.x branch\n", "x = 1  # kept for the 1.x branch\n"),
        ("x = 1  # type: ignore  # noqa: AMP003\n", "x = 1  # type: ignore\n"),
        # A line that held only the directive goes, line ending and all.
        ("# amplint: noqa: AMP002\r\nx = 1\r\n", "x = 1\r\n"),
        ("import torch\n# amplint: noqa\n", "import torch\n"),
    ],
)
def test_the_fix_removes_what_suppressed_nothing(before, after):
    outcome = fix_source(before, "t.py", ALL_RULES, wanted_by(False))
    assert outcome.source == after
    assert dict(outcome.applied) == {"AMP100": 1}
    assert not [f for f in lint_text(after) if f.code == "AMP100"]


def test_the_fix_is_offered_safe_and_the_edit_shown_is_the_fix_applied():
    from test_fix import apply_edits

    source = "import torch\nx = torch.ones(1)  # noqa: AMP003, E501\n# amplint: noqa: AMP002\n"
    findings = [f for f in lint_text(source) if f.code == "AMP100"]
    assert [(f.fix.applicability, f.fix.title) for f in findings] == [
        ("safe", "Remove `AMP003` from the directive"),
        ("safe", "Remove the unused `# amplint: noqa: AMP002` directive"),
    ]
    edits = [edit for f in findings for edit in f.fix.edits]
    assert apply_edits(source, edits) == fix_source(source, "t.py", ALL_RULES, wanted_by(False)).source


def test_a_directive_another_fix_leaves_unused_goes_in_the_same_run(amplint, tmp_path):
    """AMP014's fix settles the finding its neighbour's directive was about: the directive, now
    stale, is removed too; a directive that still suppresses is kept, and so is AMP100's own."""
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
        "y = 1  # noqa: AMP003\n"
        "x = torch.cuda.amp.GradScaler()  # noqa: AMP014\n"
        "z = 2  # noqa: AMP003, AMP100\n"
    )
    kept = amplint("--no-cache", "--fix", "--unfixable", "AMP100", "train.py", cwd=tmp_path)
    assert "y = 1  # noqa: AMP003\n" in (tmp_path / "train.py").read_text()
    assert "Unused `noqa` directive" in kept.stdout
    result = amplint("--no-cache", "--fix", "--show-fixes", "train.py", cwd=tmp_path)
    assert (tmp_path / "train.py").read_text() == (
        "import torch\n"
        'scaler = torch.amp.GradScaler("cuda")\n'
        "y = 1\n"
        "x = torch.cuda.amp.GradScaler()  # noqa: AMP014\n"
        "z = 2  # noqa: AMP003, AMP100\n"
    )
    assert "    1 × AMP100 (unused-noqa)" in result.stdout.splitlines()
