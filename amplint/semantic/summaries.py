"""What a helper does, as its callers see it: every way through it as a sequence of events
(`Summary`), with its parameters left symbolic (`param:scaler`) and mapped to each caller's
arguments at the call (`ArgumentMapper`, `rewrite`), and the states the flow analysis keeps
(`PathState` while summarising, `FlowState` while analysing; `Paths` for where each goes).
A function of another linted module is summarised from what its module exported
(`foreign_summary`). The limits that keep a unit's analysis bounded are here too.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Dict, FrozenSet, Optional, Set, Tuple, TypeVar, Union

import libcst as cst

from amplint.semantic.calls import Classifier, HelperCall
from amplint.semantic.conditions import IDENTIFIER, Assumption, Condition
from amplint.semantic.index import CodeUnit
from amplint.semantic.types import (
    UNKNOWN_SCALER,
    AmpEvent,
    AutocastRegion,
    EventKind,
    FlowState,
    Occurrence,
    Ref,
)
from amplint.semantic.names import dotted_name, names_read, roots
from amplint.semantic.regions import CallContext



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
class PathState:
    """A state of a summary's interpretation: the events so far."""

    facts: FrozenSet[Assumption] = frozenset()
    scaled: FrozenSet[Tuple[str, str]] = frozenset()
    events: Tuple[SummaryEvent, ...] = ()


State = Union[FlowState, PathState]


@dataclass
class Paths:
    normal: Set[State]
    breaks: Set[State] = field(default_factory=set)
    continues: Set[State] = field(default_factory=set)
    returns: Set[State] = field(default_factory=set)
    raises: Set[State] = field(default_factory=set)

    def then(self, step: "Paths") -> "Paths":
        return Paths(
            step.normal,
            self.breaks | step.breaks,
            self.continues | step.continues,
            self.returns | step.returns,
            self.raises | step.raises,
        )

    def merge(self, other: "Paths") -> "Paths":
        return Paths(
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


# --------------------------------------------------------------------------- symbols


class Symbols:
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


def summary_event(
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


def own_event(
    event: AmpEvent, context: CallContext, symbols: Symbols, scaled_names: FrozenSet[Tuple[str, str]]
) -> SummaryEvent:
    """An event a helper runs itself, as its callers see it: a backward on a parameter's
    value is decided by what each caller passes."""
    found = summary_event(event, (), symbols.ref(event.receiver), symbols.ref(event.argument), context)
    if event.kind is not EventKind.BACKWARD:
        return found
    scaled = event.scaled_inline_by or scaler_of(event.tensor_reads, scaled_names)
    params = event.tensor_reads & symbols.params
    if scaled is None and params:
        return replace(found, tensor_param=sorted(params)[0])
    return replace(found, scaled=symbols.key(scaled))


def nested_event(
    inner: SummaryEvent,
    call: HelperCall,
    context: CallContext,
    to_symbol: Symbols,
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
            inline = classifier.scaling_of(argument, call.record.unit) or scaler_of(reads, scaled_names)
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


def kept(cache: Dict[Tuple[int, ...], tuple], owners: Tuple[object, ...], compute: Callable[[], _T]) -> _T:
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


def foreign_summary(call: HelperCall) -> Summary:
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


def scaler_of(reads: FrozenSet[str], scaled: FrozenSet[Tuple[str, str]]) -> Optional[str]:
    return next((scaler for name, scaler in sorted(scaled) if name in reads), None)
