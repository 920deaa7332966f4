"""The abstract interpreter: one unit's statements run over a set of states.

A state holds the branch conditions assumed so far (only those that matter again later: a
flag tested twice, a scaler's `is None`/`enabled` condition), which variables hold a
`scaler.scale(...)`-ed tensor, and the state of the gradients (`GradientState`); or, while a
helper is summarised, the events so far (`PathState`). States that agree on everything merge,
so the cost grows with what differs, not with the number of paths. `for` loops run at least
once, `while` loops possibly never; `break`, `continue`, `return` and `raise` divert; `try`
handlers start from before or after the body.

The interpreter asks the flow analysis only what `FlowQueries` lists.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import fields, replace
from operator import attrgetter
from typing import Dict, FrozenSet, Iterable, List, Optional, Protocol, Set, Tuple, Union

import libcst as cst

from amplint import work
from amplint.semantic.calls import Classifier, HelperCall
from amplint.semantic.conditions import Assumption, Branches
from amplint.semantic.index import CallRecord, CodeUnit, GuardFrame, LoopFrame, ModuleIndex
from amplint.semantic.types import (
    UNKNOWN_SCALER,
    AmpEvent,
    AutocastRegion,
    EventKind,
    FlowState,
    GradientState,
    Occurrence,
    Ref,
)
from amplint.semantic.names import names_bound, names_read, roots
from amplint.semantic.regions import CallContext, Regions
from amplint.semantic.scalers import ScalerFacts
from amplint.semantic.summaries import MAX_EVENTS, MAX_STATES, MAX_WORK, ArgumentMapper, PathState, Paths, State, Summary, SummaryEvent, Symbols, TooComplex, nested_event, own_event, rewrite, scaler_of


class FlowQueries(Protocol):
    """What the interpreter asks of the flow analysis (`amplint.semantic.flow.FlowAnalysis`)."""

    index: ModuleIndex
    classifier: Classifier
    regions: Regions
    scaler_facts: ScalerFacts
    branches: Branches

    def augmented(self, node: cst.AugAssign) -> cst.Tuple: ...

    def is_live(self, scaler: Optional[str], facts: FrozenSet[Assumption] = frozenset()) -> bool: ...

    def scaling_and_reads(self, value: Optional[cst.CSTNode], unit: CodeUnit) -> Tuple[Optional[str], FrozenSet[str]]: ...

    def summary_for(self, call: HelperCall, depth: int = 0) -> Summary: ...

    def items_of(self, unit: CodeUnit) -> Tuple[Tuple[CallRecord, Union[AmpEvent, HelperCall]], ...]: ...

    def evaluation(self, owner: cst.CSTNode, unit: CodeUnit): ...

    def call_arguments(self, call: HelperCall) -> Dict[str, Optional[str]]: ...

    def facts_at(self, call: HelperCall, facts: FrozenSet[Assumption]) -> Optional[FrozenSet[Assumption]]: ...

    def own_occurrence(self, event: AmpEvent, unit: CodeUnit, context: CallContext) -> Occurrence: ...

    def occurrence(
        self,
        *,
        event: AmpEvent,
        unit: CodeUnit,
        via: Tuple[cst.Call, ...],
        region: Optional[AutocastRegion],
        loop_inside_region: bool,
        under_no_grad: bool,
        receiver: Optional[Ref],
        argument: Optional[Ref],
    ) -> Occurrence: ...


# --------------------------------------------------------------------------- the interpreter


class Interpreter:
    """Runs one unit's statements over a set of states.

    With `summary_depth` set it collects the ways through the unit as event sequences (a
    helper's summary); otherwise it tracks gradient states and records, for each occurrence,
    the states just before it."""

    def __init__(self, analysis: FlowQueries, unit: CodeUnit, summary_depth: Optional[int]) -> None:
        self.analysis = analysis
        self.unit = unit
        self.summary_depth = summary_depth
        self.symbols = Symbols(unit)
        self.before: Dict[Occurrence, Set[FlowState]] = {}
        self._expansions: Dict[int, list] = {}
        self.work = 0
        # The limits of amplint.work, times the run's --analysis-limit; the file's meter.
        self.max_work, self.max_states = int(MAX_WORK * work.factor()), int(MAX_STATES * work.factor())
        self.meter = work.current()
        self.relevant = self._relevant_conditions()
        self.tracked = self._tracked_names()
        self._condition_names: Optional[FrozenSet[str]] = None
        # (id(test), outcome) -> the ways a branch is taken, as far as they matter here.
        self._cases: Dict[Tuple[int, bool], Set[FrozenSet[Assumption]]] = {}

    @property
    def summarising(self) -> bool:
        return self.summary_depth is not None

    def run(self, states: Set[State]) -> Paths:
        return self.block(self.unit.body, states)

    # blocks
    def block(self, statements: Iterable[cst.CSTNode], states: Set[State]) -> Paths:
        flow = Paths(set(states))
        for statement in statements:
            if not flow.normal:
                break
            flow = flow.then(self.statement(statement, flow.normal))
            flow.normal = join(flow.normal)
            if len(flow.normal) > self.max_states:
                raise TooComplex
        return flow

    def suite(self, suite: cst.BaseSuite, states: Set[State]) -> Paths:
        return self.block(suite.body, states)

    # statements
    def statement(self, node: cst.CSTNode, states: Set[State]) -> Paths:
        self.work += len(states)
        if self.meter is not None:
            self.meter.charge(work.FLOW_STEP * len(states))
        if self.work > self.max_work:
            raise TooComplex
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            flow = Paths(set(states))
            for small in node.body:
                if not flow.normal:
                    break
                flow = flow.then(self.small_statement(small, flow.normal))
            return flow
        if isinstance(node, cst.If):
            return self.if_statement(node, states)
        if isinstance(node, (cst.For, cst.While)):
            return self.loop(node, states)
        if isinstance(node, cst.With):
            states = self.evaluate(node, states)
            for item in node.items:
                if item.asname is not None:
                    states = self.bind(names_bound(item.asname.name), item.item, states)
            return self.suite(node.body, states)
        if isinstance(node, (cst.Try, cst.TryStar)):
            return self.try_statement(node, states)
        if isinstance(node, cst.Match):
            states = self.evaluate(node, states)
            flow = Paths(set(states))  # no case may match
            for case in node.cases:
                flow = flow.merge(self.suite(case.body, states))
            return flow
        # def / class: their bodies do not run here; decorators and defaults may.
        return Paths(self.evaluate(node, states))

    def small_statement(self, node: cst.BaseSmallStatement, states: Set[State]) -> Paths:
        if isinstance(node, cst.Return):
            return Paths(set(), returns=self.evaluate(node, states))
        if isinstance(node, cst.Raise):
            return Paths(set(), raises=self.evaluate(node, states))
        if isinstance(node, cst.Break):
            return Paths(set(), breaks=set(states))
        if isinstance(node, cst.Continue):
            return Paths(set(), continues=set(states))
        states = self.evaluate(node, states)
        if isinstance(node, cst.Assign):
            targets = [name for t in node.targets for name in names_bound(t.target)]
            return Paths(self.bind(targets, node.value, states))
        if isinstance(node, cst.AnnAssign) and node.value is not None:
            return Paths(self.bind(names_bound(node.target), node.value, states))
        if isinstance(node, cst.AugAssign):
            # `loss /= accum` keeps a scaled loss scaled: bind it to `loss <op> value`.
            return Paths(self.bind(names_bound(node.target), self.analysis.augmented(node), states))
        return Paths(states)

    def if_statement(self, node: cst.If, states: Set[State]) -> Paths:
        states = self.evaluate(node, states)
        taken = self.suite(node.body, self.assume(node.test, True, states))
        skipped_states = self.assume(node.test, False, states)
        if node.orelse is None:
            skipped = Paths(skipped_states)
        elif isinstance(node.orelse, cst.If):
            skipped = self.if_statement(node.orelse, skipped_states)
        else:
            skipped = self.suite(node.orelse.body, skipped_states)
        return taken.merge(skipped)

    def loop(self, node: Union[cst.For, cst.While], states: Set[State]) -> Paths:
        states = self.evaluate(node, states)
        runs_forever = isinstance(node, cst.While) and isinstance(node.test, cst.Name) and node.test.value == "True"
        # A `for` over optimizers, batches or micro-steps is taken to run at least once: a
        # path that skips `for opt in optimizers: scaler.unscale_(opt)` is not a real one.
        runs_once = isinstance(node, cst.For)
        finished: Set[State] = set() if runs_forever or runs_once else set(states)
        broken: Set[State] = set()
        returns: Set[State] = set()
        raises: Set[State] = set()
        seen: Set[State] = set()
        current = states
        # A summary's states remember their events, so they never repeat: two iterations
        # show any order that wraps around one. Gradient states do repeat: iterate to the
        # fixpoint.
        rounds = 2 if self.summarising else 12
        for _ in range(rounds):
            if isinstance(node, cst.For):
                # `for scaled in [scaler.scale(l) for l in losses]:` binds scaled tensors.
                current = self.bind(names_bound(node.target), node.iter, current)
            body = self.suite(node.body, current)
            after = join(body.normal | body.continues)
            if not runs_forever:
                finished |= after
            broken |= body.breaks
            returns |= body.returns
            raises |= body.raises
            current = after - seen
            seen |= after
            if not current:
                break
        after_loop = Paths(finished)
        if node.orelse is not None:
            after_loop = self.suite(node.orelse.body, finished)
        return Paths(
            after_loop.normal | broken,
            after_loop.breaks,
            after_loop.continues,
            returns | after_loop.returns,
            raises | after_loop.raises,
        )

    def try_statement(self, node: Union[cst.Try, cst.TryStar], states: Set[State]) -> Paths:
        body = self.suite(node.body, states)
        # An exception can leave the body anywhere; its start and its end bound what ran.
        flow = body
        if node.orelse is not None:
            flow = Paths(set(), body.breaks, body.continues, body.returns, body.raises).merge(
                self.suite(node.orelse.body, body.normal)
            )
        handler_start = states | body.normal | body.raises
        if node.handlers:
            flow = replace(flow, raises=set())
        for handler in node.handlers:
            flow = flow.merge(self.suite(handler.body, handler_start))
        if node.finalbody is not None:
            final = self.suite(node.finalbody.body, flow.normal)
            returned = self.suite(node.finalbody.body, flow.returns)
            raised = self.suite(node.finalbody.body, flow.raises)
            flow = Paths(
                final.normal,
                flow.breaks | final.breaks,
                flow.continues | final.continues,
                final.returns | returned.normal | returned.returns,
                final.raises | raised.normal | raised.raises,
            )
        return flow

    # expressions
    def evaluate(self, owner: cst.CSTNode, states: Set[State]) -> Set[State]:
        found = self.analysis.evaluation(owner, self.unit)
        if found is None:
            return states
        events, walruses = found
        for call, item in events:
            states = self.execute(call, item, states)
        # `if (scaled := scaler.scale(loss)) is not None:` binds as it evaluates.
        for walrus in walruses:
            states = self.bind(names_bound(walrus.target), walrus.value, states)
        return states

    def execute(self, record: Optional[CallRecord], item: Union[AmpEvent, HelperCall], states: Set[State]) -> Set[State]:
        context = self.analysis.regions.context(record) if record is not None else self._statement_context(item)
        if isinstance(item, HelperCall):
            return self.call_helper(item, context, states)
        if self.summarising:
            return {self._append(state, self.summary_event(item, context, state)) for state in states}  # type: ignore[arg-type]
        occurrence = self.analysis.own_occurrence(item, self.unit, context)
        result = set()
        for state in states:
            assert isinstance(state, FlowState)
            scaler = None
            if item.kind is EventKind.BACKWARD:
                scaler = item.scaled_inline_by or scaler_of(item.tensor_reads, state.scaled)
            result.add(self._apply(state, occurrence, scaler))
        return result

    def _statement_context(self, item) -> CallContext:
        """Where a gradient read runs: where the calls of its statement run, or nowhere special."""
        record = self.analysis.index.record(item.statement) if isinstance(item, AmpEvent) else None
        if record is not None and record.calls:
            return self.analysis.regions.context(record.calls[0])
        return CallContext(None, False, False)

    def call_helper(self, call: HelperCall, context: CallContext, states: Set[State]) -> Set[State]:
        depth = (self.summary_depth or 0) + 1
        summary = self.analysis.summary_for(call, depth)
        if not summary.sequences:
            return states
        if self.summarising:
            result: Set[State] = set()
            for state in states:
                assert isinstance(state, PathState)
                for sequence in summary.sequences:
                    merged = self._assume_facts(state, sequence.facts, call)
                    if merged is None:
                        continue
                    for inner in sequence.events:
                        nested = nested_event(inner, call, context, self.symbols, self.analysis.classifier, merged.scaled)
                        merged = self._append(merged, nested)
                    result.add(merged)
            return result
        result = set()
        for facts, steps in self._expansion(call, context, summary):
            for state in states:
                assert isinstance(state, FlowState)
                current = self._assume_facts(state, facts, call)
                if current is None:
                    continue
                for occurrence, scaler, reads in steps:
                    if reads is not None:  # a backward on what the caller passes: is it scaled here?
                        scaler = scaler or scaler_of(reads, current.scaled)
                    current = self._apply(current, occurrence, scaler)
                result.add(current)
        return result

    def _expansion(self, call: HelperCall, context: CallContext, summary: Summary):
        """Each way through the helper, as this call runs it: its conditions, and its events
        as occurrences here with what scales each backward (computed once per call)."""
        key = id(call.record.node)
        found = self._expansions.get(key)
        if found is not None:
            return found
        mapper = ArgumentMapper(call, self.analysis.classifier)
        found = []
        for sequence in summary.sequences or ():
            steps = []
            for inner in sequence.events:
                region, loop_inside = inner.region, inner.loop_inside_region
                if inner.inherits_region:
                    region, loop_inside = context.region, context.loop_inside_region
                occurrence = self.analysis.occurrence(
                    event=inner.event,
                    unit=self.unit,
                    via=(call.record.node,) + inner.via,
                    region=region,
                    loop_inside_region=loop_inside,
                    under_no_grad=inner.under_no_grad or context.under_no_grad,
                    receiver=mapper.ref(inner.receiver),
                    argument=mapper.ref(inner.argument),
                )
                scaler, reads = None, None
                if inner.event.kind is EventKind.BACKWARD:
                    if inner.tensor_param is not None:
                        argument = call.argument_for(inner.tensor_param)
                        if argument is None:
                            scaler = UNKNOWN_SCALER
                        else:
                            scaler, reads = self.analysis.scaling_and_reads(argument, self.unit)
                    elif inner.scaled is not None and inner.scaled.startswith("param:"):
                        mapped = mapper.ref(Ref(inner.scaled, inner.scaled))
                        scaler = mapped.key if mapped is not None else UNKNOWN_SCALER
                    else:
                        scaler = inner.scaled
                steps.append((occurrence, scaler, reads))
            found.append((sequence.facts, steps))
        self._expansions[key] = found
        return found

    # summaries: collecting events
    def summary_event(self, event: AmpEvent, context: CallContext, state: PathState) -> SummaryEvent:
        return own_event(event, context, self.symbols, state.scaled)

    def _append(self, state: PathState, event: SummaryEvent) -> PathState:
        if len(state.events) >= MAX_EVENTS:
            raise TooComplex
        return replace(state, events=state.events + (event,))

    # gradients
    def _apply(self, state: FlowState, occurrence: Occurrence, scaler: Optional[str]) -> FlowState:
        gradients = self._normalised(state.gradients, state.facts)
        self.before.setdefault(occurrence, set()).add(state if gradients is state.gradients else replace(state, gradients=gradients))
        kind = occurrence.kind
        if kind is EventKind.BACKWARD:
            if scaler is None:
                gradients = replace(
                    gradients,
                    plain_backwards=gradients.plain_backwards | {occurrence},
                    mixed=True,
                    last_backward=occurrence,
                    entry=False,
                    entry_uses=frozenset(),
                )
            elif scaler == UNKNOWN_SCALER or not self.analysis.is_live(scaler, state.facts):
                gradients = replace(gradients, last_backward=occurrence, entry=False, entry_uses=frozenset())
            else:
                gradients = self._scaled(gradients, occurrence, scaler)
        elif kind is EventKind.FRAMEWORK_BACKWARD:
            if occurrence.event.framework_scaler is not None:
                gradients = self._scaled(gradients, occurrence, occurrence.event.framework_scaler)
        elif kind is EventKind.UNSCALE:
            if gradients.scaled_by is not None or gradients.entry:
                optimizer = occurrence.argument.key if occurrence.argument is not None else "*"
                gradients = replace(gradients, unscaled=gradients.unscaled | {optimizer}, unscale=occurrence, entry_uses=frozenset())
        elif kind in (EventKind.CLIP, EventKind.GRADIENT_READ):
            if gradients.entry and gradients.scaled_by is None and not gradients.unscaled:
                gradients = replace(gradients, entry_uses=gradients.entry_uses | {occurrence})
        elif kind is EventKind.SCALER_STEP:
            optimizer = occurrence.argument.key if occurrence.argument is not None else "*"
            gradients = replace(
                gradients,
                plain_backwards=frozenset(),
                stepped=gradients.stepped | {optimizer},
                entry=False,
                entry_uses=frozenset(),
                scaled_since_step=False,
            )
        elif kind in (EventKind.OPTIMIZER_STEP, EventKind.ZERO_GRAD):
            gradients = GradientState()
        return state if gradients is state.gradients else replace(state, gradients=gradients)

    @staticmethod
    def _scaled(gradients: GradientState, occurrence: Occurrence, scaler: str) -> GradientState:
        return GradientState(
            scaled_by=occurrence,
            scaler=scaler,
            plain_backwards=gradients.plain_backwards,
            mixed=gradients.mixed,
            last_backward=occurrence,
            scaled_since_step=True,
        )

    def _normalised(self, gradients: GradientState, facts: FrozenSet[Assumption]) -> GradientState:
        """A later branch can reveal that the scaler was off all along (`if
        scaler.is_enabled():`, the `else` of `if scaler is not None:`): then the gradients
        it "scaled" never carried a factor."""
        if gradients.scaler is not None and not self.analysis.is_live(gradients.scaler, facts):
            return replace(gradients, scaled_by=None, scaler=None, unscaled=frozenset(), unscale=None, stepped=frozenset())
        return gradients

    # bindings and branches
    def bind(self, targets: List[str], value: Optional[cst.CSTNode], states: Set[State]) -> Set[State]:
        if not targets:
            return states
        targets = roots(targets)
        if not self._watches(targets):
            return states  # no variable anything here asks about: nothing to update
        inline, reads = self.analysis.scaling_and_reads(value, self.unit)
        watched = [target for target in targets if target in self.tracked]
        result: Set[State] = set()
        for state in states:
            scaled = {(name, s) for name, s in state.scaled if name not in targets}
            scaler = inline or scaler_of(reads, state.scaled)
            if scaler is not None:
                scaled |= {(target, scaler) for target in watched}
            facts = frozenset(
                (cond, outcome) for cond, outcome in state.facts if not any(cond.reads(t) for t in targets)
            )
            if scaled == state.scaled and facts == state.facts:
                result.add(state)  # nothing it holds changed (an equal state, not built again)
            else:
                result.add(replace(state, scaled=frozenset(scaled), facts=facts))
        return result

    def assume(self, test: cst.BaseExpression, outcome: bool, states: Set[State]) -> Set[State]:
        key = (id(test), outcome)
        cases = self._cases.get(key)
        if cases is None:  # the same for every state and every visit (a loop's rounds)
            cases = {
                frozenset(fact for fact in case if fact[0].text in self.relevant)
                for case in self.analysis.branches.alternatives(test, outcome, self.unit)
            }
            if frozenset() in cases:
                cases = {frozenset()}  # one way of taking the branch tells nothing worth keeping
            self._cases[key] = cases
        result = set()
        for state in states:
            for facts in cases:
                if not facts:
                    result.add(state)
                    continue
                if any((cond, not value) in state.facts for cond, value in facts):
                    continue  # this way contradicts what the path already assumed
                result.add(replace(state, facts=state.facts | facts))
        return result

    def _assume_facts(self, state, facts: FrozenSet[Assumption], call: HelperCall):
        """A helper's way through, taken from `state`: None when it contradicts it."""
        facts = self.analysis.facts_at(call, facts)
        if facts is None:
            return None  # the call's own arguments rule this way out
        if any((cond, not value) in state.facts for cond, value in facts):
            return None
        kept = frozenset(fact for fact in facts if fact[0].text in self.relevant)
        return replace(state, facts=state.facts | kept) if kept else state

    def _relevant_conditions(self) -> FrozenSet[str]:
        """Conditions worth remembering: those of branches holding AMP calls that are tested
        more than once (or once inside a loop, or also by a helper it calls), those deciding
        whether a scaler is live, and, for a summary, those a caller can share."""
        counts: Counter = Counter()
        exported: Set[str] = set()
        seen_tests: Set[int] = set()
        depth = (self.summary_depth or 0) + 1
        for record, item in self.analysis.items_of(self.unit):
            if isinstance(item, HelperCall) and (self._is_recursive(item) or not self.analysis.summary_for(item, depth).events):
                continue  # a helper with no AMP work guards nothing worth remembering
            in_loop = False
            for frame in record.frames:
                if isinstance(frame, LoopFrame):
                    in_loop = True
                elif isinstance(frame, GuardFrame) and id(frame.test) not in seen_tests:
                    seen_tests.add(id(frame.test))
                    conditions = {
                        c for outcome in (True, False) for case in self.analysis.branches.alternatives(frame.test, outcome, self.unit) for c, _ in case
                    }
                    for cond in conditions:
                        counts[cond.text] += 2 if in_loop else 1
                        if self.summarising and self.symbols.exportable(cond):
                            exported.add(cond.text)
            if isinstance(item, HelperCall):
                arguments = self.analysis.call_arguments(item)
                conditions = {c for seq in self.analysis.summary_for(item, depth).sequences or () for c, _ in seq.facts}
                for text in {mapped.text for mapped in (rewrite(c, arguments) for c in conditions) if mapped is not None}:
                    counts[text] += 2 if in_loop else 1
                    if self.summarising:
                        exported.add(text)
        relevant = {text for text, count in counts.items() if count > 1} | exported
        for scaler in self.analysis.scaler_facts.scalers.values():
            relevant.update(cond.text for cond, _ in scaler.live_requirements)
        return frozenset(relevant)

    def _watches(self, targets: List[str]) -> bool:
        """Whether binding `targets` can change a state: they are tracked for scaling, or a
        remembered condition reads them."""
        if self._condition_names is None:
            names = set()
            for text in self.relevant:
                names.update(re.findall(r"[A-Za-z_][\w.]*", text))
            self._condition_names = frozenset(roots(names))
        return any(t in self.tracked or t in self._condition_names or t.split(".")[0] in self._condition_names for t in targets)

    def _tracked_names(self) -> FrozenSet[str]:
        """Variables whose scaled-ness can matter: those a backward's tensor (or a helper
        call's argument) is computed from, directly or through assignments. Tracking every
        variable that touches a scaler would multiply states for nothing."""
        wanted: Set[str] = set()
        for _, item in self.analysis.items_of(self.unit):
            if isinstance(item, AmpEvent) and item.kind is EventKind.BACKWARD:
                wanted |= item.tensor_reads
            elif isinstance(item, HelperCall) and not self._is_recursive(item):
                depth = (self.summary_depth or 0) + 1
                for event in self.analysis.summary_for(item, depth).events:
                    argument = item.argument_for(event.tensor_param) if event.tensor_param else None
                    if argument is not None:
                        wanted.update(roots(names_read(argument)))
        changed = True
        while changed:
            changed = False
            for targets, reads in self.unit.assignments:
                if targets & wanted and not reads <= wanted:
                    wanted |= reads
                    changed = True
        return frozenset(wanted)

    def _is_recursive(self, call: HelperCall) -> bool:
        return call.callee is self.unit


# What gradient states must agree on to merge: every field but those `join` unites, read
# as a tuple (cheaper to build and hash than a state made for the purpose).
_join_core = attrgetter(*(f.name for f in fields(GradientState) if f.name not in ("plain_backwards", "entry_uses", "mixed")))


def join(states: Set[State]) -> Set[State]:
    """Merge gradient states that differ only in what may have happened on the way (which
    plain backwards or entry clips may reach here): their union is what rules ask about,
    and keeping every combination would multiply states branch after branch."""
    if len(states) < 2:
        return states
    groups: Dict[object, List[FlowState]] = {}
    others: Set[State] = set()
    for state in states:
        if not isinstance(state, FlowState):
            others.add(state)
            continue
        g = state.gradients
        core = _join_core(g)
        groups.setdefault((state.facts, state.scaled, core), []).append(state)
    for group in groups.values():
        if len(group) == 1:
            others.add(group[0])
            continue
        g = group[0].gradients
        merged = replace(
            g,
            plain_backwards=frozenset().union(*(s.gradients.plain_backwards for s in group)),
            entry_uses=frozenset().union(*(s.gradients.entry_uses for s in group)),
            mixed=any(s.gradients.mixed for s in group),
        )
        others.add(replace(group[0], gradients=merged))
    return others
