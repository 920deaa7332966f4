"""Whether a unit's gradients reach an optimizer, and whether loss scaling serves its training
step (a fact family: `Training`, AMP002's question "is this float16 region trained without a
scaler?").

- `reaches_optimizer(backward)`: the gradients of a backward reach an optimizer step (in its
  unit or a helper, or pending when the unit returns and a caller trains), unlike a saliency
  map or an out-of-memory probe that reads and drops them;
- `scaling_serves(unit)`: a live GradScaler (or a scaler-like helper, a framework in float16)
  may serve the unit's step;
- `backwards_fed_by(region)`: the backwards that run on what an autocast region computed.
"""

from __future__ import annotations

from typing import List, Optional, Set

import libcst as cst

from amplint.semantic import (
    Analysis,
    AutocastRegion,
    Classified,
    CodeUnit,
    EventKind,
    GradientState,
    HelperCall,
    Occurrence,
    SemanticModel,
    UNKNOWN_SCALER,
    dotted_name,
    names_read,
    roots,
    values_derived_from,
)

_STEPS = frozenset({EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP})


class Training(Analysis):
    """Gradients reaching optimizers, and scaling serving steps: `model.facts(Training)`."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)

    def scalers_referenced(self, unit: CodeUnit) -> Set[str]:
        """Scalers (and scaler-like objects) `unit` calls, scales with, or hands on."""
        found: Set[str] = set()
        wanted = set(self.model.scalers) | self.model.scaler_facts.scaler_like
        for record in unit.calls:
            call = record.node
            names = [dotted_name(call.func)] + [dotted_name(arg.value) for arg in call.args]
            if isinstance(call.func, cst.Attribute):
                names.append(dotted_name(call.func.value))
            for name in names:
                if name is not None:
                    key = self.model.identity(unit, name)
                    if key in wanted:
                        found.add(key)
        return found

    def scaling_serves(self, unit: CodeUnit) -> bool:
        """Whether a live GradScaler (or a scaler-like helper, or a framework in float16) may
        serve the unit's training step: one used in the unit, in a function it is nested in,
        in another method of its class, at the module's top level, or in a helper it calls."""

        def serving(key: str) -> bool:
            info = self.model.scalers.get(key)
            return key in self.model.scaler_facts.scaler_like if info is None else not info.known_disabled

        related = [self.model.units[0]]
        scope: Optional[CodeUnit] = unit
        while scope is not None:
            related.append(scope)
            scope = scope.enclosing
        if unit.class_name is not None:
            related += [u for u in self.model.units if u.class_name == unit.class_name]
        if any(serving(key) for u in related for key in self.scalers_referenced(u)):
            return True
        for occurrence in self.model.occurrences_in(unit):
            event = occurrence.event
            if event.kind in (EventKind.SCALE, EventKind.SCALER_STEP, EventKind.UNSCALE):
                receiver = occurrence.receiver.key if occurrence.receiver is not None else None
                if receiver is not None and serving(receiver):
                    return True
            if event.kind is EventKind.FRAMEWORK_BACKWARD:
                return True
            # A loss scaled by something we cannot name (`amp["scaler"].scale(loss)`) is scaled.
            if event.kind is EventKind.BACKWARD and event.scaled_inline_by == UNKNOWN_SCALER:
                return True
        return False

    def reaches_optimizer(self, backward: Occurrence) -> bool:
        """Whether the gradients of `backward` can reach an optimizer step: one in its unit
        (or a helper) steps before anything zeroes them, or they are still pending when the
        unit returns and a caller trains (see `trains`). A backward whose gradients are read
        and thrown away (a saliency map, an out-of-memory probe) is not a training step."""
        event = backward.event

        def pending(gradients: GradientState) -> bool:
            # In its own unit, or through the call of any unit that calls it, at any depth.
            candidates = (*gradients.plain_backwards, gradients.last_backward, gradients.scaled_by)
            return any(c is not None and c.event is event for c in candidates)

        followed = True
        for unit in self.model.units:
            flow = self.model.flow.unit_flow(unit)
            if flow is None:
                followed = False
                continue
            for occurrence, states in flow.before.items():
                if occurrence.kind in (EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP):
                    if any(pending(state.gradients) for state in states):
                        return True
        own = self.model.flow.unit_flow(backward.unit)
        if own is None:
            return self.trains(backward.unit)  # too complex to follow: what the unit does at all
        if not any(pending(state.gradients) for state in own.exits):
            return False  # zeroed (or never left) before any step
        if self.model.flow.has_visible_callers(backward.unit) and followed:
            return False  # every caller was followed, and none steps on them
        return self.trains(backward.unit, steps_here=False)

    def trains(self, unit: CodeUnit, _seen: Optional[Set[int]] = None, steps_here: bool = True) -> bool:
        """Whether gradients computed in `unit` can reach an optimizer: it (or a helper it
        calls) steps, a caller in the file does, or, with no caller visible, the file trains
        somewhere and the unit does not read the gradients itself (saliency)."""
        seen = _seen if _seen is not None else set()
        if id(unit) in seen:
            return False
        seen.add(id(unit))
        if steps_here and any(o.kind in _STEPS for o in self.model.occurrences_in(unit)):
            return True
        callers = [
            record.unit
            for record in self.model.index.calls
            if getattr(self.model.classify(record), "callee", None) is unit
        ]
        if callers:
            return any(self.trains(caller, seen) for caller in callers)
        if unit.grad_reads:
            return False
        return bool(self.model.scaler_facts.optimizers) or any(
            o.kind in _STEPS for u in self.model.units for o in self.model.occurrences_in(u)
        )

    def backwards_fed_by(self, region: AutocastRegion) -> List[Occurrence]:
        """The backwards in the region's unit that run on something computed under it: inside
        the region, on a value derived from what it assigned, or in a helper handed such a value."""
        unit = region.unit
        found: List[Occurrence] = []
        derived: Optional[Set[str]] = None
        for occurrence in self.model.occurrences_in(unit):
            if occurrence.kind is not EventKind.BACKWARD or occurrence.under_no_grad:
                continue
            if occurrence.region is region:
                found.append(occurrence)
                continue
            if derived is None:
                derived = values_derived_from(unit, region.assigned)
            reads = occurrence.event.tensor_reads
            if occurrence.via:
                # A helper's backward on what the call passes it.
                call = self.classify_node(occurrence.via[0], unit)
                if isinstance(call, HelperCall):
                    reads = frozenset(
                        name for arg in call.record.node.args for name in roots(names_read(arg.value))
                    )
            if reads & derived:
                found.append(occurrence)
        return found

    def classify_node(self, node: cst.Call, unit: CodeUnit) -> Classified:
        for record in unit.calls:
            if record.node is node:
                return self.model.classify(record)
        return None
