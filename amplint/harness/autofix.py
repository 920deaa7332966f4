"""`amplint verify --fixes`: a rule's fix is right when the buggy fixture, fixed by amplint,
behaves exactly like its hand-fixed twin.

For each selected rule with a fixture pair, `buggy.py` is fixed as `amplint --fix
--unsafe-fixes` would fix it (every rule, every fix), written to a temporary directory and run
beside `fixed.py` with the same device, dtype, seeds and scenarios. Every quantity of every
scenario must be equal, to the last bit. Every row gets a status, and the summary
counts them all:

- `identical`: the proof.
- `partly fixed`: the fixture keeps findings of the rule that no fix is offered for (a shape
  the fix does not handle), and only there does it differ. It passes only where the rule's
  "Fix safety" section declares it "a partial fix" and names after that, in backticks,
  every scenario that still differs; otherwise it is `differs`.
- `no fix`: the fixture got no fix. It passes where the rule offers none, or where the rule's
  "Fix safety" says "`amplint verify --fixes` lists it as having no fix"; a rule that
  offers a fix and is silent about its fixture getting none is `not fixed`, a failure.
- `differs`, `not fixed`, `error`: failures.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
import re
from typing import Dict, List, Optional, Sequence, Set, Type

from amplint.lint.rule import Rule

AUTOFIXED = "autofixed"
IDENTICAL, PARTLY_FIXED, NO_FIX, DIFFERS, NOT_FIXED, ERROR = "identical", "partly fixed", "no fix", "differs", "not fixed", "error"
STATUSES = (IDENTICAL, PARTLY_FIXED, NO_FIX, DIFFERS, NOT_FIXED, ERROR)
PASSING = (IDENTICAL, PARTLY_FIXED, NO_FIX)


def declared_partial(rule: Type[Rule]) -> Set[str]:
    """The scenarios the rule's "Fix safety" section says its fix leaves as they were: the
    backticked words after "a partial fix" in that section; none where it does not say so."""
    section = " ".join((rule.section("Fix safety") or "").split())
    _, said, declaration = section.partition("a partial fix")
    return set(re.findall(r"`([^`]+)`", declaration)) if said else set()


def declares_no_fixture_fix(rule: Type[Rule]) -> bool:
    """Whether the rule offers no fix, or says its fixture gets none (`amplint verify --fixes`
    lists it as having no fix)."""
    section = " ".join((rule.section("Fix safety") or "").split())
    return rule.fix_kind() is None or "`amplint verify --fixes` lists it as having no fix" in section


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
    # what the rule's docs declare (declared_partial, declares_no_fixture_fix)
    partial: Set[str] = field(default_factory=set)
    no_fix_declared: bool = True

    @property
    def fixed(self) -> bool:
        return self.code in self.applied

    @property
    def verdict(self) -> str:
        if not self.fixed:
            return NO_FIX if self.no_fix_declared else NOT_FIXED
        if self.error:
            return ERROR
        if not self.differences:
            return IDENTICAL
        # Where findings remain, the scripts still differ there by design, if the docs say so.
        if self.remaining and self.partial and set(self.differing_scenarios()) <= self.partial:
            return PARTLY_FIXED
        return DIFFERS

    def as_dict(self) -> Dict[str, object]:
        """The row as JSON reads it."""
        return {
            "code": self.code,
            "dtype": self.dtype,
            "applied": self.applied,
            "scenarios": self.scenarios,
            "differences": self.differences,
            "remaining": self.remaining,
            "error": self.error,
            "declared_partial": sorted(self.partial),
            "verdict": self.verdict,
        }

    def differing_scenarios(self) -> List[str]:
        return sorted({difference.split("/", 1)[0] for difference in self.differences})


def prove_fixes(rules: Sequence[Type[Rule]], device: str, dtypes: Sequence[str], timeout: float) -> List[FixProof]:
    """A row per rule with a fixture pair and per dtype, in that order; every script that has
    to run runs in one driver process."""
    from amplint.lint.engine import lint_source
    from amplint.lint.fix_loop import fix_source, wanted_by
    from amplint.harness.runner import AS_WRITTEN, fixture_root, run_scripts, script_spec
    from amplint.rules import ALL_RULES

    root = fixture_root()
    proofs: List[FixProof] = []
    specs = []
    with tempfile.TemporaryDirectory(prefix="amplint-fix-proof-") as scratch:
        for dtype in dtypes:
            for rule in rules:
                folder = root / rule.code
                buggy, fixed = folder / "buggy.py", folder / "fixed.py"
                if not buggy.is_file() or not fixed.is_file():
                    continue
                outcome = fix_source(buggy.read_text(encoding="utf-8"), f"fixtures/{rule.code}/buggy.py", ALL_RULES, wanted_by(True))
                proof = FixProof(
                    rule.code, dtype, dict(outcome.applied), partial=declared_partial(rule), no_fix_declared=declares_no_fixture_fix(rule)
                )
                proof.remaining = [
                    f"{f.row}:{f.column}" for f in lint_source(outcome.source, "buggy.py", [rule]).findings if f.code == rule.code
                ]
                proofs.append(proof)
                if not proof.fixed:
                    continue
                target = Path(scratch) / rule.code / f"{AUTOFIXED}.py"
                if not target.is_file():
                    target.parent.mkdir()
                    target.write_text(outcome.source, encoding="utf-8")
                specs.append(script_spec(rule.code, AUTOFIXED, target, device, dtype, ()))
                specs.append(script_spec(rule.code, "fixed", Path(str(fixed)), device, dtype, ()))
        runs, _ = run_scripts(specs, timeout) if specs else ({}, 0)
    for proof in proofs:
        if proof.fixed:
            ours, theirs = ((proof.code, proof.dtype, which, AS_WRITTEN.name) for which in (AUTOFIXED, "fixed"))
            _compare(proof, runs.get(ours), runs.get(theirs))
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
        if proof.verdict == DIFFERS and proof.remaining:
            undeclared = sorted(set(proof.differing_scenarios()) - proof.partial)
            lines.append(f"    the rule's docs do not declare the fix partial for {', '.join(undeclared)}")
        if proof.verdict == NOT_FIXED:
            lines.append("    the rule offers a fix, and its docs do not say this fixture gets none")
    lines.append("")
    lines.append(summary(proofs))
    return "\n".join(lines) + "\n"


def summary(proofs: Sequence[FixProof]) -> str:
    """Every row's status counted: `13 rows: 4 identical to fixed.py, 2 partly fixed (declared partial), ...`."""
    counts = {status: sum(p.verdict == status for p in proofs) for status in STATUSES}
    parts = [f"{counts[IDENTICAL]} identical to fixed.py", f"{counts[PARTLY_FIXED]} partly fixed (declared partial)"]
    parts += [f"{counts[NO_FIX]} no fix", f"{counts[DIFFERS]} differ", f"{counts[NOT_FIXED]} not fixed", f"{counts[ERROR]} errors"]
    return f"{len(proofs)} rows: " + ", ".join(parts)


def ok(proofs: Sequence[FixProof]) -> bool:
    return all(p.verdict in PASSING for p in proofs) and any(p.verdict == IDENTICAL for p in proofs)
