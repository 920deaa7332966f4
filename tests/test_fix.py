"""`amplint --fix`: what each fix writes, and the guarantees every fix keeps.

A fix is written only if the result is valid Python; applying fixes twice changes nothing the
second time; only the flagged statements change; after a fix its rule no longer reports the
finding; fixes that touch the same statement are applied one per round, never merged.
"""

import json
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amplint.lint.engine import lint_text
from amplint.lint.fix import Fix, still_valid
from amplint.lint.fix_loop import fix_source, wanted_by
from amplint.rules import ALL_RULES
from conftest import BUGGY
from test_notebooks import cell, notebook

ALL = wanted_by(True)
SAFE = wanted_by(False)
# A rule's "Fix safety" section says whether it has a fix, and of which kind.
FIXABLE_RULES = [rule for rule in ALL_RULES if not rule.section("Fix safety").startswith("No fix")]


def fixed(source, wanted=ALL):
    return fix_source(textwrap.dedent(source), "t.py", ALL_RULES, wanted)


def codes(source):
    return [f.code for f in lint_text(source)]


# --------------------------------------------------------------------------- guarantees, on every example


@pytest.mark.parametrize("rule", FIXABLE_RULES, ids=lambda r: r.code)
def test_every_fix_of_an_invalid_example_parses_removes_the_finding_and_is_idempotent(rule):
    applied_somewhere = False
    for example in rule.INVALID:
        outcome = fix_source(example.source, "t.py", ALL_RULES, ALL)
        assert still_valid(outcome.source, "t.py"), outcome.source
        before = codes(example.source).count(rule.code)
        after = codes(outcome.source).count(rule.code)
        if outcome.applied.get(rule.code):
            applied_somewhere = True
            assert after < before, outcome.source
        again = fix_source(outcome.source, "t.py", ALL_RULES, ALL)
        assert again.source == outcome.source and not again.count
    assert applied_somewhere, f"no {rule.code} example gets a fix"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_the_docs_say_what_the_fix_is(rule):
    applicabilities = {
        f.fix.applicability for example in rule.INVALID for f in lint_text(example.source, [rule]) if f.fix is not None
    }
    section = rule.section("Fix safety")
    documented = "No fix" if section.startswith("No fix") else section.split(".")[0].split(" (")[0]
    expected = {"Safe": {"safe"}, "Unsafe": {"unsafe"}, "No fix": set()}
    assert applicabilities == expected.get(documented, {documented}), section


def apply_edits(source, edits):
    lines = source.splitlines(keepends=True)
    for row, _, end_row, _, content in sorted(edits, reverse=True):
        lines[row - 1 : end_row - 1] = content.splitlines(keepends=True)
    return "".join(lines)


@pytest.mark.parametrize("rule", FIXABLE_RULES, ids=lambda r: r.code)
def test_the_edits_shown_are_the_fix_applied_alone(rule):
    """JSON, SARIF and the language server show a fix as edits of the top-level statements it
    touches; applied to the file they give what applying the fix to the whole tree gives."""
    from amplint.lint.engine import run_rules
    from amplint.lint.syntax import parse_module
    from amplint.lint.fix import apply
    from amplint.semantic import analyze

    for example in rule.INVALID:
        module = parse_module(example.source)
        for _, _, report in run_rules(analyze(module), [rule]):
            if report.fix is None:
                continue
            (finding,) = [f for f in lint_text(example.source, [rule]) if f.fix is not None and f.fix.title == report.fix.title][:1]
            assert apply_edits(example.source, finding.fix.edits) == apply(module, [report.fix]).code


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_valid_examples_are_left_alone(rule):
    for example in rule.VALID:
        outcome = fix_source(example, "t.py", [rule], ALL)
        assert outcome.source == example and not outcome.count


# --------------------------------------------------------------------------- what each fix writes


def test_amp001_scales_the_loss_with_the_scaler_that_steps():
    outcome = fixed(
        """\
        import torch
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x), y)
            loss.backward()  # comments stay
            scaler.step(opt)
            scaler.update()
        """
    )
    assert "    scaler.scale(loss).backward()  # comments stay\n" in outcome.source
    assert dict(outcome.applied) == {"AMP001": 1}


