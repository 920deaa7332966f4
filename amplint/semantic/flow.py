"""The order of AMP events through each code unit, and what the gradients hold at each.

An abstract interpreter walks a unit's statements with a set of states. A state holds the
branch conditions assumed so far (only those that matter again later: a flag tested twice, a
scaler's `is None`/`enabled` condition), which variables hold a `scaler.scale(...)`-ed
tensor, and the state of the gradients (`GradientState`). States that agree on everything
merge, so the cost grows with what differs, not with the number of paths. `for` loops run at
least once, `while` loops possibly never; `break`, `continue`, `return` and `raise` divert;
`try` handlers start from before or after the body.

A call to a helper of the file stands for its AMP work at any depth: each function has a
`Summary` — every way through it as a sequence of events, with the conditions it tested on
variables the caller shares (`self.use_amp`), its parameters left symbolic (`param:scaler`)
and mapped to the caller's arguments at each call. The same interpreter computes summaries
(collecting event sequences) and analyses units (tracking gradient states), so both agree on
what a piece of code does.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple, TypeVar, Union

import libcst as cst

from amplint import work
from amplint.semantic.calls import Classifier, HelperCall
from amplint.semantic.conditions import IDENTIFIER, Assumption, Branches, Condition
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
from amplint.semantic.names import dotted_name, names_bound, names_read, roots
from amplint.semantic.regions import CallContext, Regions
from amplint.semantic.scalers import ScalerFacts


# Statement evaluations (times the states they run with) per unit or summary; past this the
# unit is skipped and counted, never guessed.
MAX_WORK = 40_000
MAX_STATES = 512  # states at one point of a unit
MAX_SEQUENCES = 64  # ways through a helper worth remembering
MAX_EVENTS = 48  # events in one way through a helper
MAX_DEPTH = 8  # helpers calling helpers
_T = TypeVar("_T")


class TooComplex(Exception):
    pass


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True, eq=False)
class SummaryEvent:
    """One event of a helper, as its callers see it."""

    event: AmpEvent
    via: Tuple[cst.Call, ...]  # helper calls inside the helper, down to the event
    receiver: Optional[Ref]  # keys of the helper's parameters read `param:NAME`
    argument: Optional[Ref]
    # Backward: who scaled its tensor (a key, `param:NAME`, UNKNOWN_SCALER, or None: no
    # one), unless it is a parameter's value, which the caller's argument decides.
    scaled: Optional[str] = None
    tensor_param: Optional[str] = None
    region: Optional[AutocastRegion] = None  # an enabled autocast inside the helper
    autocast_off: bool = False  # a disabled autocast inside the helper
    loop_inside_region: bool = False
    under_no_grad: bool = False
    in_foreign_region: bool = False  # an enabled autocast inside a helper of another module

    @property
    def own_region(self) -> bool:
        """The helper enters autocast itself: what happens there is the helper's business."""
        return self.region is not None or self.in_foreign_region

    @property
    def inherits_region(self) -> bool:
        """It runs under whatever region its caller is in."""
        return not self.own_region and not self.autocast_off


@dataclass(frozen=True)
class Sequence:
    facts: FrozenSet[Assumption]
    events: Tuple[SummaryEvent, ...]


@dataclass
class Summary:
    unit: CodeUnit
    # Every event the helper may run, in no particular order, through helpers of its own.
    events: Tuple[SummaryEvent, ...]
    # Every way through it; None when there are too many to follow.
    sequences: Optional[FrozenSet[Sequence]] = None


# --------------------------------------------------------------------------- states


@dataclass(frozen=True)
class _PathState:
    """A state of a summary's interpretation: the events so far."""

    facts: FrozenSet[Assumption] = frozenset()
    scaled: FrozenSet[Tuple[str, str]] = frozenset()
    events: Tuple[SummaryEvent, ...] = ()


State = Union[FlowState, _PathState]


