"""What may run after a call: the statements of its unit that can execute after it, the calls
they make, and those of the file's helpers and constructors that run them (`Successors`).

Read off the tree, not the flow: a `return`, `raise`, `break` or `continue` ends the way
through a block, a loop runs its body again, the other branch of an `if` does not run. A call
of a helper of the file runs the helper's calls; a call in a class's `__init__` comes before
every other method of the class (the instance exists only after it); a call in a helper is
followed by what may follow each call of that helper in its callers (a validation helper
called in a training loop: the loop's next steps).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amplint.semantic.calls import Classifier
from amplint.semantic.index import CallRecord, CodeUnit, ModuleIndex
from amplint.semantic.names import dotted_name
from amplint.semantic.walk import iter_tree

_MAX_CALLERS = 2  # callers of callers followed up from a helper


class Successors:
    """The statements that may run after a call in its unit; the helpers and constructors of
    the file a call runs, and the calls of each helper."""

    def __init__(self, index: ModuleIndex, classifier: Classifier) -> None:
        self.index = index
        self.classifier = classifier
        self._parents: Dict[int, Dict[int, Tuple[Optional[cst.CSTNode], List[cst.CSTNode], int]]] = {}
        self._statement_of: Dict[int, Dict[int, cst.CSTNode]] = {}
        self._callers: Optional[Dict[int, List[CallRecord]]] = None
        # `calls_after`, asked again and again of the same calls (each cast, each cast back)
        self.after: Dict[Tuple[int, int, int], List[CallRecord]] = {}
        self._constructors: Optional[Dict[str, CodeUnit]] = None
        self._calls_in: Dict[int, FrozenSet[int]] = {}  # id(statement) -> `calls_within` it

    def calls_within(self, statements: List[cst.CSTNode]) -> Set[int]:
        """`calls_within`, each statement walked once: the statements after one call are
        mostly those after another (the rest of a long training function)."""
        found: Set[int] = set()
        for statement in statements:
            found |= self._calls_of(statement)
        return found

    def _calls_of(self, statement: cst.CSTNode) -> FrozenSet[int]:
        """`calls_within([statement])`, from those of the statements nested in it (each
        known once): a loop's calls are its header's and its body statements', which the
        statements after a call inside it ask for again."""
        known = self._calls_in.get(id(statement))
        if known is not None:
            return known
        found: Set[int] = set()
        nested: List[cst.CSTNode] = []

        def descend(node: cst.CSTNode) -> bool:
            if node is not statement and _is_statement(node):
                nested.append(node)  # its calls come from its own entry
                return False
            return not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

        for node in iter_tree(statement, descend):
            if isinstance(node, cst.Call):
                found.add(id(node))
        for inner in nested:
            found |= self._calls_of(inner)
        known = self._calls_in[id(statement)] = frozenset(found)
        return known

    def callee(self, record: CallRecord) -> Optional[CodeUnit]:
        """The unit of the file a call runs: a helper's, or a class's `__init__` (`EMA(model)`)."""
        callee = getattr(self.classifier.classify(record), "callee", None)
        if callee is not None:
            return callee
        if self._constructors is None:
            self._constructors = {
                unit.class_name: unit
                for unit in self.index.units
                if unit.class_name is not None and unit.name == f"{unit.class_name}.__init__"
            }
        name = dotted_name(record.node.func)
        return self._constructors.get(name) if name is not None and name in self.index.classes else None

    def callers(self, unit: CodeUnit) -> List[CallRecord]:
        """The calls of the file that run `unit`."""
        if self._callers is None:
            self._callers = {}
            for record in self.index.calls:
                callee = self.callee(record)
                if callee is not None and record.immediate:
                    self._callers.setdefault(id(callee), []).append(record)
        return self._callers.get(id(unit), [])

    def calls_after(self, record: CallRecord, depth: int = 0, came_from: Optional[CodeUnit] = None) -> List[CallRecord]:
        """The calls that may run after `record` (itself included): in the statements of its unit
        that may follow it, in the helpers of the file those call (a class of the file constructed
        runs its `__init__`), for a call in `__init__`, in every other method of the class (the
        instance exists only after it), and, for a call in a helper of the file, what may follow
        each call of that helper in its callers (a validation helper called in a training loop:
        the loop's next steps)."""
        key = (id(record.node), depth, id(came_from))
        known = self.after.get(key)
        if known is None:
            known = self.after[key] = self._calls_after(record, depth, came_from)
        return known

    def _calls_after(self, record: CallRecord, depth: int, came_from: Optional[CodeUnit]) -> List[CallRecord]:
        unit = record.unit
        ids = self.calls_within(self.statements_after(record))
        found = [r for r in unit.calls if id(r.node) in ids and r.immediate]
        if unit.name.rsplit(".", 1)[-1] == "__init__" and unit.class_name is not None:
            found += [r for u in self.index.units if u.class_name == unit.class_name and u is not unit for r in u.calls]
        # The helper a caller's call site is followed up from: what runs in it after the call was
        # counted already (not its whole body again).
        seen = {id(unit)} | ({id(came_from)} if came_from is not None else set())
        pending = list(found)
        while pending:
            callee = self.callee(pending.pop())
            if callee is not None and id(callee) not in seen and len(seen) < 32:
                seen.add(id(callee))
                found += callee.calls
                pending += callee.calls
        if depth < _MAX_CALLERS and not unit.is_module:
            for call in self.callers(unit):
                if call.unit is not unit:
                    found += self.calls_after(call, depth + 1, came_from=unit)
        return found

    def statements_after(self, record: CallRecord) -> List[cst.CSTNode]:
        """The statement holding the call, then every statement of its unit that may run
        after it: the rest of its block, and of each enclosing block, up to a `return`,
        `raise`, `break` or `continue`; a loop's whole body again (the next iteration); never
        the other branch of an `if`."""
        statement = self.statement(record)
        if statement is None:
            return []
        parents = self._tree(record.unit)
        reached: List[cst.CSTNode] = [statement]
        node = statement
        while id(node) in parents:
            parent, block, index = parents[id(node)]
            for later in block[index + 1 :]:
                reached.append(later)
                if _ends_the_way(later):
                    return reached
            if parent is None:
                break
            if isinstance(parent, (cst.For, cst.While)) and _in_body(node, parent):
                reached.extend(_block(parent.body))  # the next iteration
            node = parent
        return reached

    def statement(self, record: CallRecord) -> Optional[cst.CSTNode]:
        """The innermost statement of the call's unit that evaluates the call."""
        unit = record.unit
        if id(unit) not in self._statement_of:
            mapping: Dict[int, cst.CSTNode] = {}
            for statement in self._tree(unit).values():
                node = statement[1][statement[2]]
                for inner in _own_nodes(node):
                    if isinstance(inner, cst.Call):
                        mapping[id(inner)] = node
            self._statement_of[id(unit)] = mapping
        return self._statement_of[id(unit)].get(id(record.node))

    def _tree(self, unit: CodeUnit) -> Dict[int, Tuple[Optional[cst.CSTNode], List[cst.CSTNode], int]]:
        """id(statement) -> (the compound statement holding it or None, its block, its index)."""
        key = id(unit)
        if key not in self._parents:
            parents: Dict[int, Tuple[Optional[cst.CSTNode], List[cst.CSTNode], int]] = {}
            pending: List[Tuple[Optional[cst.CSTNode], List[cst.CSTNode]]] = [(None, list(unit.body))]
            while pending:
                parent, block = pending.pop()
                for index, statement in enumerate(block):
                    parents[id(statement)] = (parent, block, index)
                    for inner in _blocks(statement):
                        pending.append((statement, inner))
            self._parents[key] = parents
        return self._parents[key]


_STATEMENT_TYPES: Dict[type, bool] = {}  # LibCST's bases are ABCs: each node type checked once


def _is_statement(node: cst.CSTNode) -> bool:
    kind = type(node)
    known = _STATEMENT_TYPES.get(kind)
    if known is None:
        known = _STATEMENT_TYPES[kind] = issubclass(kind, cst.BaseStatement)
    return known


def _block(suite: cst.BaseSuite) -> List[cst.CSTNode]:
    if isinstance(suite, cst.IndentedBlock):
        return list(suite.body)
    return [suite]  # SimpleStatementSuite: `for x in y: f(x)`


def _blocks(statement: cst.CSTNode) -> List[List[cst.CSTNode]]:
    """The blocks directly inside a compound statement (not a nested function or class)."""
    if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
        return []
    found: List[List[cst.CSTNode]] = []
    if isinstance(statement, cst.If):
        found.append(_block(statement.body))
        if statement.orelse is not None:
            if isinstance(statement.orelse, cst.If):
                found.append([statement.orelse])
            else:
                found.append(_block(statement.orelse.body))
    elif isinstance(statement, (cst.For, cst.While)):
        found.append(_block(statement.body))
        if statement.orelse is not None:
            found.append(_block(statement.orelse.body))
    elif isinstance(statement, cst.With):
        found.append(_block(statement.body))
    elif isinstance(statement, (cst.Try, cst.TryStar)):
        found.append(_block(statement.body))
        for handler in statement.handlers:
            found.append(_block(handler.body))
        if statement.orelse is not None:
            found.append(_block(statement.orelse.body))
        if statement.finalbody is not None:
            found.append(_block(statement.finalbody.body))
    elif isinstance(statement, cst.Match):
        for case in statement.cases:
            found.append(_block(case.body))
    return found


def _in_body(node: cst.CSTNode, loop: cst.CSTNode) -> bool:
    return any(node is inner for inner in _block(loop.body))  # type: ignore[attr-defined]


def _ends_the_way(statement: cst.CSTNode) -> bool:
    """`return`, `raise`, `break` or `continue` as a statement of the block: nothing after it
    in the block runs, nor (for return and raise) anything after the block."""
    if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        return any(isinstance(small, (cst.Return, cst.Raise, cst.Break, cst.Continue)) for small in statement.body)
    return False


def _own_nodes(statement: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """The nodes a statement evaluates itself: a simple statement whole, a compound
    statement's header (its test, iterable or `with` items), never a nested body."""
    if isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
        yield from iter_tree(statement, lambda n: not isinstance(n, cst.Lambda))
        return
    headers: List[cst.CSTNode] = []
    if isinstance(statement, (cst.If, cst.While)):
        headers.append(statement.test)
    elif isinstance(statement, cst.For):
        headers.append(statement.iter)
    elif isinstance(statement, cst.With):
        headers.extend(item.item for item in statement.items)
    elif isinstance(statement, cst.Match):
        headers.append(statement.subject)
    for header in headers:
        yield from iter_tree(header, lambda n: not isinstance(n, cst.Lambda))


def calls_within(statements: List[cst.CSTNode]) -> Set[int]:
    """The ids of every call these statements evaluate, nested blocks included (not the
    bodies of functions or classes defined there)."""
    found: Set[int] = set()

    def descend(node: cst.CSTNode) -> bool:
        return not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

    for statement in statements:
        for node in iter_tree(statement, descend):
            if isinstance(node, cst.Call):
                found.add(id(node))
    return found