def test_amp003_inserts_the_unscale_with_the_users_names():
    outcome = fixed(BUGGY)
    lines = outcome.source.splitlines()
    assert lines[7:10] == [
        "    scaler.unscale_(optimizer)",
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "    scaler.step(optimizer)",
    ]
    assert outcome.source.replace("    scaler.unscale_(optimizer)\n", "", 1) == BUGGY  # nothing else changed


def test_amp003_moves_a_later_unscale_up_rather_than_adding_a_second_one():
    outcome = fixed(
        """\
        import torch
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.unscale_(opt)  # moved with its comment
        scaler.step(opt)
        scaler.update()
        """
    )
    assert outcome.source.splitlines()[2:5] == [
        "scaler.scale(loss).backward()",
        "scaler.unscale_(opt)  # moved with its comment",
        "torch.nn.utils.clip_grad_norm_(params, 1.0)",
    ]
    assert outcome.source.count("unscale_") == 1


def test_amp003_has_no_fix_when_the_optimizer_is_ambiguous():
    outcome = fixed(
        """\
        import torch
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt_a)
        scaler.step(opt_b)
        scaler.update()
        """
    )
    assert not outcome.count


def test_amp005_steps_through_the_scaler_and_adds_the_missing_update():
    outcome = fixed(
        """\
        import torch
        scaler = torch.amp.GradScaler("cuda")
        for x in loader:
            scaler.scale(model(x).sum()).backward()
            opt.step()
            opt.zero_grad()
        """
    )
    assert outcome.source.splitlines()[3:7] == [
        "    scaler.scale(model(x).sum()).backward()",
        "    scaler.step(opt)",
        "    scaler.update()",
        "    opt.zero_grad()",
    ]


def test_amp005_keeps_an_update_that_follows_and_leaves_a_conditional_one_alone():
    follows = fixed(
        """\
        import torch
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        opt.step()
        scaler.update()
        """
    )
    assert follows.source.splitlines()[3:] == ["scaler.step(opt)", "scaler.update()"]
    # An update in a branch would leave some steps without one, or update twice: no fix.
    conditional = """\
        import torch
        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        opt.step()
        if calls_update:
            scaler.update()
        """
    assert not fixed(conditional).count


def test_amp006_does_not_move_a_loss_computed_in_the_backward_statement_or_a_helper_call():
    source = """\
        import torch
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                output = model(x)
                criterion(output, y).backward()
        """
    assert "AMP006" in codes(textwrap.dedent(source)) and not fixed(source).count


def test_amp006_moves_a_framework_backward_of_a_computed_loss_and_leaves_one_that_computes_it():
    source = """\
        from accelerate import Accelerator
        accelerator = Accelerator(mixed_precision="fp16")
        for x, y in loader:
            with accelerator.autocast():
                loss = loss_fn(model(x), y)
                accelerator.backward(loss)
        """
    outcome = fixed(source)
    assert outcome.source.splitlines()[3:6] == [
        "    with accelerator.autocast():",
        "        loss = loss_fn(model(x), y)",
        "    accelerator.backward(loss)",
    ]
    assert "AMP006" not in codes(outcome.source)
    computed = source.replace("loss = loss_fn(model(x), y)", "out = model(x)").replace("backward(loss)", "backward(loss_fn(out, y))")
    assert "AMP006" in codes(textwrap.dedent(computed)) and not fixed(computed).count


def test_amp004_and_amp006_move_the_rest_of_the_block_out_of_autocast_only_as_unsafe_fixes():
    source = """\
        import torch
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            log(loss)
        """
    assert not fixed(source, SAFE).count
    outcome = fixed(source)
    assert outcome.source.splitlines()[3:9] == [
        '    with torch.autocast("cuda", dtype=torch.float16):',
        "        loss = loss_fn(model(x), y)",
        "    scaler.scale(loss).backward()",
        "    scaler.step(opt)",
        "    scaler.update()",
        "    log(loss)",
    ]
    assert not {"AMP004", "AMP006"} & set(codes(outcome.source))


def test_amp014_keeps_an_old_import_something_else_still_uses():
    outcome = fixed(
        """\
        import torch
        from torch.cuda.amp import autocast
        with autocast():
            loss = model(x)
        print(autocast.__doc__)
        """
    )
    assert outcome.source.splitlines()[:3] == ["import torch", "from torch.cuda.amp import autocast", 'with torch.amp.autocast("cuda"):']