@dataclass
class _Flow:
    normal: Set[State]
    breaks: Set[State] = field(default_factory=set)
    continues: Set[State] = field(default_factory=set)
    returns: Set[State] = field(default_factory=set)
    raises: Set[State] = field(default_factory=set)

    def then(self, step: "_Flow") -> "_Flow":
        return _Flow(
            step.normal,
            self.breaks | step.breaks,
            self.continues | step.continues,
            self.returns | step.returns,
            self.raises | step.raises,
        )

    def merge(self, other: "_Flow") -> "_Flow":
        return _Flow(
            self.normal | other.normal,
            self.breaks | other.breaks,
            self.continues | other.continues,
            self.returns | other.returns,
            self.raises | other.raises,
        )


@dataclass
class UnitFlow:
    """What the analysis of one unit found: the states just before each occurrence, and
    the states it can end in (returning, or running off its end)."""

    unit: CodeUnit
    before: Dict[Occurrence, Set[FlowState]]
    exits: Set[FlowState] = field(default_factory=set)


# --------------------------------------------------------------------------- the analysis


class FlowAnalysis:
    """Summaries and unit flows for one module, computed on demand and kept."""

    def __init__(self, index: ModuleIndex, classifier: Classifier, regions: Regions, scaler_facts: ScalerFacts, branches: Branches) -> None:
        self.index = index
        self.classifier = classifier
        self.regions = regions
        self.scaler_facts = scaler_facts
        self.branches = branches
        self._scaling: Dict[int, Tuple[Optional[str], FrozenSet[str]]] = {}
        self._summaries: Dict[int, Summary] = {}
        self._in_progress: Set[int] = set()
        self._flows: Dict[int, Optional[UnitFlow]] = {}
        self._occurrences: Dict[tuple, Occurrence] = {}
        self.skipped: List[CodeUnit] = []
        self._called: Optional[Set[int]] = None
        self._foreign: Dict[int, Summary] = {}
        self._augmented: Dict[int, cst.Tuple] = {}
        # A helper call's arguments, and a way through its helper's conditions in the
        # caller's terms: the same for every state that reaches the call (computed once per
        # call, not once per state and way). Each keeps the objects its key is the id of.
        # (`_kept`: keyed by the ids of the objects asked about, kept with them.)
        self._arguments: Dict[Tuple[int, ...], tuple] = {}  # see `call_arguments`
        self._evaluations: Dict[Tuple[int, ...], tuple] = {}  # see `evaluation`
        self._items: Dict[Tuple[int, ...], tuple] = {}  # see `items_of`
        self._facts_at: Dict[Tuple[int, ...], tuple] = {}  # see `facts_at`

    # public
    def augmented(self, node: cst.AugAssign) -> cst.Tuple:
        """`loss /= accum` read as the value `(loss, accum)`: one node per statement, kept, so
        that what is cached by node (`scaling_and_reads`) is asked of a node that
        lives as long as the tree (a node built anew at each visit could share the id of one
        freed before it, and the answer would be another statement's)."""
        found = self._augmented.get(id(node))
        if found is None:
            found = self._augmented[id(node)] = cst.Tuple([cst.Element(node.target), cst.Element(node.value)])
        return found
    def is_live(self, scaler: Optional[str], facts: FrozenSet[Assumption] = frozenset()) -> bool:
        return self.scaler_facts.is_live(scaler, facts)

    def scaling_and_reads(self, value: Optional[cst.CSTNode], unit: CodeUnit) -> Tuple[Optional[str], FrozenSet[str]]:
        """Who scales `value` inline (see `Classifier.scaling_of`) and the variables it reads."""
        if value is None:
            return None, frozenset()
        key = id(value)
        if key not in self._scaling:
            self._scaling[key] = (self.classifier.scaling_of(value, unit), frozenset(roots(names_read(value))))
        return self._scaling[key]

    def gradient_reads(self, unit: CodeUnit) -> List[AmpEvent]:
        """`p.grad` reads in `unit` (as events), not those only compared with None."""
        found = []
        for statement, record in self.index.statement_records(unit):
            for read in record.grad_reads:
                event = self.classifier.gradient_read(read, statement, unit)
                if event is not None:
                    found.append(event)
        return found

    def unit_flow(self, unit: CodeUnit) -> Optional[UnitFlow]:
        key = id(unit)
        if key not in self._flows:
            self._flows[key] = self._analyse(unit)
        return self._flows[key]

    def summary(self, unit: CodeUnit, depth: int = 0) -> Summary:
        key = id(unit)
        if key in self._summaries:
            return self._summaries[key]
        if key in self._in_progress or depth > MAX_DEPTH:
            return Summary(unit, (), None)  # recursion: follow no further
        self._in_progress.add(key)
        try:
            summary = Summary(unit, self._all_events(unit, depth))
            if summary.events:
                summary.sequences = self._sequences(unit, depth)
        finally:
            self._in_progress.discard(key)
        self._summaries[key] = summary
        return summary

    def has_visible_callers(self, unit: CodeUnit) -> bool:
        if self._called is None:
            self._called = set()
            for record in self.index.calls:
                item = self.classifier.classify(record)
                if isinstance(item, HelperCall) and item.callee is not None:
                    self._called.add(id(item.callee))
        return id(unit) in self._called

    def summary_for(self, call: HelperCall, depth: int = 0) -> Summary:
        """The summary of what `call` calls: a function of this file, or of another module."""
        if call.callee is not None:
            return self.summary(call.callee, depth)
        key = id(call.record.node)
        if key not in self._foreign:
            self._foreign[key] = _foreign_summary(call)
        return self._foreign[key]

    def items_of(self, unit: CodeUnit) -> Tuple[Tuple[CallRecord, Union[AmpEvent, HelperCall]], ...]:
        """The calls `unit` makes itself that are AMP events or helper calls, each with what
        it is, in source order: asked by every interpretation of the unit (its flow, its
        summary, the conditions and variables worth tracking), listed once."""
        return _kept(self._items, (unit,), lambda: self._list_items(unit))

    def _list_items(self, unit: CodeUnit) -> Tuple[Tuple[CallRecord, Union[AmpEvent, HelperCall]], ...]:
        listed = []
        for record in unit.calls:
            item = self.classifier.classify(record) if record.immediate else None
            if item is not None:
                listed.append((record, item))
        return tuple(listed)

    def evaluation(self, owner: cst.CSTNode, unit: CodeUnit):
        """What evaluating the statement (or compound statement's header) `owner` of `unit`
        runs, in order: its calls that are AMP events or helper calls (each with its record;
        None for a gradient read), then its gradient reads, and the walruses it binds; None
        when it has none of them. Listed once, not at each visit with each set of states."""
        return _kept(self._evaluations, (owner, unit), lambda: self._evaluate(owner, unit))

    def _evaluate(self, owner: cst.CSTNode, unit: CodeUnit):
        record = self.index.record(owner)
        if record is None:
            return None
        events: List[Tuple[Optional[CallRecord], Union[AmpEvent, HelperCall]]] = []
        for call in record.calls:
            item = self.classifier.classify(call)
            if item is not None:
                events.append((call, item))
        for read in record.grad_reads:
            event = self.classifier.gradient_read(read, owner, unit)
            if event is not None:
                events.append((None, event))
        return (tuple(events), tuple(record.walruses)) if events or record.walruses else None

    def call_arguments(self, call: HelperCall) -> Dict[str, Optional[str]]:
        """`call_arguments(call)`, once per call."""
        return _kept(self._arguments, (call,), lambda: call_arguments(call))

    def facts_at(self, call: HelperCall, facts: FrozenSet[Assumption]) -> FrozenSet[Assumption]:
        """A way through the helper `call` calls, its conditions `facts` in the caller's
        terms (`rewrite`): those on a parameter that gets no plain variable left out."""
        if not facts:
            return facts

        def mapped() -> FrozenSet[Assumption]:
            arguments = self.call_arguments(call)
            rewritten = ((rewrite(cond, arguments), value) for cond, value in facts)
            return frozenset((cond, value) for cond, value in rewritten if cond is not None)

        return _kept(self._facts_at, (call, facts), mapped)

    def own_occurrence(self, event: AmpEvent, unit: CodeUnit, context: CallContext) -> Occurrence:
        """`event` as it runs where it is written, in `unit` (no helper call on the way)."""
        return self.occurrence(
            event=event,
            unit=unit,
            via=(),
            region=context.region,
            loop_inside_region=context.loop_inside_region,
            under_no_grad=context.under_no_grad,
            receiver=event.receiver,
            argument=event.argument,
        )

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
    ) -> Occurrence:
        """The one `Occurrence` with these fields (objects by identity, refs by value)."""
        key = (
            id(event),
            id(unit),
            tuple(map(id, via)),
            id(region) if region is not None else None,
            loop_inside_region,
            under_no_grad,
            receiver,
            argument,
        )
        found = self._occurrences.get(key)
        if found is None:
            found = self._occurrences[key] = Occurrence(
                event=event,
                unit=unit,
                via=via,
                region=region,
                loop_inside_region=loop_inside_region,
                under_no_grad=under_no_grad,
                receiver=receiver,
                argument=argument,
            )
        return found

    # every event of a helper, for questions about where it runs (AMP004/AMP006)
    def _all_events(self, unit: CodeUnit, depth: int) -> Tuple[SummaryEvent, ...]:
        found: List[SummaryEvent] = []
        to_symbol = _Symbols(unit)
        for record, item in self.items_of(unit):
            context = self.regions.context(record)
            if isinstance(item, AmpEvent):
                found.append(_own_event(item, context, to_symbol, frozenset()))
            elif isinstance(item, HelperCall):
                for inner in self.summary_for(item, depth + 1).events:
                    found.append(_nested(inner, item, context, to_symbol, self.classifier))
        for read in self.gradient_reads(unit):
            found.append(_own_event(read, CallContext(None, False, False), to_symbol, frozenset()))
        return tuple(found)

    def _sequences(self, unit: CodeUnit, depth: int) -> Optional[FrozenSet[Sequence]]:
        interpreter = _Interpreter(self, unit, summary_depth=depth)
        try:
            flow = interpreter.run({_PathState()})
        except TooComplex:
            return None
        ends = [s for s in flow.normal | flow.returns | flow.breaks | flow.continues if isinstance(s, _PathState)]
        exportable = interpreter.symbols.exportable
        sequences = frozenset(
            Sequence(frozenset(f for f in s.facts if exportable(f[0])), s.events) for s in ends
        )
        return sequences if len(sequences) <= MAX_SEQUENCES else None

    def _analyse(self, unit: CodeUnit) -> Optional[UnitFlow]:
        if not self.items_of(unit) and not self.gradient_reads(unit):
            # Nothing to follow: no event (a `p.grad` read is one, with no call around it).
            return UnitFlow(unit, {}, {FlowState()})
        interpreter = _Interpreter(self, unit, summary_depth=None)
        entry = GradientState(entry=not unit.is_module and not self.has_visible_callers(unit))
        try:
            flow = interpreter.run({FlowState(gradients=entry)})
        except TooComplex:
            self.skipped.append(unit)
            return None
        exits = {s for s in flow.normal | flow.returns if isinstance(s, FlowState)}
        return UnitFlow(unit, interpreter.before, exits)


