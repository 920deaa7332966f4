"""How often code runs: the loop whose every iteration runs a call again.

A call runs once per iteration of the innermost loop around it in its unit. A call in no loop
of its unit runs once per call of the unit, so it repeats with every loop of a caller in the
file around a call of that unit (followed a few callers up): `scaler = GradScaler()` in
`train_one_epoch`, called from `for epoch in ...:`, runs once per epoch.

Not every loop repeats what it holds. A body that ends every iteration with a top-level
`break`, `return` or `raise` runs once (a retry loop that breaks on success), and a call
under an `if` whose test changes from iteration to iteration (`if scaler is None:`, `if
step == 0:`, `if not hasattr(self, "scaler"):`) need not run each time. What is bound in the
loop, or in the functions an iteration calls, is what changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple, Union

import libcst as cst

from amplint.semantic import (
    Analysis,
    Binding,
    CallRecord,
    CodeUnit,
    EventKind,
    GuardFrame,
    HelperCall,
    LoopFrame,
    Occurrence,
    Ref,
    SemanticModel,
    all_bindings,
    binding_key,
    dotted_name,
    iter_tree,
    names_bound,
    names_read,
    roots,
    source_text,
)

Loop = Union[cst.For, cst.While]

# How many callers up a function's calls are followed to find the loop that repeats them.
_MAX_CALLERS = 3
# Tests that ask whether something exists yet: lazy initialisation, which runs once.
_EXISTENCE_CHECKS = frozenset({"hasattr", "getattr", "callable", "isinstance"})


@dataclass(frozen=True, eq=False)
class Repetition:
    """A call runs once per iteration of `loop`, written in `unit`: directly in the loop's body
    (`via` empty), or in a function that the calls along `via` reach from inside the loop
    (`via[0]` is in the loop; each next call is in the callee of the one before)."""

    loop: Loop
    unit: CodeUnit
    via: Tuple[CallRecord, ...] = ()

    @property
    def header(self) -> str:
        """The loop's first line, as a message quotes it: `for epoch in range(epochs):`."""
        return loop_header(self.loop)


def loop_header(loop: Loop) -> str:
    """A loop's first line, as a message quotes it: `for epoch in range(epochs):`."""
    if isinstance(loop, cst.For):
        return f"for {source_text(loop.target)} in {source_text(loop.iter)}:"
    return f"while {source_text(loop.test)}:"


