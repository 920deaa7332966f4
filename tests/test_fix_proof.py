"""The fixes, proven at runtime: each fixture's buggy.py, fixed by amplint, behaves exactly like
its hand-written fixed.py (`amplint verify --fixes`); a row that does not is a failure unless
the rule's docs declare the fix partial there, and the summary counts every row's status."""

import re

import pytest

from amplint.harness.autofix import (
    DIFFERS,
    IDENTICAL,
    NO_FIX,
    NOT_FIXED,
    PARTLY_FIXED,
    FixProof,
    declared_partial,
    declares_no_fixture_fix,
    ok,
    prove_fixes,
    render,
    summary,
)
from amplint.harness.runner import DTYPES
from amplint.rules import ALL_RULES
from conftest import REPO

RULES = {rule.code: rule for rule in ALL_RULES}


def test_a_fixed_script_that_differs_fails_unless_the_docs_declare_the_fix_partial_there():
    differs = ["penalty/skipped_steps: 17 (autofixed) != 0 (fixed.py)"]
    declared = FixProof("AMP009", "float16", {"AMP009": 2}, differences=differs, remaining=["97:17"], partial={"penalty"})
    assert declared.verdict == PARTLY_FIXED
    # the same differences where the docs name another scenario, or none: a failure
    assert FixProof("AMP009", "float16", {"AMP009": 2}, differences=differs, remaining=["97:17"], partial={"noise"}).verdict == DIFFERS
    undeclared = FixProof("AMP009", "float16", {"AMP009": 2}, differences=differs, remaining=["97:17"])
    assert undeclared.verdict == DIFFERS and not ok([undeclared])
    assert "do not declare the fix partial for penalty" in render([undeclared], "cpu")
    # no fix where the rule offers one and its docs are silent about the fixture: a failure too
    assert FixProof("AMP001", "float16", {}, no_fix_declared=False).verdict == NOT_FIXED
    assert FixProof("AMP007", "float16", {}).verdict == NO_FIX


def test_the_docs_declare_what_the_fixtures_show():
    assert {"sgd-whole-loop", "adam-whole-loop"} <= declared_partial(RULES["AMP004"])
    assert "penalty" in declared_partial(RULES["AMP009"])
    assert not declared_partial(RULES["AMP001"]) and not declared_partial(RULES["AMP003"])
    assert declares_no_fixture_fix(RULES["AMP005"]) and declares_no_fixture_fix(RULES["AMP007"])
    assert not declares_no_fixture_fix(RULES["AMP001"])


def test_the_summary_counts_every_row():
    proofs = [
        FixProof("AMP001", "float16", {"AMP001": 1}),
        FixProof("AMP007", "float16", {}),
        FixProof("AMP009", "float16", {"AMP009": 1}, differences=["penalty/x: 1 != 2"], remaining=["1:1"], partial={"penalty"}),
        FixProof("AMP004", "float16", {"AMP004": 1}, differences=["sgd/x: 1 != 2"]),
    ]
    assert summary(proofs) == (
        "4 rows: 1 identical to fixed.py, 1 partly fixed (declared partial), 1 no fix, 1 differ, 0 not fixed, 0 errors"
    )


@pytest.mark.slow(seconds=30)
def test_fixed_fixtures_behave_exactly_like_their_fixed_twins():
    """`amplint verify --fixes --dtype all`: every rule's row at both dtypes."""
    pytest.importorskip("torch")
    proofs = prove_fixes(ALL_RULES, "cpu", DTYPES, timeout=300)
    shown = render(proofs, "cpu")
    assert ok(proofs), shown
    assert [proof.dtype for proof in proofs] == sorted((proof.dtype for proof in proofs), key=DTYPES.index)
    for dtype in DTYPES:
        by_code = {proof.code: proof for proof in proofs if proof.dtype == dtype}
        for code in ("AMP001", "AMP003", "AMP006", "AMP008"):
            assert by_code[code].verdict == IDENTICAL and by_code[code].scenarios >= 2, shown
        # The per-iteration scenarios are fixed; a context around the whole loop gets no fix,
        # the rule still reports it there, and its docs declare the fix partial for exactly those.
        assert by_code["AMP004"].verdict == PARTLY_FIXED and by_code["AMP004"].remaining, shown
        assert by_code["AMP004"].differing_scenarios() == [
            "adam-whole-loop", "sgd-per-iteration-in-outer-context", "sgd-step-in-disabled-region", "sgd-whole-loop"
        ], shown
        # The norm and noise scenarios are fixed; the gradient penalty gets no fix.
        assert by_code["AMP009"].verdict == PARTLY_FIXED and by_code["AMP009"].differing_scenarios() == ["penalty"], shown
        # buggy.py updates the scaler only in some scenarios (`if calls_update:`): no safe fix.
        assert by_code["AMP005"].verdict == NO_FIX, shown
    rows = len(proofs)
    assert shown.rstrip().endswith(
        f"{rows} rows: 8 identical to fixed.py, 4 partly fixed (declared partial), {rows - 12} no fix, 0 differ, 0 not fixed, 0 errors"
    ), shown
    # docs/verify.md quotes this summary as `amplint verify --fixes --dtype all` prints it
    lines = (REPO / "docs" / "verify.md").read_text().splitlines()
    assert [line for line in lines if re.fullmatch(r"\d+ rows: .*", line)] == [summary(proofs)]
