"""What the project gives a name: the values a test reads, when the file fixes every one.

A guard in a helper or a trainer often reads a value the file itself decides: a parameter's
default where the file's calls omit it (`def step(self, loss, update=False)`), the constant
every call of the file passes for it, an attribute its class sets once, in `__init__`, to a
literal or to such a parameter (`self.accum = accum` with `Trainer(accum=1)`). Such a test
has one outcome, and the other branch never runs (`Branches.alternatives` leaves it out): an
update that can never run is missing, one that always runs is there.

Values are Python literals (booleans, None, numbers, strings). Anything else is unknown and
never guessed: a parameter with no call in the file, a call that passes a variable, `*args`
or `**kwargs`, an attribute set anywhere but once in `__init__` or written on another object
(`trainer.accum = 4`), a class another class of the file derives from (its `super().__init__`
may pass anything), a counter, a config.
"""

from __future__ import annotations

import operator
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Tuple

import libcst as cst

from amplint.semantic.index import Binding, CallRecord, ModuleIndex, Scope
from amplint.semantic.names import dotted_name
from amplint.semantic.resolve import Resolver, passed_for_parameter

Values = Optional[FrozenSet[object]]  # None: unknown

_MAX_DEPTH = 6
_MAX_VALUES = 8
_ARITHMETIC: Dict[type, Callable[[object, object], object]] = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.FloorDivide: operator.floordiv,
    cst.Modulo: operator.mod,
}
_COMPARISONS: Dict[type, Callable[[object, object], object]] = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThan: operator.gt,
    cst.GreaterThanEqual: operator.ge,
    cst.Is: operator.is_,
    cst.IsNot: operator.is_not,
}