def test_amp014_rewrites_the_call_and_adds_the_import_once():
    outcome = fixed(
        '''\
        """A training script."""
        from torch.cuda.amp import autocast, GradScaler
        scaler = GradScaler(enabled=use_amp)
        with autocast(use_amp, torch.bfloat16):
            loss = model(x)
        '''
    )
    # The old import goes with the last use of the names it bound.
    assert outcome.source == textwrap.dedent(
        '''\
        """A training script."""
        import torch
        scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
        with torch.amp.autocast("cuda", enabled=use_amp, dtype=torch.bfloat16):
            loss = model(x)
        '''
    )
    assert dict(outcome.applied) == {"AMP014": 2}


# --------------------------------------------------------------------------- what is never fixed


def test_a_suppressed_finding_is_not_fixed():
    source = BUGGY.replace("1.0)\n", "1.0)  # noqa: AMP003\n")
    assert not fix_source(source, "t.py", ALL_RULES, ALL).count


def test_fixable_and_unfixable_select_by_code():
    assert not fixed(BUGGY, wanted_by(False, unfixable=["AMP003"])).count
    assert not fixed(BUGGY, wanted_by(False, fixable=["AMP00"], unfixable=["AMP0"])).count
    assert fixed(BUGGY, wanted_by(False, fixable=["AMP003"])).count == 1


def test_a_fix_whose_result_would_not_parse_is_never_applied(monkeypatch):
    from amplint.rules import amp003_clip_before_unscale as amp003

    # A `match` statement is a syntax error in the project's Python 3.8.
    match = cst.parse_statement("match x:\n    case 1:\n        pass\n")

    def too_new(clip, scaler_key, model):
        return Fix("break it", insert_before=((model.index.statement_of(clip.node), (match,)),))

    monkeypatch.setattr(amp003, "_fix", too_new)
    outcome = fix_source(BUGGY, "t.py", ALL_RULES, ALL, target=(3, 8))
    assert outcome.source == BUGGY and not outcome.count
    assert "match x:" in fix_source(BUGGY, "t.py", ALL_RULES, ALL, target=(3, 10)).source


def test_a_file_libcst_parses_only_after_normalising_is_not_fixed():
    # LibCST rejects `b'é'`-style literals CPython reads (amplint.lint.syntax normalises them).
    source = BUGGY + 'print(f"{x!r:>{width}}")\n'
    outcome = fix_source(source, "t.py", ALL_RULES, ALL)
    assert outcome.count in (0, 1)  # either LibCST parses it as is, or nothing is written
    if not outcome.count:
        assert outcome.source == source


# --------------------------------------------------------------------------- the command


def test_diff_prints_and_writes_nothing(amplint, project):
    root = project({"train.py": BUGGY})
    result = amplint("--diff", "train.py", cwd=root)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("--- a/train.py\n+++ b/train.py\n")
    assert "+    scaler.unscale_(optimizer)\n" in result.stdout
    assert "Would fix 1 error." in result.stderr
    assert (root / "train.py").read_text() == BUGGY
    clean = project({"clean.py": "import torch\n"})
    assert amplint("--diff", "clean.py", cwd=clean).returncode == 0
    # --exit-zero: 0 on what would be fixed too, as on findings (ruff's rule).
    assert amplint("--diff", "--exit-zero", "train.py", cwd=root).returncode == 0


def test_fix_writes_reports_what_remains_and_a_second_run_changes_nothing(amplint, project):
    source = BUGGY + textwrap.dedent(
        """\
        with torch.autocast("cuda"):
            loss = model(x).sum()
            loss.backward()
        """
    )
    root = project({"train.py": source})
    result = amplint("--fix", "--show-fixes", "--concise", "train.py", cwd=root)
    assert result.returncode == 1  # the unsafe fix was not applied: AMP006 remains
    assert "train.py:14:5: AMP006" in result.stdout  # one row further down: the unscale_ was inserted
    # Found: what was there before fixing, as ruff counts it.
    assert "Found 2 errors (1 fixed, 1 remaining)." in result.stdout
    assert "No fixes available (1 hidden fix can be enabled with the `--unsafe-fixes` option)." in result.stdout
    assert "- train.py:\n    1 × AMP003 (clip-before-unscale)\n" in result.stdout
    assert "scaler.unscale_(optimizer)" in (root / "train.py").read_text()
    result = amplint("--fix", "--unsafe-fixes", "train.py", cwd=root)
    assert result.returncode == 0, result.stdout
    assert (root / "train.py").read_text().endswith('with torch.autocast("cuda"):\n    loss = model(x).sum()\nloss.backward()\n')
    assert amplint("--diff", "--unsafe-fixes", "train.py", cwd=root).returncode == 0


