"""Enumerate the ways through a code unit, as the AMP calls executed along each.

An abstract interpreter over the unit's statements. A path ends where the unit ends, or
right after an optimizer step or `zero_grad()`, after which no earlier gradient matters.
Each path state carries the AMP calls so far, the branch conditions it assumed (only those
that matter again later: a flag tested twice, a scaler's `is None`/`enabled` condition),
and which names hold a `scaler.scale(...)`-ed tensor. A `for` runs one or two times and a
`while` zero, one or two, which is enough to see an order that wraps around an iteration;
`break`, `continue`, `return` and `raise` end or divert paths; `try` handlers start from
before or after the body. States that agree on everything are merged, so branches without
AMP calls cost nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

import libcst as cst

from amplint.conditions import Assumption, assumptions
from amplint.facts import AmpCall, CallKind, CodeUnit, ModuleFacts, Path, PathStep
from amplint.names import names_bound, names_read
from amplint.semantics import scaler_scaling

MAX_STATES = 1024
# Statements interpreted per unit. Loops nested ten deep run their innermost body 2**10
# times; past this budget the unit is skipped rather than stalling the run.
MAX_WORK = 20_000
_PATH_KINDS = frozenset(
    {
        CallKind.TENSOR_BACKWARD,
        CallKind.UNSCALE,
        CallKind.CLIP,
        CallKind.SCALER_STEP,
        CallKind.SCALER_UPDATE,
        CallKind.OPTIMIZER_STEP,
        CallKind.ZERO_GRAD,
        CallKind.HELPER_BACKWARD,
    }
)


_GRADIENTS_CONSUMED = frozenset({CallKind.SCALER_STEP, CallKind.OPTIMIZER_STEP, CallKind.ZERO_GRAD})


class _TooComplex(Exception):
    pass


@dataclass(frozen=True)
class _State:
    steps: Tuple[PathStep, ...] = ()
    facts: FrozenSet[Assumption] = frozenset()
    scaled: FrozenSet[Tuple[str, str]] = frozenset()  # (name, scaler): name holds a scaler.scale(...)-ed tensor


@dataclass
class _Flow:
    normal: Set[_State]
    breaks: Set[_State]
    continues: Set[_State]
    exits: Set[_State]  # return / raise

    @classmethod
    def of(cls, states: Iterable[_State]) -> "_Flow":
        return cls(set(states), set(), set(), set())


def enumerate_paths(unit: CodeUnit, module: ModuleFacts) -> Optional[List[Path]]:
    if not any(site.call.kind in _PATH_KINDS for site in unit.calls):
        return []
    body = unit.node.body
    statements = body.body if isinstance(body, cst.IndentedBlock) else body
    interpreter = _Interpreter(module, _relevant_conditions(statements, module))
    try:
        flow = interpreter.block(statements, {_State()})
    except _TooComplex:
        return None
    ends = {state.steps for state in flow.normal | flow.exits | flow.breaks | flow.continues}
    ends = {path for path in ends | interpreter.segments if path}
    order = {id(site.call): index for index, site in enumerate(unit.calls)}
    return sorted(ends, key=lambda path: (len(path), [order.get(id(step.call), -1) for step in path]))


class _Interpreter:
    def __init__(self, module: ModuleFacts, relevant: FrozenSet[str]) -> None:
        self.module = module
        self.relevant = relevant
        # Paths are cut after an optimizer step or zero_grad(): the gradients so far are
        # consumed or cleared, so no query looks across the cut; without it a script with
        # several training loops would have paths multiplying loop after loop.
        self.segments: Set[Tuple[PathStep, ...]] = set()
        self.work = 0

    # blocks
    def block(self, statements: Sequence[cst.CSTNode], states: Set[_State]) -> _Flow:
        flow = _Flow.of(states)
        for statement in statements:
            if not flow.normal:
                break
            step = self.statement(statement, flow.normal)
            flow = _Flow(step.normal, flow.breaks | step.breaks, flow.continues | step.continues, flow.exits | step.exits)
            if len(flow.normal) > MAX_STATES:
                raise _TooComplex
        return flow

    def suite(self, suite: cst.BaseSuite, states: Set[_State]) -> _Flow:
        if isinstance(suite, cst.IndentedBlock):
            return self.block(suite.body, states)
        return self.block([suite], states)  # `if x: a(); b()` on one line

    # statements
    def statement(self, node: cst.CSTNode, states: Set[_State]) -> _Flow:
        self.work += 1
        if self.work > MAX_WORK:
            raise _TooComplex
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            flow = _Flow.of(states)
            for small in node.body:
                if not flow.normal:
                    break
                step = self.small_statement(small, flow.normal)
                flow = _Flow(step.normal, flow.breaks | step.breaks, flow.continues | step.continues, flow.exits | step.exits)
            return flow
        if isinstance(node, cst.If):
            return self.if_statement(node, states)
        if isinstance(node, (cst.For, cst.While)):
            return self.loop(node, states)
        if isinstance(node, cst.With):
            for item in node.items:
                states = self.evaluate(item.item, states)
                if item.asname is not None:
                    states = self.bind(names_bound(item.asname.name), item.item, states)
            return self.suite(node.body, states)
        if isinstance(node, (cst.Try, cst.TryStar)):
            return self.try_statement(node, states)
        if isinstance(node, cst.Match):
            states = self.evaluate(node.subject, states)
            flow = _Flow.of(states)  # no case may match
            for case in node.cases:
                flow = _merge(flow, self.suite(case.body, states))
            return flow
        # def / class bodies do not run here; decorators and defaults are not AMP calls.
        return _Flow.of(states)

    def small_statement(self, node: cst.BaseSmallStatement, states: Set[_State]) -> _Flow:
        if isinstance(node, cst.Return):
            if node.value is not None:
                states = self.evaluate(node.value, states)
            return _Flow(set(), set(), set(), states)
        if isinstance(node, cst.Raise):
            return _Flow(set(), set(), set(), states)
        if isinstance(node, cst.Break):
            return _Flow(set(), states, set(), set())
        if isinstance(node, cst.Continue):
            return _Flow(set(), set(), states, set())
        if isinstance(node, cst.Assign):
            states = self.evaluate(node.value, states)
            targets = [name for t in node.targets for name in names_bound(t.target)]
            return _Flow.of(self.bind(targets, node.value, states))
        if isinstance(node, cst.AnnAssign):
            if node.value is None:
                return _Flow.of(states)
            states = self.evaluate(node.value, states)
            return _Flow.of(self.bind(names_bound(node.target), node.value, states))
        if isinstance(node, cst.AugAssign):
            # `loss /= accum` keeps a scaled loss scaled: bind it to `loss <op> value`.
            states = self.evaluate(node.value, states)
            return _Flow.of(self.bind(names_bound(node.target), cst.Tuple([cst.Element(node.target), cst.Element(node.value)]), states))
        return _Flow.of(self.evaluate(node, states))

    def if_statement(self, node: cst.If, states: Set[_State]) -> _Flow:
        states = self.evaluate(node.test, states)
        taken = self.suite(node.body, self.assume(node.test, True, states))
        skipped_states = self.assume(node.test, False, states)
        if node.orelse is None:
            skipped = _Flow.of(skipped_states)
        elif isinstance(node.orelse, cst.If):
            skipped = self.if_statement(node.orelse, skipped_states)
        else:
            skipped = self.suite(node.orelse.body, skipped_states)
        return _merge(taken, skipped)

    def loop(self, node: cst.CSTNode, states: Set[_State]) -> _Flow:
        header = node.iter if isinstance(node, cst.For) else node.test
        states = self.evaluate(header, states)
        runs_forever = isinstance(node, cst.While) and isinstance(node.test, cst.Name) and node.test.value == "True"
        # A `for` over optimizers, batches or micro-steps is taken to run at least once: a
        # path that skips `for opt in optimizers: scaler.unscale_(opt)` is not a real one.
        runs_once = isinstance(node, cst.For)
        finished: Set[_State] = set() if runs_forever or runs_once else set(states)
        broken: Set[_State] = set()
        exits: Set[_State] = set()
        current = states
        for _ in range(2):
            if isinstance(node, cst.For):
                # `for scaled in [scaler.scale(l) for l in losses]:` binds scaled tensors.
                current = self.bind(names_bound(node.target), node.iter, current)
            body = self.suite(node.body, current)
            current = body.normal | body.continues
            if not runs_forever:
                finished |= current
            broken |= body.breaks
            exits |= body.exits
            if not current:
                break
        after = _Flow.of(finished)
        if node.orelse is not None:
            after = self.suite(node.orelse.body, finished)
        return _Flow(after.normal | broken, after.breaks, after.continues, exits | after.exits)

    def try_statement(self, node: cst.CSTNode, states: Set[_State]) -> _Flow:
        body = self.block(node.body.body, states)
        # An exception can leave the body anywhere; its start and its end bound what ran.
        flow = body
        if node.orelse is not None:
            flow = _merge(_Flow(set(), body.breaks, body.continues, body.exits), self.suite(node.orelse.body, body.normal))
        handler_start = states | body.normal
        for handler in node.handlers:
            flow = _merge(flow, self.suite(handler.body, handler_start))
        if node.finalbody is not None:
            final = self.suite(node.finalbody.body, flow.normal)
            returned = self.suite(node.finalbody.body, flow.exits)
            flow = _Flow(final.normal, flow.breaks | final.breaks, flow.continues | final.continues, final.exits | returned.normal | returned.exits)
        return flow

    # expressions
    def evaluate(self, expression: cst.CSTNode, states: Set[_State]) -> Set[_State]:
        calls = [c for c in _calls_in_order(expression, self.module) if c.kind in _PATH_KINDS]
        if calls:
            states = {self.execute(calls, state) for state in states}
        # `if (scaled := scaler.scale(loss)) is not None:` binds as it evaluates.
        for walrus in _walruses(expression):
            states = self.bind(names_bound(walrus.target), walrus.value, states)
        return states

    def execute(self, calls: List[AmpCall], state: _State) -> _State:
        steps = list(state.steps)
        for call in calls:
            if call.kind is CallKind.TENSOR_BACKWARD:
                scaler = call.scaled_inline_by or _scaler_of(call.tensor_reads, state.scaled)
                steps.append(PathStep(call, scaler, self._live(scaler, state)))
            elif call.receiver in self.module.scalers:
                steps.append(PathStep(call, call.receiver, self._live(call.receiver, state)))
            elif call.kind in (CallKind.CLIP, CallKind.OPTIMIZER_STEP):
                live = frozenset(name for name in self.module.scalers if self._live(name, state))
                steps.append(PathStep(call, live_scalers=live))
            else:
                steps.append(PathStep(call))
            if call.kind in _GRADIENTS_CONSUMED:
                self.segments.add(tuple(steps))
                steps = []
        return replace(state, steps=tuple(steps))

    def _live(self, scaler: Optional[str], state: _State) -> bool:
        ref = self.module.scalers.get(scaler) if scaler is not None else None
        return ref is not None and ref.live_under(state.facts)

    def bind(self, targets: Sequence[str], value: Optional[cst.CSTNode], states: Set[_State]) -> Set[_State]:
        if not targets:
            return states
        inline = scaler_scaling(value, self.module.scalers) if value is not None else None
        reads = frozenset(names_read(value)) if value is not None else frozenset()
        result = set()
        for state in states:
            scaled = {(name, s) for name, s in state.scaled if name not in targets}
            scaler = inline or _scaler_of(reads, state.scaled)
            if scaler is not None:
                scaled |= {(target, scaler) for target in targets}
            facts = frozenset(
                (cond, outcome) for cond, outcome in state.facts if not any(cond.reads(t) for t in targets)
            )
            result.add(replace(state, scaled=frozenset(scaled), facts=facts))
        return result

    def assume(self, test: cst.BaseExpression, outcome: bool, states: Set[_State]) -> Set[_State]:
        facts = [fact for fact in assumptions(test, outcome) if fact[0].text in self.relevant]
        if not facts:
            return states
        result = set()
        for state in states:
            if any((cond, not value) in state.facts for cond, value in facts):
                continue  # this branch contradicts what the path already assumed
            result.add(replace(state, facts=state.facts | frozenset(facts)))
        return result


def _merge(a: _Flow, b: _Flow) -> _Flow:
    return _Flow(a.normal | b.normal, a.breaks | b.breaks, a.continues | b.continues, a.exits | b.exits)


def _calls_in_order(expression: cst.CSTNode, module: ModuleFacts) -> List[AmpCall]:
    """The AMP calls in an expression in evaluation order: arguments before the call."""
    found: List[AmpCall] = []

    class _Collector(cst.CSTVisitor):
        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def leave_Call(self, original_node: cst.Call) -> None:
            call = module.amp_call(original_node)
            if call is not None:
                found.append(call)

    expression.visit(_Collector())
    return found


def _walruses(expression: cst.CSTNode) -> List[cst.NamedExpr]:
    found: List[cst.NamedExpr] = []

    class _Walruses(cst.CSTVisitor):
        def visit_Lambda(self, node: cst.Lambda) -> bool:
            return False

        def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
            found.append(node)

    expression.visit(_Walruses())
    return found


def _scaler_of(reads: FrozenSet[str], scaled: FrozenSet[Tuple[str, str]]) -> Optional[str]:
    return next((scaler for name, scaler in sorted(scaled) if name in reads), None)


def _relevant_conditions(statements: Sequence[cst.CSTNode], module: ModuleFacts) -> FrozenSet[str]:
    """Conditions worth remembering: those of branches holding AMP calls that are tested more
    than once (or once inside a loop), and those deciding whether a scaler is live."""
    counts: Counter = Counter()

    class _Tests(cst.CSTVisitor):
        loops = 0

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            return False

        def visit_For(self, node: cst.For) -> None:
            self.loops += 1

        def leave_For(self, original_node: cst.For) -> None:
            self.loops -= 1

        def visit_While(self, node: cst.While) -> None:
            self.loops += 1

        def leave_While(self, original_node: cst.While) -> None:
            self.loops -= 1

        def visit_If(self, node: cst.If) -> None:
            # Only branches that hold AMP calls can contradict each other; remembering the
            # tests of other branches would only multiply the states.
            if not any(call.kind in _PATH_KINDS for call in _calls_in_order(node, module)):
                return
            texts = {c.text for outcome in (True, False) for c, _ in assumptions(node.test, outcome)}
            # A test inside a loop runs again on the next iteration.
            for _ in range(2 if self.loops else 1):
                counts.update(texts)

    for statement in statements:
        statement.visit(_Tests())
    relevant = {text for text, count in counts.items() if count > 1}
    for scaler in module.scalers.values():
        relevant.update(cond.text for cond, _ in scaler.live_requirements)
    return frozenset(relevant)