class Repetitions(Analysis):
    """Which loops run a call again each iteration: `model.facts(Repetitions)`."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        self.index = model.index
        self.classify = model.classify
        self._callers: Optional[Dict[int, List[CallRecord]]] = None
        self._bodies: Dict[int, FrozenSet[int]] = {}
        self._bindings: Optional[List[Binding]] = None
        # The file's bindings by their statement's id, by their key, by the unit they are in:
        # each query reads only its own (a file of many loops costs their number, not its square).
        self._by_node: Dict[int, List[Binding]] = {}
        self._by_key: Dict[str, List[Binding]] = {}
        self._by_unit: Dict[int, List[Binding]] = {}

    # ------------------------------------------------------------------ lookups
    def record(self, call: cst.Call) -> Optional[CallRecord]:
        """The index's record of a call node."""
        return self.model.call_record(call)

    def loops_around(self, node: cst.CSTNode) -> List[Loop]:
        """The loops around a call in its unit, outermost first (none for what is not a call)."""
        return [frame.node for frame in self._frames(node) if isinstance(frame, LoopFrame)]

    def branches_around(self, node: cst.CSTNode, loop: Optional[Loop] = None) -> List[GuardFrame]:
        """The `if` branches around a call in its unit, outermost first; with `loop`, only
        those between that loop and the call."""
        frames = self._frames(node)
        inner = next((i for i, f in enumerate(frames) if isinstance(f, LoopFrame) and f.node is loop), -1)
        return [frame for frame in frames[inner + 1 :] if isinstance(frame, GuardFrame)]

    def every_iteration(self, node: cst.CSTNode, loop: Loop) -> bool:
        """Whether the call `node`, written in `loop`'s unit, runs in every iteration of it (no
        `if` between them tests what an iteration changes: `runs_every_iteration`); True for
        what is not a call of the file."""
        record = self.record(node) if isinstance(node, cst.Call) else None
        return record is None or self.runs_every_iteration(record, Repetition(loop, record.unit))

    def _frames(self, node: cst.CSTNode) -> List[object]:
        record = self.record(node) if isinstance(node, cst.Call) else None
        return list(record.frames) if record is not None else []

    def callers(self, unit: CodeUnit) -> List[CallRecord]:
        """The calls in this file that run `unit` (a function of the file)."""
        if self._callers is None:
            self._callers = {}
            for record in self.index.calls:
                if not record.immediate:
                    continue
                item = self.classify(record)
                if isinstance(item, HelperCall) and item.callee is not None:
                    self._callers.setdefault(id(item.callee), []).append(record)
        return self._callers.get(id(unit), [])

    def callees(self, unit: CodeUnit) -> List[CodeUnit]:
        """The functions of this file that `unit` calls."""
        found = []
        for record in unit.calls:
            item = self.classify(record)
            if isinstance(item, HelperCall) and item.callee is not None:
                found.append(item.callee)
        return found

    def connected(self, units: List[CodeUnit]) -> List[CodeUnit]:
        """`units`, everything they call, everything that calls them, transitively: the
        code of this file one run of them may go through."""
        found: List[CodeUnit] = []
        for direction in (self.callees, lambda unit: [record.unit for record in self.callers(unit)]):
            pending = list(units)
            seen: Set[int] = set()
            while pending:
                unit = pending.pop()
                if id(unit) in seen:
                    continue
                seen.add(id(unit))
                if not any(unit is other for other in found):
                    found.append(unit)
                pending.extend(direction(unit))
        return found

    def body(self, loop: Loop) -> FrozenSet[int]:
        """The ids of every node in the loop's body (not its `else`)."""
        key = id(loop)
        if key not in self._bodies:
            self._bodies[key] = frozenset(id(node) for node in iter_tree(loop.body))
        return self._bodies[key]

    def inside(self, node: cst.CSTNode, loop: Loop) -> bool:
        return id(node) in self.body(loop)

    # ------------------------------------------------------------------ the loops
    def around(self, record: CallRecord) -> List[Repetition]:
        """The loops a call runs once per iteration of: the innermost loop around it in its
        unit, or else, for each caller in the file, the loops around the calls that run it.
        Loops that run their body once are not repetitions."""
        return list(self._around(record, (), 0))

    def _around(self, record: CallRecord, via: Tuple[CallRecord, ...], depth: int) -> Iterator[Repetition]:
        loops = [frame.node for frame in record.frames if isinstance(frame, LoopFrame)]
        if loops:
            if self.repeats(loops[-1]):
                yield Repetition(loops[-1], record.unit, via)
            return
        if depth >= _MAX_CALLERS or record.unit.is_module:
            return
        for caller in self.callers(record.unit):
            if any(caller is seen for seen in via):
                continue  # recursion
            yield from self._around(caller, (caller,) + via, depth + 1)

    def repeats(self, loop: Loop) -> bool:
        """False for a loop whose body ends every iteration at a top-level `break`, `return`
        or `raise` (in the body itself, or in the body of a `try` there): it runs once."""
        statements: List[cst.CSTNode] = list(loop.body.body)
        while statements:
            statement = statements.pop(0)
            if isinstance(statement, cst.SimpleStatementLine):
                if any(isinstance(small, (cst.Break, cst.Return, cst.Raise)) for small in statement.body):
                    return False
            elif isinstance(statement, (cst.Try, cst.TryStar)):
                statements.extend(statement.body.body)
                if statement.orelse is not None:
                    statements.extend(statement.orelse.body.body)
        return True

    # ------------------------------------------------------------------ what an iteration runs
    def units_called(self, repetition: Repetition) -> List[CodeUnit]:
        """The functions along `via`: each runs whole, once per iteration."""
        units = []
        for call in repetition.via:
            item = self.classify(call)
            if isinstance(item, HelperCall) and item.callee is not None:
                units.append(item.callee)
        return units

    def binds_each_iteration(self, binding: Binding, repetition: Repetition) -> bool:
        """Whether `binding` runs within one iteration: its statement is in the loop's body, or
        in a function the iteration calls along `via` (a parameter is not: it holds what the
        caller passes)."""
        if binding.kind == "param":
            return False
        if self.inside(binding.node, repetition.loop):
            return True
        home = self.index.unit_of_scope.get(id(binding.value_scope))
        return home is not None and any(home is unit for unit in self.units_called(repetition))

    def all_bindings(self) -> List[Binding]:
        if self._bindings is None:
            self._bindings = list(all_bindings(self.index))
            for binding in self._bindings:
                self._by_node.setdefault(id(binding.node), []).append(binding)
                self._by_key.setdefault(binding_key(binding), []).append(binding)
                home = self.index.unit_of_scope.get(id(binding.value_scope))
                if home is not None:
                    self._by_unit.setdefault(id(home), []).append(binding)
        return self._bindings

    def runs_every_iteration(self, record: CallRecord, repetition: Repetition) -> bool:
        """Whether the `if`s between the loop and the call test the same thing each iteration:
        none reads what an iteration binds (the loop variable, a counter, the very variable
        the call fills: `if scaler is None:`), or asks whether something exists yet."""
        # The calls from the loop down to `record`, each with the unit it is written in.
        chain = list(repetition.via[1:]) + [record]
        first = repetition.via[0] if repetition.via else record
        varying = self._bound_in_loop(repetition)
        if self._guards_vary(first, varying, after=repetition.loop):
            return False
        caller = first
        for current in chain if repetition.via else []:
            varying = self._varying_in_callee(caller, varying)
            if varying is None or self._guards_vary(current, varying):
                return False
            caller = current
        return True

    def _bound_in_loop(self, repetition: Repetition) -> Set[str]:
        self.all_bindings()
        names = {binding.name for binding in self._by_node.get(id(repetition.loop), ())}
        for node in self.body(repetition.loop):
            names.update(binding.name for binding in self._by_node.get(node, ()))
        return names

    def _varying_in_callee(self, call: CallRecord, varying: Set[str]) -> Optional[Set[str]]:
        """What may differ between calls inside the callee of `call`: everything it binds, and
        the parameters that receive something the caller's iteration changes."""
        item = self.classify(call)
        if not isinstance(item, HelperCall) or item.callee is None:
            return None
        callee = item.callee
        self.all_bindings()
        names = {binding.name for binding in self._by_unit.get(id(callee), ()) if binding.kind != "param"}
        for parameter in callee.parameters:
            argument = item.argument_for(parameter)
            if argument is not None and set(roots(names_read(argument))) & _roots(varying):
                names.add(parameter)
        return names

    def _guards_vary(self, record: CallRecord, varying: Set[str], after: Optional[Loop] = None) -> bool:
        frames = record.frames
        if after is not None:
            positions = [i for i, frame in enumerate(frames) if isinstance(frame, LoopFrame) and frame.node is after]
            frames = frames[positions[-1] + 1 :] if positions else frames
        # A test whose outcome the file fixes (`(step + 1) % self.accum == 0` with `accum` 1) is
        # the same every iteration.
        tests = [frame.test for frame in frames if isinstance(frame, GuardFrame) and self.model.branches.truth(frame.test, record.unit) is None]
        return any(self._test_varies(test, varying) for test in tests)

    @staticmethod
    def _test_varies(test: cst.BaseExpression, varying: Set[str]) -> bool:
        for node in iter_tree(test):
            if isinstance(node, cst.Call) and dotted_name(node.func) in _EXISTENCE_CHECKS:
                return True
        return bool(set(roots(names_read(test))) & _roots(varying))

    # ------------------------------------------------------------------ queries
    def iterations_of(self, record: CallRecord) -> List[Repetition]:
        """The loops that run the call `record` in every iteration: the innermost loop around
        it, or a loop of a caller around a call of its function; not when an `if` between them
        tests something the iteration changes (`if scaler is None:`)."""
        return [r for r in self.around(record) if self.runs_every_iteration(record, r)]

    def scaler_steps_within(self, scaler: str, record: CallRecord, repetition: Repetition) -> List[Occurrence]:
        """The `scaler.step(optimizer)` calls of the scaler `scaler` (a key) that run in the same
        iteration of `repetition` as the call `record`: in the loop's body, or anywhere in
        the function the iteration calls to reach `record`."""
        if repetition.via:
            candidates = list(self.model.occurrences_in(record.unit))
        else:
            candidates = [
                o for o in self.model.occurrences_in(repetition.unit) if self.inside(o.call_site, repetition.loop)
            ]
        return [
            o
            for o in candidates
            if o.kind is EventKind.SCALER_STEP and o.receiver is not None and o.receiver.key == scaler
        ]

    def outlives(self, ref: Optional[Ref], unit: CodeUnit, repetition: Repetition) -> bool:
        """Whether the object `ref` (as `unit` names it) lives across iterations of
        `repetition`: nothing in an iteration binds it anew, followed through the parameters
        of the functions along `via`. Unknown objects are not said to."""
        if ref is None or ref.key.startswith(("unknown:", "param:")):
            return False
        name = ref.text if not ref.key.startswith("expr:") else _leading_name(ref.text)
        if name is None:
            return False
        scope = unit.scope
        calls = list(repetition.via)
        while True:
            # `self.optimizer.optimizer` is new when `self.optimizer` is.
            parts = name.split(".")
            keys = {self.model.resolver.identity(".".join(parts[:n]), scope) for n in range(1, len(parts) + 1) if parts[:n] != ["self"]}
            self.all_bindings()
            bindings = [b for key in keys for b in self._by_key.get(key, ())]
            if any(self.binds_each_iteration(b, repetition) for b in bindings):
                return False
            parameter = "." not in name and name in scope.params
            if not parameter or not calls:
                return True
            call = calls.pop()
            item = self.classify(call)
            argument = item.argument_for(name) if isinstance(item, HelperCall) else None
            name = dotted_name(argument) if argument is not None else None
            if name is None:
                return argument is None  # a default value lives as long as the function
            scope = call.unit.scope

    def foreign_guards(self, occurrence: Occurrence, loop: Loop) -> Optional[List[Tuple[str, bool, bool]]]:
        """For an event of another linted module's function called in `loop` (its summary's
        ways through it): the conditions every way that runs the event assumed, in the
        caller's terms, each as (text, outcome, whether an iteration of `loop` changes it:
        the argument passed for a parameter it reads is bound in the loop). timm's
        `loss_scaler(..., need_update=(i + 1) % accum == 0)` updates only on ways that
        assumed `need_update`. None when the event is not one or its ways are unknown."""
        if len(occurrence.via) != 1 or occurrence.event.foreign is None:
            return None
        record = self.record(occurrence.via[0])
        item = self.classify(record) if record is not None else None
        if not isinstance(item, HelperCall) or item.foreign is None or item.foreign.sequences is None:
            return None
        common: Optional[Set[Tuple[object, bool]]] = None
        for facts, events in item.foreign.sequences:
            if any(e.kind is occurrence.kind and f"{e.text} in {e.origin}" == occurrence.event.foreign for e in events):
                common = set(facts) if common is None else common & set(facts)
        if common is None:
            return None
        varying = _roots(self._bound_in_loop(Repetition(loop, record.unit)))  # type: ignore[union-attr]
        found = []
        for condition, outcome in sorted(common, key=lambda fact: (fact[0].text, fact[1])):  # type: ignore[attr-defined]
            # `self.calls % self.accum == 0`: every Nth call, a counter the function keeps.
            text, changes = condition.text, "%" in condition.text  # type: ignore[attr-defined]
            for name in condition.names:  # type: ignore[attr-defined]
                argument = item.argument_for(name.split(".")[0])
                if argument is None:
                    continue  # the other module's own name, or a default: the same each call
                changes = changes or bool(set(roots(names_read(argument))) & varying)
                if name == text:
                    text = source_text(argument)
            found.append((text, outcome, changes))
        return found