def test_fix_only_exits_zero_with_findings_left(amplint, project):
    # A gradient penalty on the scaled loss, not divided by the scale: AMP009 with no fix.
    penalty = "grads = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)\n    scaler.scale(loss).backward()"
    root = project({"train.py": BUGGY.replace("scaler.scale(loss).backward()", penalty)})
    result = amplint("--fix-only", "train.py", cwd=root)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Fixed 1 error.\n"


def test_fix_from_stdin_writes_the_fixed_source_to_stdout(amplint, tmp_path):
    result = amplint("--fix", "--stdin-filename", "train.py", cwd=tmp_path, input=BUGGY)
    assert result.returncode == 0, result.stderr
    assert "    scaler.unscale_(optimizer)\n" in result.stdout and result.stdout.startswith("import torch\n")
    assert "Found 1 error (1 fixed, 0 remaining)." in result.stderr
    assert not (tmp_path / "train.py").exists()


def test_configuration_decides_what_is_fixable(amplint, project):
    root = project(
        {
            "pyproject.toml": '[tool.amplint]\nunfixable = ["AMP003"]\n',
            "train.py": BUGGY,
        }
    )
    result = amplint("--fix", "train.py", cwd=root)
    assert result.returncode == 1 and (root / "train.py").read_text() == BUGGY
    unknown = amplint("--fix", "--unfixable", "AMP999", "train.py", cwd=root)
    assert unknown.returncode == 2 and "AMP999" in unknown.stderr
    bad = project({"pyproject.toml": '[tool.amplint]\nunsafe-fixes = "yes"\n', "train.py": BUGGY})
    assert amplint("train.py", cwd=bad).returncode == 2


def test_encoding_and_line_endings_are_kept(amplint, project):
    source = "# -*- coding: latin-1 -*-\n# café\n" + BUGGY
    root = project({})
    (root / "train.py").write_bytes(source.replace("\n", "\r\n").encode("latin-1"))
    assert amplint("--fix", "train.py", cwd=root).returncode == 0
    data = (root / "train.py").read_bytes()
    assert b"# caf\xe9\r\n" in data and b"    scaler.unscale_(optimizer)\r\n" in data
    assert b"\n" not in data.replace(b"\r\n", b"")