# --------------------------------------------------------------------------- symbols


class _Symbols:
    """A helper's view of its own variables: parameters become `param:NAME`, so a caller can
    put its arguments in their place."""

    def __init__(self, unit: CodeUnit) -> None:
        self.unit = unit
        self.prefix = unit.scope.key + ":"
        self.params = set(unit.parameters)

    def key(self, key: Optional[str]) -> Optional[str]:
        if key is not None and key.startswith(self.prefix):
            name = key[len(self.prefix) :]
            if name in self.params:
                return "param:" + name
        return key

    def ref(self, ref: Optional[Ref]) -> Optional[Ref]:
        if ref is None:
            return None
        key = self.key(ref.key)
        return ref if key == ref.key else Ref(ref.text, key)  # type: ignore[arg-type]

    def exportable(self, condition: Condition) -> bool:
        """A condition a caller can share: on `self.` attributes, on module-level names, or
        on the helper's parameters (each caller puts its argument in their place, see
        `rewrite`); not on the helper's own locals."""
        local = self.unit.scope.bindings
        for name in condition.names:
            root = name.split(".")[0]
            if name.startswith("self.") or root in self.params:
                continue
            if root in local:
                return False
        return True


def rewrite(condition: Condition, arguments: Dict[str, Optional[str]]) -> Optional[Condition]:
    """`condition`, a helper's, in its caller's terms: each parameter it reads replaced by
    the variable the call passes (`scaler is not None` -> `self.scaler is not None`); None
    when a parameter it reads gets no plain variable."""
    names = []
    touched = False
    for name in condition.names:
        root, dot, rest = name.partition(".")
        if root in arguments:
            target = arguments[root]
            if target is None:
                return None
            names.append(target + dot + rest)
            touched = True
        else:
            names.append(name)
    if not touched:
        return condition
    text = IDENTIFIER.sub(lambda m: arguments.get(m.group(1)) or m.group(1), condition.text)
    return Condition(text, frozenset(names))


