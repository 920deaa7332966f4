"""What taking a branch tells us: `if` tests turned into comparable assumptions.

Training code gates AMP with the same flag twice (`if use_amp: scale+backward ... if use_amp:
scaler.step`). A path that took the first branch and skipped the second does not exist, so
the path enumerator records what each branch assumed and drops paths that contradict it.
Tests are compared by their normalised source text, which is enough for the flags and
`x is None` checks that gate AMP code, and never merges two different conditions.
"""

from __future__ import annotations

from dataclasses import dataclass
import re
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Mapping, Optional, Tuple

import libcst as cst

from amplint import work
from amplint.semantic.index import GuardFrame
from amplint.semantic.names import dotted_name, is_none, names_read, source_text

if TYPE_CHECKING:
    from amplint.semantic.constants import Constants
    from amplint.semantic.index import CallRecord, CodeUnit
    from amplint.semantic.resolve import Resolver


@dataclass(frozen=True)
class Condition:
    text: str
    names: FrozenSet[str]  # the dotted names the test reads; rebinding one invalidates it

    def reads(self, target: str) -> bool:
        return any(name == target or name.startswith(target + ".") for name in self.names)


Assumption = Tuple[Condition, bool]
# The outcome of a test that the file fixes (`amplint.semantic.constants.Constants.truth`), else None.
Truth = Callable[[cst.BaseExpression], Optional[bool]]
# The conditions of a file's tests, each printed once (`SemanticModel` keeps one a file): a
# test's node id (with "!=" for a `!=` test read as its `==`) -> the node and its condition.
ConditionMemo = Dict[object, Tuple[cst.CSTNode, Condition]]