def test_notebooks_are_fixed_cell_by_cell(amplint, project):
    setup = cell("import torch\nscaler = torch.amp.GradScaler('cuda')\n")
    loop = cell(
        "for x, y in loader:\n"
        "    with torch.autocast('cuda', dtype=torch.float16):\n"
        "        loss = loss_fn(model(x), y)\n"
        "    scaler.scale(loss).backward()\n"
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "    scaler.step(optimizer)\n"
        "    scaler.update()\n"
    )
    text = notebook(cell("# Training", kind="markdown"), setup, loop)
    root = project({"train.ipynb": text})
    result = amplint("--fix", "train.ipynb", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads((root / "train.ipynb").read_text())
    assert document["cells"][1]["source"] == setup["source"]
    assert document["cells"][2]["source"][3:6] == [
        "    scaler.scale(loss).backward()\n",
        "    scaler.unscale_(optimizer)\n",
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
    ]
    assert amplint("train.ipynb", cwd=root).returncode == 0


UNSCALE = "    scaler.unscale_(optimizer)\n"
LOOP_LINES = [
    "for x, y in loader:  # époque\n",
    "    with torch.autocast('cuda', dtype=torch.float16):\n",
    "        loss = loss_fn(model(x), y)\n",
    "    scaler.scale(loss).backward()\n",
    "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
    "    scaler.step(optimizer)\n",
    "    scaler.update()",
]


def styled_notebook(loop_source):
    """A notebook with non-ASCII text, a magic cell, outputs and a float, around the loop cell."""
    return {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# Entraînement — ≥ 2 GPUs\n", "Voilà."]},
            {"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [], "source": ["%matplotlib inline\n", "import torch\n"]},
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": ["scaler = torch.amp.GradScaler('cuda')"]},
            {"cell_type": "code", "execution_count": 3, "metadata": {"tags": ["train"]}, "source": loop_source,
             "outputs": [{"name": "stdout", "output_type": "stream", "text": ["lr=1e-05 ✓\n"]}]},
        ],
        "metadata": {"language_info": {"name": "python"}, "scale": 0.5, "title": "café"},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


NOTEBOOK_STYLES = {
    "compact": dict(separators=(",", ":"), ensure_ascii=False),
    "compact-ascii": dict(separators=(",", ":")),
    "json.dumps-default": dict(),
    "indent-1-jupyter": dict(indent=1, ensure_ascii=False, sort_keys=True),
    "indent-4-sorted": dict(indent=4, sort_keys=True),
    "indent-2-escaped": dict(indent=2, ensure_ascii=True),
    "indent-2-trailing-space": dict(indent=2, separators=(", ", ": "), ensure_ascii=False),
    "tab-indent": dict(indent="\t", ensure_ascii=False),
}


@pytest.mark.parametrize("as_string", [False, True], ids=["source-list", "source-string"])
@pytest.mark.parametrize("style", NOTEBOOK_STYLES.values(), ids=NOTEBOOK_STYLES.keys())
def test_a_fixed_notebook_keeps_its_json_style_and_only_the_fixed_cell_changes(amplint, project, style, as_string):
    def source(lines):
        return "".join(lines) if as_string else lines

    before = json.dumps(styled_notebook(source(LOOP_LINES)), **style)
    fixed_lines = LOOP_LINES[:4] + [UNSCALE] + LOOP_LINES[4:]
    after = json.dumps(styled_notebook(source(fixed_lines)), **style)
    root = project({"train.ipynb": before})
    result = amplint("--fix", "train.ipynb", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (root / "train.ipynb").read_text(encoding="utf-8") == after


def test_a_notebook_with_a_bom_keeps_it_and_only_the_fixed_line_is_new(amplint, project):
    before = notebook(cell("import torch\nscaler = torch.amp.GradScaler('cuda')\n"), cell("".join(LOOP_LINES)))
    # Spellings json.dumps would not write back: they stay, since only the fixed value is written.
    before = before.replace('"nbformat_minor": 5', '"nbformat_minor": 5, "x": 1.50E+3')
    root = project({})
    (root / "train.ipynb").write_bytes(b"\xef\xbb\xbf" + before.encode("utf-8"))
    assert amplint("--fix", "train.ipynb", cwd=root).returncode == 0
    data = (root / "train.ipynb").read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b'"x": 1.50E+3' in data
    backward = '    "    scaler.scale(loss).backward()\\n",\n'
    assert data.decode("utf-8-sig") == before.replace(backward, backward + '    "    scaler.unscale_(optimizer)\\n",\n')


def test_sarif_carries_the_fix(amplint, project):
    root = project({"train.py": BUGGY})
    sarif = json.loads(amplint("--output-format", "sarif", "train.py", cwd=root).stdout)
    (result,) = sarif["runs"][0]["results"]
    (fix,) = result["fixes"]
    assert fix["description"]["text"] == "Unscale before clipping: `scaler.unscale_(optimizer)`"
    (change,) = fix["artifactChanges"]
    assert change["replacements"] == [
        {
            "deletedRegion": {"startLine": 8, "startColumn": 1, "endLine": 8, "endColumn": 1},
            "insertedContent": {"text": "    scaler.unscale_(optimizer)\n"},
        }
    ]


def test_a_notebook_cell_with_magics_is_left_as_it_is(amplint, project):
    loop = cell(
        "%load_ext autoreload\n"
        "scaler = torch.amp.GradScaler('cuda')\n"
        "scaler.scale(loss).backward()\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "scaler.step(optimizer)\n"
        "scaler.update()\n"
    )
    text = notebook(cell("import torch\n"), loop)
    root = project({"train.ipynb": text})
    result = amplint("--fix", "train.ipynb", cwd=root)
    assert result.returncode == 1
    assert "not fixed: a fix would change a cell with IPython magics" in result.stderr
    assert (root / "train.ipynb").read_text() == text


def test_a_file_that_cannot_be_written_is_an_error_and_not_counted_as_fixed(amplint, project, monkeypatch):
    import amplint.lint.fix_loop as fixer

    root = project({"train.py": BUGGY})
    monkeypatch.setattr(fixer, "write_fixed", lambda fix, roots: "not fixed: cannot write it (Read-only file system)")
    result = amplint("--fix", "--concise", "train.py", cwd=root)
    assert result.returncode == 2
    assert "train.py: not fixed: cannot write it (Read-only file system)" in result.stderr
    # Not counted as fixed: the summary says the file was not fixed, never "(1 fixed)".
    assert "1 fixed" not in result.stdout and "1 file not fixed" in result.stdout
    assert (root / "train.py").read_text() == BUGGY


def test_amp014_leaves_no_unused_import_in_a_try_block_or_after_a_semicolon():
    outcome = fixed(
        """\
        import torch
        try:
            from torch.cuda.amp import autocast  # old torch
        except ImportError:
            pass
        import os; from torch.cuda.amp import GradScaler
        scaler = GradScaler()
        with autocast():
            y = model(x)
        """
    )
    # The only statement of the `try:` becomes `pass`; the other statement of the line stays.
    assert outcome.source == textwrap.dedent(
        """\
        import torch
        try:
            pass  # old torch
        except ImportError:
            pass
        import os
        scaler = torch.amp.GradScaler("cuda")
        with torch.amp.autocast("cuda"):
            y = model(x)
        """
    )


# --------------------------------------------------------------------------- suggestions print only what changes


def _suggestions(source, whole):
    """Every finding's fix suggestion, computed printing only the statement a fix changes
    (as linting does), or with `whole`, printing each top-level statement it is in whole."""
    from amplint.lint import fix as fix_module

    narrow = fix_module.Suggestions._rewritten_in
    if whole:
        fix_module.Suggestions._rewritten_in = lambda *args: None
    try:
        return [(f.code, f.row, f.fix) for f in lint_text(source) if f.fix is not None]
    finally:
        fix_module.Suggestions._rewritten_in = narrow


NESTED = [
    # in a branch, an elif, an else, an except, a finally, a decorated method's loop
    """
    import torch

    class Trainer:
        @staticmethod
        def fit(model, opt, loader, scaler, use_amp):
            for x, y in loader:
                if use_amp:
                    with torch.cuda.amp.autocast():
                        loss = model(x, y)
                elif x is None:
                    continue
                else:
                    try:
                        loss = model(x, y)
                    except RuntimeError:
                        with torch.cuda.amp.autocast():  # retried
                            loss = model(x, y)
                    finally:
                        pass
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                scaler.step(opt)
                scaler.update()
    """,
    # tabs, and a block indented its own way
    "import torch\ndef train(model, opt, scaler, loader):\n\tfor x in loader:\n\t\tloss = model(x)\n\t\tscaler.scale(loss).backward()\n\t\ttorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n\t\tscaler.step(opt)\n\t\tscaler.update()\n",
    "import torch\ndef train(model, opt, scaler, loader):\n  for x in loader:\n        loss = model(x)\n        scaler.scale(loss).backward()\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        scaler.step(opt)\n        scaler.update()\n",
    # the same statement twice in one function: its code is not found once, so printed whole
    """
    import torch

    def train(model, opt, scaler, a, b):
        with torch.cuda.amp.autocast():
            loss = model(a)
        with torch.cuda.amp.autocast():
            loss = model(a)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    """,
    # a match statement's case (not followed into: its cases add an indentation of their own)
    """
    import torch

    def train(model, opt, scaler, x, mode):
        match mode:
            case "amp":
                with torch.cuda.amp.autocast():
                    loss = model(x)
            case _:
                loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    """,
]


FIXTURES = sorted((Path(__file__).resolve().parent.parent / "fixtures").glob("AMP*/buggy*.py"))


@pytest.mark.parametrize("source", [textwrap.dedent(s) for s in NESTED] + [path.read_text(encoding="utf-8") for path in FIXTURES])
def test_a_suggestion_printing_only_the_changed_statement_is_the_one_printing_it_all(source):
    narrow = _suggestions(source, whole=False)
    assert narrow == _suggestions(source, whole=True)


def test_suggestions_print_only_the_changed_statement_where_they_can():
    from amplint.lint import fix as fix_module

    taken = []
    narrow = fix_module.Suggestions._rewritten_in

    def noting(*args):
        found = narrow(*args)
        taken.append(found is not None)
        return found

    fix_module.Suggestions._rewritten_in = noting
    try:
        for source in NESTED:
            lint_text(textwrap.dedent(source))
    finally:
        fix_module.Suggestions._rewritten_in = narrow
    # Printed whole: the statement written twice, and inside the match statement.
    assert taken.count(True) >= 4 and taken.count(False) >= 2, taken