def call_arguments(call: HelperCall) -> Dict[str, Optional[str]]:
    """Each parameter of the callee (but `self`) -> the variable the call passes, if any."""
    found: Dict[str, Optional[str]] = {}
    for param in call.parameters:
        if param in ("self", "cls"):
            continue
        argument = call.argument_for(param)
        found[param] = dotted_name(argument) if argument is not None else None
    return found


def _summary_event(
    event: AmpEvent, via: Tuple[cst.Call, ...], receiver: Optional[Ref], argument: Optional[Ref], context: CallContext
) -> SummaryEvent:
    return SummaryEvent(
        event,
        via,
        receiver,
        argument,
        region=context.region,
        autocast_off=context.autocast_off,
        loop_inside_region=context.loop_inside_region,
        under_no_grad=context.under_no_grad,
    )


def _own_event(
    event: AmpEvent, context: CallContext, symbols: _Symbols, scaled_names: FrozenSet[Tuple[str, str]]
) -> SummaryEvent:
    """An event a helper runs itself, as its callers see it: a backward on a parameter's
    value is decided by what each caller passes."""
    found = _summary_event(event, (), symbols.ref(event.receiver), symbols.ref(event.argument), context)
    if event.kind is not EventKind.BACKWARD:
        return found
    scaled = event.scaled_inline_by or _scaler_of(event.tensor_reads, scaled_names)
    params = event.tensor_reads & symbols.params
    if scaled is None and params:
        return replace(found, tensor_param=sorted(params)[0])
    return replace(found, scaled=symbols.key(scaled))