def loop_targets(loop: Loop) -> Set[str]:
    """The names a `for` loop binds each iteration (`opt`, `i` in `for i, opt in
    enumerate(optimizers)`); none for a `while`."""
    if not isinstance(loop, cst.For):
        return set()
    return set(roots(names_bound(loop.target)))


def drawn_by(ref: Optional[Ref], loop: Loop) -> bool:
    """Whether the object `ref` names is the one `loop` draws this iteration: its target
    (`opt` in `for opt in optimizers:`), or an element picked by it (`optimizers[i]`,
    `self.opts[name]`)."""
    if ref is None:
        return False
    targets = loop_targets(loop)
    text = ref.text
    if text in targets:
        return True
    head, bracket, index = text.partition("[")
    return bool(bracket) and index.rstrip("]").strip() in targets


def runs_once(loop: Loop) -> bool:
    """A `for` over a display of one element (`for opt in [optimizer]:`)."""
    return isinstance(loop, cst.For) and isinstance(loop.iter, (cst.List, cst.Tuple)) and len(loop.iter.elements) == 1


def _roots(names: Set[str]) -> Set[str]:
    return set(roots(names)) | set(names)


def _leading_name(text: str) -> Optional[str]:
    """`optimizers` in `optimizers[0]`, `self.opts` in `self.opts["g"]`."""
    import re

    found = re.match(r"[A-Za-z_][\w.]*", text)
    return found.group(0).rstrip(".") if found else None