def condition(node: cst.BaseExpression) -> Condition:
    text = _plain_name(node)
    if text is None:
        text = source_text(node)
    else:  # what printing it would have written, counted as printing counts it
        work.charge(len(text) // work.PRINT_CHARACTERS_PER_STEP)
    return Condition(text, frozenset(names_read(node)))


def _plain_name(node: cst.BaseExpression) -> Optional[str]:
    """`source_text(node)` of a name or a dotted name written plainly (no parentheses inside
    and no space around a dot), without printing it: most tests are flags (`args.fp16`)."""
    parts: List[str] = []
    while type(node) is cst.Attribute:
        dot = node.dot  # type: ignore[attr-defined]
        if not (type(dot) is cst.Dot and _no_space(dot.whitespace_before) and _no_space(dot.whitespace_after)):
            return None
        parts.append(node.attr.value)  # type: ignore[attr-defined]
        node = node.value  # type: ignore[attr-defined]
        if node.lpar or node.rpar:  # type: ignore[attr-defined]
            return None
    if type(node) is not cst.Name:
        return None
    parts.append(node.value)  # type: ignore[attr-defined]
    return ".".join(reversed(parts))


def _no_space(whitespace: object) -> bool:
    return type(whitespace) is cst.SimpleWhitespace and whitespace.value == ""  # type: ignore[attr-defined]


def _condition_of(test: cst.BaseExpression, memo: Optional[ConditionMemo], negated: bool = False) -> Condition:
    """`condition(test)` (of `test` written with `==` for `negated`), printed once per test
    with a `memo`: the `if` tests of a function are read again for each outcome and for
    each `and`/`or` case, and printing is most of what reading a test costs."""
    key = ("!=", id(test)) if negated else id(test)
    found = memo.get(key) if memo is not None else None
    if found is not None and found[0] is test:
        return found[1]
    node = test
    if negated:
        assert isinstance(test, cst.Comparison)
        node = test.with_changes(comparisons=[test.comparisons[0].with_changes(operator=cst.Equal())], lpar=[], rpar=[])
    made = condition(node)
    if memo is not None:
        memo[key] = (test, made)
    return made


def assumptions(test: cst.BaseExpression, outcome: bool, memo: Optional[ConditionMemo] = None) -> List[Assumption]:
    """The facts that hold when `test` evaluated to `outcome`; [] when nothing simple does."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return assumptions(test.expression, not outcome, memo)
    if isinstance(test, cst.BooleanOperation):
        # `a and b` true means both are; false tells nothing about either. Dually for `or`.
        both_hold = isinstance(test.operator, cst.And) == outcome
        if not both_hold:
            return []
        return assumptions(test.left, outcome, memo) + assumptions(test.right, outcome, memo)
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if is_none(target.comparator):
            if isinstance(target.operator, cst.Is):
                return assumptions(test.left, not outcome, memo)
            if isinstance(target.operator, cst.IsNot):
                return assumptions(test.left, outcome, memo)
        if isinstance(target.operator, cst.NotEqual):
            return [(_condition_of(test, memo, negated=True), not outcome)]
    if (
        isinstance(test, cst.Call)
        and isinstance(test.func, cst.Name)
        and test.func.value == "bool"
        and len(test.args) == 1
    ):
        return assumptions(test.args[0].value, outcome, memo)
    return [(_condition_of(test, memo), outcome)]


_MAX_ALTERNATIVES = 8


def alternatives(
    test: cst.BaseExpression, outcome: bool, memo: Optional[ConditionMemo] = None, truth: Optional[Truth] = None
) -> List[List[Assumption]]:
    """The ways `test` can evaluate to `outcome`, each as the facts that then hold:
    `a and b` is false when `a` is, or when `a` is true and `b` false. Where `assumptions`
    keeps only what holds in every case, this keeps each case: the `else` of
    `if args.fp16 and args.amp == "pytorch":` still knows `args.amp` when `args.fp16` holds.
    With `truth` (the outcome of a test the file fixes, `Constants.truth`), a part whose
    outcome is fixed holds without telling anything, or cannot hold: no way at all (`[]`)
    when the whole test cannot evaluate to `outcome`."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return alternatives(test.expression, not outcome, memo, truth)
    if isinstance(test, cst.BooleanOperation):
        conjunction = isinstance(test.operator, cst.And) == outcome
        left = alternatives(test.left, outcome, memo, truth)
        right = alternatives(test.right, outcome, memo, truth)
        if conjunction:  # `a and b` true, `a or b` false: both sides as asked
            found = [l + r for l in left for r in right]
        else:  # `a and b` false: `a` false, or `a` true and `b` false
            found = left + [l + r for l in alternatives(test.left, not outcome, memo, truth) for r in right]
        return found if len(found) <= _MAX_ALTERNATIVES else [[]]
    fixed = truth(test) if truth is not None else None
    if fixed is not None:
        return [[]] if fixed == outcome else []
    return [assumptions(test, outcome, memo)]


# A local that stands for an expression: its text and the dotted names the expression reads.
StandIn = Tuple[str, FrozenSet[str]]
IDENTIFIER = re.compile(r"(?<![\w.'\"])([A-Za-z_]\w*)")


def substitute(condition: Condition, stand_ins: Mapping[str, StandIn]) -> Condition:
    """`condition` with each local that stands for a stable expression written as that
    expression: `grad_scaler is not None`, after `grad_scaler = self.grad_scaler`, is the
    condition `self.grad_scaler`, the same one another method tests through its own alias."""
    names: List[str] = []
    touched = False
    for name in condition.names:
        root, dot, rest = name.partition(".")
        if root in stand_ins:
            text, reads = stand_ins[root]
            touched = True
            if rest and all(c.isalnum() or c in "._" for c in text):
                names.append(text + dot + rest)
            else:
                names.extend(reads if not rest else reads | {text + dot + rest})
        else:
            names.append(name)
    if not touched:
        return condition
    text = IDENTIFIER.sub(lambda m: stand_ins[m.group(1)][0] if m.group(1) in stand_ins else m.group(1), condition.text)
    return Condition(text, frozenset(names))


def stand_ins(unit: "CodeUnit", resolver: "Resolver") -> Dict[str, StandIn]:
    """The locals of a function that stand for a stable expression (see `substitute`): bound
    once, by a plain assignment, to an attribute of `self`/`cls`, a name the function does not
    bind (a module global), a parameter it never rebinds, or a call of such a name on such
    names and constants; and the function never rebinds what the expression reads."""
    scope = unit.scope
    rebound = {target for targets, _ in unit.assignments for target in targets}

    def stable_name(name: str) -> bool:
        root = name.split(".")[0]
        if root in ("self", "cls"):
            return not any(name == t or name.startswith(t + ".") for t in rebound if "." in t)
        bindings = scope.bindings.get(root, ())
        return all(binding.kind == "param" for binding in bindings)  # a parameter, or not bound here

    def stable(value: cst.BaseExpression) -> bool:
        name = dotted_name(value)
        if name is not None:
            return stable_name(name)
        if isinstance(value, (cst.SimpleString, cst.Integer, cst.Float)):
            return True
        if isinstance(value, cst.Call):
            callee = dotted_name(value.func)
            return (
                callee is not None
                and stable_name(callee)
                and all(not arg.star and stable(arg.value) for arg in value.args)
            )
        return False

    found: Dict[str, StandIn] = {}
    for name, bindings in scope.bindings.items():
        if len(bindings) != 1 or name in scope.params:
            continue
        binding = bindings[0]
        value = binding.value
        if binding.kind != "assign" or value is None or binding.home not in (None, scope):
            continue
        if stable(value) and dotted_name(value) != name:
            found[name] = (source_text(value), frozenset(names_read(value)))
    return found


class Branches:
    """What taking each branch of a file tells (`assumptions`, `alternatives`), computed once
    per test and outcome; a test's condition printed once (`ConditionMemo`)."""

    def __init__(self, resolver: "Resolver", constants: Optional["Constants"] = None) -> None:
        self.resolver = resolver
        self.constants = constants
        self._assumptions: Dict[Tuple[int, bool], List[Assumption]] = {}
        self._alternatives: Dict[Tuple[int, bool, bool], List[List[Assumption]]] = {}
        self._conditions: ConditionMemo = {}
        self._stand_ins: Dict[int, Dict[str, StandIn]] = {}

    def assumptions(self, test: cst.BaseExpression, outcome: bool) -> List[Assumption]:
        key = (id(test), outcome)
        if key not in self._assumptions:
            self._assumptions[key] = assumptions(test, outcome, self._conditions)
        return self._assumptions[key]

    def alternatives(self, test: cst.BaseExpression, outcome: bool, unit: Optional["CodeUnit"] = None) -> List[List[Assumption]]:
        """The ways a branch can be taken; read in `unit`, with its locals that stand for
        stable expressions written as those expressions (`stand_ins`), so that conditions
        compare across aliases and calls."""
        key = (id(test), outcome, unit is not None)
        if key not in self._alternatives:
            constants = self.constants
            truth = (lambda part: constants.truth(part, unit.scope)) if constants is not None and unit is not None else None  # type: ignore[union-attr]
            cases = alternatives(test, outcome, self._conditions, truth)
            found = self._stand_ins_of(unit) if unit is not None else {}
            if found:
                cases = [[(substitute(cond, found), value) for cond, value in case] for case in cases]
            self._alternatives[key] = cases
        return self._alternatives[key]

    def truth(self, test: cst.BaseExpression, unit: "CodeUnit") -> Optional[bool]:
        """The outcome of `test`, read in `unit`, when the file fixes it (`Constants.truth`):
        `if update:` in `def step(self, loss, update=False)` that no call passes `update` to."""
        return self.constants.truth(test, unit.scope) if self.constants is not None else None

    def never_runs(self, record: "CallRecord") -> bool:
        """Whether the call `record` sits in a branch the file's values never take."""
        if self.constants is None:
            return False
        return any(isinstance(frame, GuardFrame) and self.truth(frame.test, record.unit) is (not frame.outcome) for frame in record.frames)

    def _stand_ins_of(self, unit: "CodeUnit") -> Dict[str, StandIn]:
        if unit.is_module:
            return {}
        found = self._stand_ins.get(id(unit))
        if found is None:
            found = self._stand_ins[id(unit)] = stand_ins(unit, self.resolver)
        return found