def _nested(
    inner: SummaryEvent,
    call: HelperCall,
    context: CallContext,
    to_symbol: _Symbols,
    classifier: Classifier,
    scaled_names: FrozenSet[Tuple[str, str]] = frozenset(),
) -> SummaryEvent:
    """`inner`, an event of the helper `call` calls, as seen from the calling function (whose
    variables holding scaled tensors are `scaled_names`)."""
    mapper = ArgumentMapper(call, classifier)
    tensor_param = None
    scaled = inner.scaled
    if inner.tensor_param is not None:
        argument = call.argument_for(inner.tensor_param)
        if argument is None:
            scaled = UNKNOWN_SCALER
        else:
            reads = frozenset(roots(names_read(argument)))
            inline = classifier.scaling_of(argument, call.record.unit) or _scaler_of(reads, scaled_names)
            params = reads & to_symbol.params
            if inline is None and params:
                tensor_param = sorted(params)[0]
            else:
                scaled = to_symbol.key(inline)
    elif scaled is not None and scaled.startswith("param:"):
        mapped = mapper.ref(Ref(scaled, scaled))
        scaled = to_symbol.key(mapped.key) if mapped is not None else UNKNOWN_SCALER
    region, off = inner.region, inner.autocast_off
    loop_inside, no_grad = inner.loop_inside_region, inner.under_no_grad or context.under_no_grad
    if inner.inherits_region:
        region, off, loop_inside = context.region, context.autocast_off, context.loop_inside_region
    return SummaryEvent(
        inner.event,
        (call.record.node,) + inner.via,
        to_symbol.ref(mapper.ref(inner.receiver)),
        to_symbol.ref(mapper.ref(inner.argument)),
        scaled=scaled,
        tensor_param=tensor_param,
        region=region,
        autocast_off=off,
        loop_inside_region=loop_inside,
        under_no_grad=no_grad,
        in_foreign_region=inner.in_foreign_region,
    )


