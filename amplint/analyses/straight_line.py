"""What a variable certainly holds where it is read (`StraightLineValues.value_at`): the
nearest earlier `name = value` of its unit on the straight-line way there, with no other
binding of it in between, none in a branch, loop or `with` target on the way, and no
rebinding in a loop around the read. Parameters, globals and anything assigned in only some
branches hold nothing certain. `binding_at` is the statement itself, for the bindings a
client reads further: an unpacking (`q, k = x.chunk(2, -1)`) or an augmented assignment
(`scores *= scale`, whose earlier value is its target's `binding_at`).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Set, Tuple, Union

import libcst as cst

from amplint.semantic import CodeUnit, children, dotted_name, iter_tree, names_bound

_UNKNOWN = object()  # a binding whose value amplint cannot read
_NOT_BOUND = object()


class StraightLineValues:
    """`value_at`, with each unit's map of parents built once."""

    def __init__(self) -> None:
        self._parents: Dict[int, Dict[int, cst.CSTNode]] = {}
        self._bound: Dict[int, FrozenSet[str]] = {}  # id(node) -> the names it binds (`_bound_names`), the tree alive with it

    def value_at(self, name: cst.Name, unit: CodeUnit) -> Optional[cst.BaseExpression]:
        """The value the variable `name` holds where it is read, when the code on the way
        there makes it certain: the nearest earlier `name = value` of the unit with no other
        binding of it in between, none in a branch, loop or `with` target on the way, and no
        rebinding in a loop around the read. None for parameters, globals and anything
        assigned in only some branches."""
        statement = self.binding_at(name, unit)
        if isinstance(statement, cst.Assign) and all(isinstance(target.target, cst.Name) for target in statement.targets):
            return statement.value
        if isinstance(statement, cst.AnnAssign) and isinstance(statement.target, cst.Name):
            return statement.value
        return None

    def binding_at(self, name: cst.Name, unit: CodeUnit) -> Optional[Union[cst.Assign, cst.AugAssign, cst.AnnAssign]]:
        """The assignment that certainly gave the variable `name` its value where it is read
        (as `value_at` finds it): `name = value`, an unpacking that binds it, or `name op=
        value`; None where no such statement is certain."""
        found = self._reaching(name, name.value, unit, branches=False)
        return found[0] if found else None

    def bindings_at(self, name: cst.Name, unit: CodeUnit) -> Optional[List[Union[cst.Assign, cst.AugAssign, cst.AnnAssign]]]:
        """The assignments one of which certainly gave `name` its value where it is read: as
        `binding_at`, and where an `if` on the way binds it, the last assignment of each of
        its branches (`if mask is not None: scores = scores.masked_fill(...)`), with those
        before the `if` where a branch leaves it as it was; None where that is not certain (a
        loop, a `try`, a `with` that binds it)."""
        return self._reaching(name, name.value, unit, branches=True)

    def _reaching(self, node: cst.CSTNode, wanted: str, unit: CodeUnit, branches: bool) -> Optional[List]:
        parents = self.parents(unit)
        current: cst.CSTNode = node
        while True:
            parent = parents.get(id(current))
            if parent is None:
                return None
            if isinstance(parent, (cst.For, cst.While)):
                if _binds(parent, wanted, self._bound):
                    return None  # an iteration variable, or rebound on an earlier iteration
            elif isinstance(parent, cst.With):
                if any(item.asname is not None and wanted in names_bound(item.asname.name) for item in parent.items):
                    return None
            elif isinstance(parent, cst.ExceptHandler):
                if parent.name is not None and wanted in names_bound(parent.name.name):
                    return None
            body = _statements(parent)
            if body is not None:
                position = next((i for i, statement in enumerate(body) if statement is current), None)
                if position is not None:
                    for statement in reversed(body[:position]):
                        found = _binding_in(statement, wanted, self._bound)
                        if found is _UNKNOWN and branches and isinstance(statement, cst.If):
                            inside = _branch_bindings(statement, wanted, self._bound)
                            if inside is None:
                                return None
                            bindings, falls_through = inside
                            if falls_through:
                                before = self._reaching(statement, wanted, unit, branches)
                                return bindings + before if before is not None else None
                            return bindings
                        if found is _UNKNOWN:
                            return None
                        if found is not _NOT_BOUND:
                            return [found]
            if parent is unit.node:
                return None
            current = parent

    def parents(self, unit: CodeUnit) -> Dict[int, cst.CSTNode]:
        """Each node of the unit's own code (not of functions, classes or lambdas in it) by
        id -> its parent."""
        key = id(unit)
        if key not in self._parents:
            parents: Dict[int, cst.CSTNode] = {}
            stack: List[cst.CSTNode] = [unit.node]
            while stack:
                node = stack.pop()
                for child in children(node):
                    parents[id(child)] = node
                    if not isinstance(child, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                        stack.append(child)
            self._parents[key] = parents
        return self._parents[key]


def _branch_bindings(statement: cst.If, name: str, bound: Dict[int, FrozenSet[str]]) -> Optional[Tuple[List, bool]]:
    """The last assignment of `name` in each branch of an `if` (its `elif`s and `else`), and
    whether some branch leaves it as it was; None where a branch binds it otherwise."""
    if _binds(statement.test, name, bound):
        return None
    found: List = []
    falls_through = False
    branch: Optional[cst.CSTNode] = statement
    while branch is not None:
        block = branch.body if isinstance(branch, (cst.If, cst.Else)) else None
        inside = _block_bindings(block, name, bound) if block is not None else None
        if inside is None:
            return None
        found.extend(inside[0])
        falls_through = falls_through or inside[1]
        if isinstance(branch, cst.If):
            if branch.orelse is None:
                falls_through = True
            elif isinstance(branch.orelse, cst.If) and _binds(branch.orelse.test, name, bound):
                return None
            branch = branch.orelse
        else:
            branch = None
    return found, falls_through


def _block_bindings(block: cst.BaseSuite, name: str, bound: Dict[int, FrozenSet[str]]) -> Optional[Tuple[List, bool]]:
    """The last assignment of `name` in a block (through the `if`s in it), and whether the
    block may leave it unbound there."""
    body = _statements(block)
    if body is None:
        return None
    found: List = []
    for statement in reversed(body):
        binding = _binding_in(statement, name, bound)
        if binding is _NOT_BOUND:
            continue
        if binding is _UNKNOWN:
            if not isinstance(statement, cst.If):
                return None
            inside = _branch_bindings(statement, name, bound)
            if inside is None:
                return None
            found.extend(inside[0])
            if inside[1]:
                continue  # a branch leaves it as the statements before the `if` made it
            return found, False
        found.append(binding)
        return found, False
    return found, True


def _statements(node: cst.CSTNode) -> Optional[List[cst.CSTNode]]:
    if isinstance(node, (cst.Module, cst.IndentedBlock, cst.SimpleStatementSuite, cst.SimpleStatementLine)):
        return list(node.body)
    return None


def _binding_in(statement: cst.CSTNode, name: str, bound: Dict[int, FrozenSet[str]]) -> object:
    """The assignment in `statement` that binds `name`: `name = value`, an unpacking, `name
    op= value`; _UNKNOWN for any other binding of it (in a branch, a loop, a `with`);
    _NOT_BOUND when it does not bind it."""
    if isinstance(statement, cst.SimpleStatementLine):
        for small in reversed(statement.body):
            found = _binding_in(small, name, bound)
            if found is not _NOT_BOUND:
                return found
        return _NOT_BOUND
    if isinstance(statement, cst.Assign):
        if not any(name in names_bound(target.target) for target in statement.targets):
            return _NOT_BOUND if not _binds(statement.value, name, bound) else _UNKNOWN
        return statement
    if isinstance(statement, cst.AnnAssign):
        if name in names_bound(statement.target):
            return statement if statement.value is not None else _UNKNOWN
        return _NOT_BOUND
    if isinstance(statement, cst.AugAssign) and isinstance(statement.target, cst.Name) and statement.target.value == name:
        return statement if not _binds(statement.value, name, bound) else _UNKNOWN
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        # A definition binds its own name; what its body assigns is its own (a walk of every
        # function before a module-level read was the square of the module's size).
        return _UNKNOWN if statement.name.value == name else _NOT_BOUND
    return _UNKNOWN if _binds(statement, name, bound) else _NOT_BOUND


def _binds(node: cst.CSTNode, name: str, bound: Dict[int, FrozenSet[str]]) -> bool:
    """Whether anything in `node` (not in nested functions' bodies) binds `name`. The names
    a node binds are gathered once (`bound`: id(node) -> them): a read looks back over every
    statement before it, and a module's reads over all its statements."""
    names = bound.get(id(node))
    if names is None:
        names = bound[id(node)] = _bound_names(node)
    return name in names


def _bound_names(node: cst.CSTNode) -> FrozenSet[str]:
    def descend(current: cst.CSTNode) -> bool:
        return current is node or not isinstance(current, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

    found: Set[str] = set()
    for current in iter_tree(node, descend):
        targets: List[cst.CSTNode] = []
        if isinstance(current, cst.Assign):
            targets = [t.target for t in current.targets]
        elif isinstance(current, (cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr)):
            targets = [current.target]
        elif isinstance(current, cst.WithItem) and current.asname is not None:
            targets = [current.asname.name]
        elif isinstance(current, cst.ExceptHandler) and current.name is not None:
            targets = [current.name.name]
        elif isinstance(current, cst.Del):
            targets = [current.target]
        elif isinstance(current, (cst.FunctionDef, cst.ClassDef)) and current is not node:
            found.add(current.name.value)
        elif isinstance(current, (cst.Import, cst.ImportFrom)) and not isinstance(getattr(current, "names", None), cst.ImportStar):
            for alias in current.names:  # type: ignore[union-attr]
                local = alias.asname.name if alias.asname is not None else alias.name
                found.add((dotted_name(local) or "").split(".")[0])  # type: ignore[arg-type]
        for target in targets:
            if isinstance(target, cst.BaseExpression):
                found.update(names_bound(target))
    return frozenset(found)
