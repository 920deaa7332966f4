"""The order of AMP events through each code unit, and what the gradients hold at each:
`FlowAnalysis`, which the model builds once per file and keeps what it finds.

Each unit is run by the abstract interpreter (`amplint.semantic.interpreter`) over a set of
states: analysed, it gives the states just before each event and those it may exit with
(`UnitFlow`); summarised, every way through it as a sequence of events (`Summary`,
`amplint.semantic.summaries`). A call to a helper of the file stands for its AMP work at
any depth: its summary, with the conditions it tested on variables the caller shares
(`self.use_amp`), its parameters left symbolic (`param:scaler`) and mapped to the caller's
arguments at each call. The same interpreter computes summaries and analyses units, so both
agree on what a piece of code does.

The analysis is built from the parts it uses (the index, the call classifier, the autocast
regions, the scaler facts, the branch conditions), never from the model.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Set, Tuple, Union

import libcst as cst

from amplint.semantic.calls import Classifier, HelperCall
from amplint.semantic.conditions import Assumption, Branches
from amplint.semantic.index import CallRecord, CodeUnit, ModuleIndex
from amplint.semantic.types import (
    AmpEvent,
    AutocastRegion,
    FlowState,
    GradientState,
    Occurrence,
    Ref,
)
from amplint.semantic.names import names_read, roots
from amplint.semantic.regions import CallContext, Regions
from amplint.semantic.scalers import ScalerFacts
from amplint.semantic.interpreter import Interpreter
from amplint.semantic.summaries import MAX_DEPTH, MAX_SEQUENCES, PathState, Sequence, Summary, SummaryEvent, Symbols, TooComplex, UnitFlow, call_arguments, foreign_summary, kept, nested_event, own_event, rewrite


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
        # (`kept`: keyed by the ids of the objects asked about, kept with them.)
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
            self._foreign[key] = foreign_summary(call)
        return self._foreign[key]

    def items_of(self, unit: CodeUnit) -> Tuple[Tuple[CallRecord, Union[AmpEvent, HelperCall]], ...]:
        """The calls `unit` makes itself that are AMP events or helper calls, each with what
        it is, in source order: asked by every interpretation of the unit (its flow, its
        summary, the conditions and variables worth tracking), listed once."""
        return kept(self._items, (unit,), lambda: self._list_items(unit))

    def _list_items(self, unit: CodeUnit) -> Tuple[Tuple[CallRecord, Union[AmpEvent, HelperCall]], ...]:
        listed = []
        for record in unit.calls:
            # A call in a branch the file's values never take runs nothing (`if update:` with
            # `update=False` everywhere the file calls the function).
            item = self.classifier.classify(record) if record.immediate and not self.branches.never_runs(record) else None
            if item is not None:
                listed.append((record, item))
        return tuple(listed)

    def evaluation(self, owner: cst.CSTNode, unit: CodeUnit):
        """What evaluating the statement (or compound statement's header) `owner` of `unit`
        runs, in order: its calls that are AMP events or helper calls (each with its record;
        None for a gradient read), then its gradient reads, and the walruses it binds; None
        when it has none of them. Listed once, not at each visit with each set of states."""
        return kept(self._evaluations, (owner, unit), lambda: self._evaluate(owner, unit))

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
        return kept(self._arguments, (call,), lambda: call_arguments(call))

    def facts_at(self, call: HelperCall, facts: FrozenSet[Assumption]) -> Optional[FrozenSet[Assumption]]:
        """A way through the helper `call` calls, its conditions `facts` in the caller's
        terms (`rewrite`): those on a parameter that gets no plain variable left out. None
        when the call's own arguments rule the way out: a condition on a parameter it passes
        None (`clip_grad=None` for `if clip_grad is not None:`) or a true literal for."""
        if not facts:
            return facts

        def mapped() -> Optional[FrozenSet[Assumption]]:
            arguments = self.call_arguments(call)
            kept_facts = []
            for cond, value in facts:
                passed = call.argument_for(cond.text) if cond.text in arguments else None
                literal = _truth_of_literal(passed)
                if literal is not None:
                    if literal != value:
                        return None
                    continue
                rewritten = rewrite(cond, arguments)
                if rewritten is not None:
                    kept_facts.append((rewritten, value))
            return frozenset(kept_facts)

        return kept(self._facts_at, (call, facts), mapped)

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
        to_symbol = Symbols(unit)
        for record, item in self.items_of(unit):
            context = self.regions.context(record)
            if isinstance(item, AmpEvent):
                found.append(own_event(item, context, to_symbol, frozenset()))
            elif isinstance(item, HelperCall):
                for inner in self.summary_for(item, depth + 1).events:
                    found.append(nested_event(inner, item, context, to_symbol, self.classifier))
        for read in self.gradient_reads(unit):
            found.append(own_event(read, CallContext(None, False, False), to_symbol, frozenset()))
        return tuple(found)

    def _sequences(self, unit: CodeUnit, depth: int) -> Optional[FrozenSet[Sequence]]:
        interpreter = Interpreter(self, unit, summary_depth=depth)
        try:
            flow = interpreter.run({PathState()})
        except TooComplex:
            return None
        ends = [s for s in flow.normal | flow.returns | flow.breaks | flow.continues if isinstance(s, PathState)]
        exportable = interpreter.symbols.exportable
        sequences = frozenset(
            Sequence(frozenset(f for f in s.facts if exportable(f[0])), s.events) for s in ends
        )
        return sequences if len(sequences) <= MAX_SEQUENCES else None

    def _analyse(self, unit: CodeUnit) -> Optional[UnitFlow]:
        if not self.items_of(unit) and not self.gradient_reads(unit):
            # Nothing to follow: no event (a `p.grad` read is one, with no call around it).
            return UnitFlow(unit, {}, {FlowState()})
        interpreter = Interpreter(self, unit, summary_depth=None)
        entry = GradientState(entry=not unit.is_module and not self.has_visible_callers(unit))
        try:
            flow = interpreter.run({FlowState(gradients=entry)})
        except TooComplex:
            self.skipped.append(unit)
            return None
        exits = {s for s in flow.normal | flow.returns if isinstance(s, FlowState)}
        return UnitFlow(unit, interpreter.before, exits)


def _truth_of_literal(node: Optional[cst.BaseExpression]) -> Optional[bool]:
    """What a condition on a parameter learns from the literal a call passes for it: False for
    None, True for a true literal (`True`, `1.0`, `"mean"`). A false literal other than None
    (`False`, `0`) tells nothing here: the condition may be `x is None`, which it fails."""
    if isinstance(node, cst.Name) and node.value in ("None", "True"):
        return node.value == "True"
    if isinstance(node, (cst.Integer, cst.Float, cst.SimpleString)):
        value = node.evaluated_value
        return True if value else None
    return None
