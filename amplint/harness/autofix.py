"""`amplint verify --fixes`: a rule's fix is right when the buggy fixture, fixed by amplint,
behaves exactly like its hand-fixed twin.

For each selected rule with a fixture pair, `buggy.py` is fixed as `amplint --fix
--unsafe-fixes` would fix it (every rule, every fix), written to a temporary directory and run
beside `fixed.py` with the same device, dtype, seeds and scenarios. Every quantity of every
scenario must be equal, to the last bit. A rule whose buggy fixture gets no fix is listed as
such and fails nothing; one whose fixture keeps findings of the rule that no fix is offered
for ("partly fixed": a shape the fix does not handle) is listed with them, and its remaining
differences are shown, not failed.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Type

from amplint.rule import Rule

AUTOFIXED = "autofixed"


@dataclass
class FixProof:
    code: str
    dtype: str
    applied: Dict[str, int] = field(default_factory=dict)  # fixes applied to buggy.py, per rule
    scenarios: int = 0
    differences: List[str] = field(default_factory=list)  # "sgd/first_update: 1e-06 != 7.7e-07"
    # The rule's findings amplint still reports in the fixed buggy.py: code it offers no fix for.
    remaining: List[str] = field(default_factory=list)
    error: Optional[str] = None

    @property
    def fixed(self) -> bool:
        return self.code in self.applied

    @property
    def verdict(self) -> str:
        if not self.fixed:
            return "no fix"
        if self.error:
            return "error"
        if not self.differences:
            return "identical"
        # Where findings remain, the scripts still differ there by design.
        return "partly fixed" if self.remaining else "differs"


def prove_fixes(rules: Sequence[Type[Rule]], device: str, dtype: str, timeout: float) -> List[FixProof]:
    from amplint.engine import lint_source
    from amplint.fixer import fix_source, wanted_by
    from amplint.harness.runner import fixture_root, run_scripts, script_spec
    from amplint.rules import ALL_RULES

    root = fixture_root()
    proofs: List[FixProof] = []
    specs = []
    with tempfile.TemporaryDirectory(prefix="amplint-fix-proof-") as scratch:
        for rule in rules:
            folder = root / rule.code
            buggy, fixed = folder / "buggy.py", folder / "fixed.py"
            if not buggy.is_file() or not fixed.is_file():
                continue
            outcome = fix_source(buggy.read_text(encoding="utf-8"), f"fixtures/{rule.code}/buggy.py", ALL_RULES, wanted_by(True))
            proof = FixProof(rule.code, dtype, dict(outcome.applied))
            proof.remaining = [
                f"{f.row}:{f.column}" for f in lint_source(outcome.source, "buggy.py", [rule]).findings if f.code == rule.code
            ]
            proofs.append(proof)
            if not proof.fixed:
                continue
            target = Path(scratch) / rule.code / f"{AUTOFIXED}.py"
            target.parent.mkdir()
            target.write_text(outcome.source, encoding="utf-8")
            specs.append(script_spec(rule.code, AUTOFIXED, target, device, dtype, ()))
            specs.append(script_spec(rule.code, "fixed", Path(str(fixed)), device, dtype, ()))
        runs, _ = run_scripts(specs, timeout) if specs else ({}, 0)
    for proof in proofs:
        if proof.fixed:
            _compare(proof, runs.get((proof.code, dtype, AUTOFIXED)), runs.get((proof.code, dtype, "fixed")))
    return proofs


def _compare(proof: FixProof, autofixed, fixed) -> None:
    if autofixed is None or fixed is None or autofixed.error or fixed.error:
        proof.error = (autofixed and autofixed.error) or (fixed and fixed.error) or "a script did not run"
        return
    proof.scenarios = len(fixed.results)
    for scenario in sorted(set(fixed.results) | set(autofixed.results)):
        ours, theirs = autofixed.results.get(scenario, {}), fixed.results.get(scenario, {})
        for quantity in sorted(set(ours) | set(theirs)):
            if ours.get(quantity) != theirs.get(quantity):
                proof.differences.append(f"{scenario}/{quantity}: {ours.get(quantity)!r} (autofixed) != {theirs.get(quantity)!r} (fixed.py)")


def render(proofs: Sequence[FixProof], device: str) -> str:
    lines = [f"Fixes proven on {device}: buggy.py fixed by `amplint --fix --unsafe-fixes`, run beside fixed.py", ""]
    lines.append(f"{'rule':<8} {'dtype':<9} {'fixes applied':<28} {'scenarios':>9}  verdict")
    for proof in proofs:
        applied = ", ".join(f"{code} x{count}" for code, count in sorted(proof.applied.items())) or "-"
        lines.append(f"{proof.code:<8} {proof.dtype:<9} {applied:<28} {proof.scenarios:>9}  {proof.verdict}")
        for difference in proof.differences:
            lines.append(f"    {difference}")
        if proof.remaining:
            lines.append(f"    {proof.code} still reported (no fix offered) at {', '.join(proof.remaining)}")
        if proof.error:
            lines.append(f"    {proof.error}")
    bad = [p for p in proofs if p.verdict in ("differs", "error")]
    proven = [p for p in proofs if p.verdict == "identical"]
    lines.append("")
    lines.append(f"{len(proven)} fixed fixtures behave exactly like fixed.py; {len(bad)} do not.")
    return "\n".join(lines) + "\n"


def ok(proofs: Sequence[FixProof]) -> bool:
    return all(p.verdict in ("identical", "partly fixed", "no fix") for p in proofs) and any(p.verdict == "identical" for p in proofs)
