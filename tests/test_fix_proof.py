"""The fixes, proven at runtime: each fixture's buggy.py, fixed by amplint, behaves exactly like
its hand-written fixed.py (`amplint verify --fixes`)."""

import pytest

from amplint.harness.autofix import ok, prove_fixes, render
from amplint.rules import ALL_RULES


@pytest.mark.slow(seconds=20)
def test_fixed_fixtures_behave_exactly_like_their_fixed_twins():
    pytest.importorskip("torch")
    proofs = {proof.code: proof for proof in prove_fixes(ALL_RULES, "cpu", "float16", timeout=300)}
    shown = render(list(proofs.values()), "cpu")
    assert ok(proofs.values()), shown
    for code in ("AMP001", "AMP003", "AMP006", "AMP008"):
        assert proofs[code].verdict == "identical" and proofs[code].scenarios >= 2, shown
    # The per-iteration scenarios are fixed; a region around the whole loop gets no fix, and
    # the rule still reports it there.
    assert proofs["AMP004"].verdict == "partly fixed" and proofs["AMP004"].remaining, shown
    assert all("whole-loop" in difference for difference in proofs["AMP004"].differences), shown
    # The norm and noise scenarios are fixed; the gradient penalty gets no fix.
    assert proofs["AMP009"].verdict == "partly fixed", shown
    assert all(difference.startswith("penalty/") for difference in proofs["AMP009"].differences), shown
    # buggy.py updates the scaler only in some scenarios (`if calls_update:`): no safe fix.
    assert proofs["AMP005"].verdict == "no fix", shown
    assert not [p for p in proofs.values() if p.verdict in ("differs", "error")], shown