def _kept(cache: Dict[Tuple[int, ...], tuple], owners: Tuple[object, ...], compute: Callable[[], _T]) -> _T:
    """`compute()`, once for the objects `owners`: kept in `cache` under their ids, with the
    objects themselves, so that another object given a freed one's id is not served it."""
    key = tuple(map(id, owners))
    found = cache.get(key)
    if found is None or any(kept is not owner for kept, owner in zip(found[0], owners)):
        found = cache[key] = (owners, compute())
    return found[1]


class ArgumentMapper:
    """Puts a call's arguments in place of the callee's parameters."""

    def __init__(self, call: HelperCall, classifier: Classifier) -> None:
        self.call = call
        self.classifier = classifier

    def ref(self, ref: Optional[Ref]) -> Optional[Ref]:
        if ref is None or not ref.key.startswith("param:"):
            return ref
        name = ref.key[len("param:") :]
        argument = self.call.argument_for(name)
        if argument is None:
            return Ref(ref.text, "unknown:" + name)
        return self.classifier.ref(argument, self.call.record.unit.scope)


# --------------------------------------------------------------------------- the interpreter


class _Interpreter:
    """Runs one unit's statements over a set of states.

    With `summary_depth` set it collects the ways through the unit as event sequences (a
    helper's summary); otherwise it tracks gradient states and records, for each occurrence,
    the states just before it."""

    def __init__(self, analysis: FlowAnalysis, unit: CodeUnit, summary_depth: Optional[int]) -> None:
        self.analysis = analysis
        self.unit = unit
        self.summary_depth = summary_depth
        self.symbols = _Symbols(unit)
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

    def run(self, states: Set[State]) -> _Flow:
        return self.block(self.unit.body, states)

    # blocks
    def block(self, statements: Iterable[cst.CSTNode], states: Set[State]) -> _Flow:
        flow = _Flow(set(states))
        for statement in statements:
            if not flow.normal:
                break
            flow = flow.then(self.statement(statement, flow.normal))
            flow.normal = _join(flow.normal)
            if len(flow.normal) > self.max_states:
                raise TooComplex
        return flow

    def suite(self, suite: cst.BaseSuite, states: Set[State]) -> _Flow:
        return self.block(suite.body, states)

    # statements
    def statement(self, node: cst.CSTNode, states: Set[State]) -> _Flow:
        self.work += len(states)
        if self.meter is not None:
            self.meter.charge(work.FLOW_STEP * len(states))
        if self.work > self.max_work:
            raise TooComplex
        if isinstance(node, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            flow = _Flow(set(states))
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
            flow = _Flow(set(states))  # no case may match
            for case in node.cases:
                flow = flow.merge(self.suite(case.body, states))
            return flow
        # def / class: their bodies do not run here; decorators and defaults may.
        return _Flow(self.evaluate(node, states))

    def small_statement(self, node: cst.BaseSmallStatement, states: Set[State]) -> _Flow:
        if isinstance(node, cst.Return):
            return _Flow(set(), returns=self.evaluate(node, states))
        if isinstance(node, cst.Raise):
            return _Flow(set(), raises=self.evaluate(node, states))
        if isinstance(node, cst.Break):
            return _Flow(set(), breaks=set(states))
        if isinstance(node, cst.Continue):
            return _Flow(set(), continues=set(states))
        states = self.evaluate(node, states)
        if isinstance(node, cst.Assign):
            targets = [name for t in node.targets for name in names_bound(t.target)]
            return _Flow(self.bind(targets, node.value, states))
        if isinstance(node, cst.AnnAssign) and node.value is not None:
            return _Flow(self.bind(names_bound(node.target), node.value, states))
        if isinstance(node, cst.AugAssign):
            # `loss /= accum` keeps a scaled loss scaled: bind it to `loss <op> value`.
            return _Flow(self.bind(names_bound(node.target), self.analysis.augmented(node), states))
        return _Flow(states)

    def if_statement(self, node: cst.If, states: Set[State]) -> _Flow:
        states = self.evaluate(node, states)
        taken = self.suite(node.body, self.assume(node.test, True, states))
        skipped_states = self.assume(node.test, False, states)
        if node.orelse is None:
            skipped = _Flow(skipped_states)
        elif isinstance(node.orelse, cst.If):
            skipped = self.if_statement(node.orelse, skipped_states)
        else:
            skipped = self.suite(node.orelse.body, skipped_states)
        return taken.merge(skipped)

    def loop(self, node: Union[cst.For, cst.While], states: Set[State]) -> _Flow:
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
            after = _join(body.normal | body.continues)
            if not runs_forever:
                finished |= after
            broken |= body.breaks
            returns |= body.returns
            raises |= body.raises
            current = after - seen
            seen |= after
            if not current:
                break
        after_loop = _Flow(finished)
        if node.orelse is not None:
            after_loop = self.suite(node.orelse.body, finished)
        return _Flow(
            after_loop.normal | broken,
            after_loop.breaks,
            after_loop.continues,
            returns | after_loop.returns,
            raises | after_loop.raises,
        )

    def try_statement(self, node: Union[cst.Try, cst.TryStar], states: Set[State]) -> _Flow:
        body = self.suite(node.body, states)
        # An exception can leave the body anywhere; its start and its end bound what ran.
        flow = body
        if node.orelse is not None:
            flow = _Flow(set(), body.breaks, body.continues, body.returns, body.raises).merge(
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
            flow = _Flow(
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
            return {self._append(state, self._summary_event(item, context, state)) for state in states}  # type: ignore[arg-type]
        occurrence = self.analysis.own_occurrence(item, self.unit, context)
        result = set()
        for state in states:
            assert isinstance(state, FlowState)
            scaler = None
            if item.kind is EventKind.BACKWARD:
                scaler = item.scaled_inline_by or _scaler_of(item.tensor_reads, state.scaled)
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
                assert isinstance(state, _PathState)
                for sequence in summary.sequences:
                    merged = self._assume_facts(state, sequence.facts, call)
                    if merged is None:
                        continue
                    for inner in sequence.events:
                        nested = _nested(inner, call, context, self.symbols, self.analysis.classifier, merged.scaled)
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
                        scaler = scaler or _scaler_of(reads, current.scaled)
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
    def _summary_event(self, event: AmpEvent, context: CallContext, state: _PathState) -> SummaryEvent:
        return _own_event(event, context, self.symbols, state.scaled)

    def _append(self, state: _PathState, event: SummaryEvent) -> _PathState:
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
            scaler = inline or _scaler_of(reads, state.scaled)
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


# What gradient states must agree on to merge: every field but those `_join` unites, read
# as a tuple (cheaper to build and hash than a state made for the purpose).
_join_core = attrgetter(*(f.name for f in fields(GradientState) if f.name not in ("plain_backwards", "entry_uses", "mixed")))


def _join(states: Set[State]) -> Set[State]:
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


def _foreign_summary(call: HelperCall) -> Summary:
    """A function of another linted module, as its exported summary says, with its events
    reported at `call`."""
    function = call.foreign
    assert function is not None
    events: Dict[int, AmpEvent] = {}

    def convert(foreign) -> SummaryEvent:
        event = events.get(id(foreign))
        if event is None:
            event = events[id(foreign)] = AmpEvent(
                foreign.kind,
                call.record.node,
                call.record.unit,
                receiver=foreign.receiver,
                argument=foreign.argument,
                framework_scaler=foreign.framework_scaler,
                foreign=f"{foreign.text} in {foreign.origin}",
                reported_where_written=foreign.reported,
                gradient_use=foreign.use,
            )
        return SummaryEvent(
            event,
            (),
            foreign.receiver,
            foreign.argument,
            scaled=foreign.scaled,
            tensor_param=foreign.tensor_param,
            autocast_off=foreign.region == "off",
            in_foreign_region=foreign.region == "on",
        )

    summary = Summary(None, tuple(convert(e) for e in function.events))  # type: ignore[arg-type]
    if function.sequences is not None:
        summary.sequences = frozenset(
            Sequence(facts, tuple(convert(e) for e in events)) for facts, events in function.sequences
        )
    return summary


def _scaler_of(reads: FrozenSet[str], scaled: FrozenSet[Tuple[str, str]]) -> Optional[str]:
    return next((scaler for name, scaler in sorted(scaled) if name in reads), None)
