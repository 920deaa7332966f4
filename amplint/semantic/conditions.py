"""What taking a branch tells us: `if` tests turned into comparable assumptions.

Training code gates AMP with the same flag twice (`if use_amp: scale+backward ... if use_amp:
scaler.step`). A path that took the first branch and skipped the second does not exist, so
the path enumerator records what each branch assumed and drops paths that contradict it.
Tests are compared by their normalised source text, which is enough for the flags and
`x is None` checks that gate AMP code, and never merges two different conditions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, List, Tuple

import libcst as cst

from amplint.semantic.names import is_none, names_read, source_text


@dataclass(frozen=True)
class Condition:
    text: str
    names: FrozenSet[str]  # the dotted names the test reads; rebinding one invalidates it

    def reads(self, target: str) -> bool:
        return any(name == target or name.startswith(target + ".") for name in self.names)


Assumption = Tuple[Condition, bool]


def condition(node: cst.BaseExpression) -> Condition:
    return Condition(source_text(node), frozenset(names_read(node)))


def assumptions(test: cst.BaseExpression, outcome: bool) -> List[Assumption]:
    """The facts that hold when `test` evaluated to `outcome`; [] when nothing simple does."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return assumptions(test.expression, not outcome)
    if isinstance(test, cst.BooleanOperation):
        # `a and b` true means both are; false tells nothing about either. Dually for `or`.
        both_hold = isinstance(test.operator, cst.And) == outcome
        if not both_hold:
            return []
        return assumptions(test.left, outcome) + assumptions(test.right, outcome)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if is_none(target.comparator):
            if isinstance(target.operator, cst.Is):
                return assumptions(test.left, not outcome)
            if isinstance(target.operator, cst.IsNot):
                return assumptions(test.left, outcome)
        if isinstance(target.operator, cst.NotEqual):
            equal = test.with_changes(
                comparisons=[target.with_changes(operator=cst.Equal())], lpar=[], rpar=[]
            )
            return [(condition(equal), not outcome)]
    if (
        isinstance(test, cst.Call)
        and isinstance(test.func, cst.Name)
        and test.func.value == "bool"
        and len(test.args) == 1
    ):
        return assumptions(test.args[0].value, outcome)
    return [(condition(test), outcome)]


_MAX_ALTERNATIVES = 8


def alternatives(test: cst.BaseExpression, outcome: bool) -> List[List[Assumption]]:
    """The ways `test` can evaluate to `outcome`, each as the facts that then hold:
    `a and b` is false when `a` is, or when `a` is true and `b` false. Where `assumptions`
    keeps only what holds in every case, this keeps each case: the `else` of
    `if args.fp16 and args.amp == "pytorch":` still knows `args.amp` when `args.fp16` holds."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return alternatives(test.expression, not outcome)
    if isinstance(test, cst.BooleanOperation):
        conjunction = isinstance(test.operator, cst.And) == outcome
        left = alternatives(test.left, outcome)
        right = alternatives(test.right, outcome)
        if conjunction:  # `a and b` true, `a or b` false: both sides as asked
            found = [l + r for l in left for r in right]
        else:  # `a and b` false: `a` false, or `a` true and `b` false
            found = left + [l + r for l in alternatives(test.left, not outcome) for r in right]
        return found if len(found) <= _MAX_ALTERNATIVES else [[]]
    return [assumptions(test, outcome)]