class Constants:
    """The values the file fixes for names, and the outcome of tests over them."""

    def __init__(self, index: ModuleIndex, resolver: Resolver) -> None:
        self.index = index
        self.resolver = resolver
        self._parameters: Dict[int, Values] = {}
        self._derived: Optional[FrozenSet[str]] = None

    # tests
    def truth(self, test: cst.BaseExpression, scope: Scope) -> Optional[bool]:
        """True or False when `test` has that outcome whatever the file passes; else None."""
        found = self.values(test, scope)
        if not found:
            return None
        outcomes = {bool(value) for value in found}
        return outcomes.pop() if len(outcomes) == 1 else None

    # values
    def values(self, node: cst.BaseExpression, scope: Scope, depth: int = 0) -> Values:
        """Every value `node` may have, read in `scope`; None when one is unknown."""
        if depth > _MAX_DEPTH:
            return None
        literal = _literal(node)
        if literal is not _UNKNOWN:
            return frozenset({literal})
        if isinstance(node, cst.UnaryOperation):
            inner = self.values(node.expression, scope, depth + 1)
            if inner is None:
                return None
            if isinstance(node.operator, cst.Not):
                return frozenset(not value for value in inner)
            if isinstance(node.operator, cst.Minus) and all(_number(value) for value in inner):
                return frozenset(-value for value in inner)  # type: ignore[operator]
            return None
        if isinstance(node, cst.BooleanOperation):
            return self._boolean(node, scope, depth)
        if isinstance(node, cst.BinaryOperation):
            return self._arithmetic(node, scope, depth)
        if isinstance(node, cst.Comparison) and len(node.comparisons) == 1:
            compare = _COMPARISONS.get(type(node.comparisons[0].operator))
            left = self.values(node.left, scope, depth + 1)
            right = self.values(node.comparisons[0].comparator, scope, depth + 1) if left is not None else None
            if compare is None or left is None or right is None:
                return None
            return _combine(compare, left, right)
        name = dotted_name(node)
        if name is None:
            return None
        if name.startswith("self.") and name.count(".") == 1:
            return self._attribute(name, scope, depth)
        if "." in name or self.resolver.qualified(node) is not None:
            return None
        bound = self.resolver.binding_scope(name, scope)
        if bound is None or bound.kind != "function":
            return None  # a module's setting is the user's to flip, not a constant of the code
        return self._bindings(list(bound.bindings[name]), depth)

    def _boolean(self, node: cst.BooleanOperation, scope: Scope, depth: int) -> Values:
        """`a and b` / `a or b`, with Python's short circuit: `False and x` is False whatever
        `x` is."""
        left = self.values(node.left, scope, depth + 1)
        conjunction = isinstance(node.operator, cst.And)
        if left is not None and all(bool(value) != conjunction for value in left):
            return left  # decided by the left side alone
        right = self.values(node.right, scope, depth + 1)
        if left is None or right is None:
            return None
        found = set(value for value in left if bool(value) != conjunction) | set(right)
        return frozenset(found) if len(found) <= _MAX_VALUES else None

    def _arithmetic(self, node: cst.BinaryOperation, scope: Scope, depth: int) -> Values:
        compute = _ARITHMETIC.get(type(node.operator))
        if compute is None:
            return None
        right = self.values(node.right, scope, depth + 1)
        if compute is operator.mod and right == frozenset({1}):
            return frozenset({0})  # `(step + 1) % accum` with `accum` 1: whatever the step
        left = self.values(node.left, scope, depth + 1)
        if left is None or right is None or not all(_number(v) for v in left | right):
            return None
        return _combine(compute, left, right)

    def _bindings(self, bindings: List[Binding], depth: int) -> Values:
        if not bindings:
            return None
        found: set = set()
        for binding in bindings:
            if binding.kind == "param":
                values = self.parameter(binding, depth)
            elif binding.kind == "assign" and binding.value is not None:
                values = self.values(binding.value, binding.value_scope, depth + 1)
            else:
                return None
            if values is None:
                return None
            found |= values
        return frozenset(found) if len(found) <= _MAX_VALUES else None

    def _attribute(self, name: str, scope: Scope, depth: int) -> Values:
        """`self.x`, assigned only in its class's `__init__` (each assignment there counts), and
        nowhere else in the file on any object."""
        owner = self.resolver.owning_class(scope)
        if owner is None or name not in owner.attributes or owner.name in self._derived_classes():
            return None
        attribute = name.split(".", 1)[1]
        bindings = owner.attributes[name]
        if any(binding.value_scope.name != f"{owner.name}.__init__" for binding in bindings):
            return None
        if any(key.rsplit(".", 1)[-1] == attribute for key in self.index.dotted):
            return None  # `trainer.accum = 4` elsewhere
        return self._bindings(list(bindings), depth)

    def parameter(self, binding: Binding, depth: int = 0) -> Values:
        """A parameter: what each call of its function in the file passes, or its default
        where a call omits it; None without such a call, or when one is unknown."""
        key = id(binding.node)
        if key not in self._parameters:
            self._parameters[key] = None  # a cycle through the same parameter knows nothing
            self._parameters[key] = self._parameter(binding, depth)
        return self._parameters[key]

    def _parameter(self, binding: Binding, depth: int) -> Values:
        function = binding.scope
        param = binding.node
        if function.kind != "function" or not isinstance(param, cst.Param) or param.star:
            return None
        calls = self.calls_of(function)
        if not calls:
            return None
        default = param.default
        found: set = set()
        for record, bound_self in calls:
            if any(arg.star for arg in record.node.args):
                return None
            passed = passed_for_parameter(record.node, function.params, binding.name, bound_self)
            if passed is None and default is None:
                return None
            if passed is None:
                values = self.values(default, function.parent or function, depth + 1)  # type: ignore[arg-type]
            else:
                values = self.values(passed, record.unit.scope, depth + 1)
            if values is None:
                return None
            found |= values
        return frozenset(found) if len(found) <= _MAX_VALUES else None

    def calls_of(self, function: Scope) -> List[Tuple[CallRecord, bool]]:
        """The calls of the file that surely run `function`, each with whether it binds `self`
        itself; empty when a call of the same name might run it too (`runner.step(...)` on an
        object of unknown class), or the function is a method of a class another class of the
        file derives from."""
        name = function.name.rsplit(".", 1)[-1]
        owner = function.parent if function.parent is not None and function.parent.kind == "class" else None
        if owner is not None and owner.name in self._derived_classes():
            return []
        method = owner is not None and function.params[:1] in (["self"], ["cls"])
        found: List[Tuple[CallRecord, bool]] = []
        candidates: Iterable[CallRecord] = self.index.calls_to(name)
        if owner is not None and name == "__init__":
            candidates = [r for r in self.index.calls_to(owner.name.rsplit(".", 1)[-1]) if dotted_name(r.node.func) == owner.name]
        for record in candidates:
            runs = self._runs(record, function, owner, name)
            if runs is None:
                return []
            if runs:
                found.append((record, method))
        return found

    def _runs(self, record: CallRecord, function: Scope, owner: Optional[Scope], name: str) -> Optional[bool]:
        """Whether `record` runs `function`: True, False, or None when it may."""
        func = record.node.func
        scope = record.unit.scope
        if owner is not None and name == "__init__":
            return True
        if isinstance(func, cst.Name):
            bindings = self.resolver.bindings(func.value, scope)
            if owner is None and len(bindings) == 1 and bindings[0].node is function.node:
                return True
            return False if all(b.node is not function.node for b in bindings) and bindings else None
        if owner is None or not isinstance(func, cst.Attribute):
            return False if owner is None and isinstance(func, cst.Attribute) and dotted_name(func.value) is not None else None
        receiver = dotted_name(func.value)
        if receiver in ("self", "cls"):
            classes = self.resolver.class_and_bases(scope)
            return True if any(c is owner for c in classes) else (None if not classes else False)
        if receiver is None:
            return None
        values = self.resolver.values(receiver, scope)
        classes = {dotted_name(v.func) if isinstance(v, cst.Call) else None for v, _ in values}
        if values and classes == {owner.name}:
            return True
        if values and None not in classes and owner.name not in classes:
            return False  # `optimizer.step()` with `optimizer = torch.optim.SGD(...)`
        return None

    def _derived_classes(self) -> FrozenSet[str]:
        """The classes of the file some other class of the file names as a base."""
        if self._derived is None:
            self._derived = frozenset(base.rsplit(".", 1)[-1] for scope in self.index.classes.values() for base in scope.bases)
        return self._derived


class _Unknown:
    pass


_UNKNOWN = _Unknown()


def _literal(node: cst.BaseExpression) -> object:
    if isinstance(node, cst.Name) and node.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[node.value]
    if isinstance(node, (cst.Integer, cst.Float)):
        return node.evaluated_value
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value
    return _UNKNOWN


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _combine(compute: Callable[[object, object], object], left: FrozenSet[object], right: FrozenSet[object]) -> Values:
    found = set()
    for a in left:
        for b in right:
            try:
                found.add(compute(a, b))
            except (TypeError, ZeroDivisionError, ValueError):
                return None
    return frozenset(found) if len(found) <= _MAX_VALUES else None
