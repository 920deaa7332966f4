"""`SemanticModel`: the questions rules ask about one file, answered from the core's parts.

The model answers general questions, each used by two or more clients (rules, analyses, the
summary a module exports): bindings and identity, scalers, autocast regions, the AMP events a
unit runs (`occurrences_in`) and the state before each (`states_before`), calls. A fact
family (whatever number of rules use it) is an `Analysis` in `amplint.analyses`, built on
first use by `model.facts(Family)`; a fact one rule needs stays in that rule.
`tests/test_layers.py` holds the list of the model's public members.

The parts it is built from get what they use, not the model: nothing in the core calls back
into it.
"""

from __future__ import annotations

import os
from typing import Any, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar

import libcst as cst

from amplint.semantic.calls import Classified, Classifier, HelperCall
from amplint.semantic.conditions import Assumption, Branches
from amplint.semantic.constants import Constants
from amplint.semantic.foreign import ExternalModules, import_targets, imported_module
from amplint.semantic.flow import FlowAnalysis
from amplint.semantic.summaries import ArgumentMapper, UnitFlow
from amplint.semantic.index import CallRecord, CodeUnit, ModuleIndex, Scope, binding_key, build_index
from amplint.semantic.pytorch import frameworks
from amplint.semantic.names import dotted_name, source_text
from amplint.semantic.regions import Regions
from amplint.semantic.resolve import Resolver
from amplint.semantic.scalers import ScalerFacts, find_scalers
from amplint.semantic.types import AmpEvent, AutocastRegion, EventKind, FlowState, Occurrence, ScalerInfo


A = TypeVar("A", bound="Analysis")


def analyze(module: cst.Module, external: Optional[ExternalModules] = None, torch_target: Optional[Tuple[int, int]] = None) -> "SemanticModel":
    """The model of one module; `external` gives the summaries of other linted modules it
    may import (the second phase of a lint run); `torch_target` the oldest torch the project
    supports (`amplint.config.torch_target`), which decides whether a fix to a newer API is safe."""
    return SemanticModel(module, external, torch_target)


class Analysis:
    """A fact family of one file (`amplint.analyses`), built from its model on first use:
    subclasses take the model and compute what they need from its public queries."""

    def __init__(self, model: "SemanticModel") -> None:
        self.model = model


class SemanticModel:
    def __init__(self, module: cst.Module, external: Optional[ExternalModules] = None, torch_target: Optional[Tuple[int, int]] = None) -> None:
        self.module = module
        self.external = external
        self.torch_target = torch_target  # None: amplint.config.torch_target.ASSUMED
        self.index: ModuleIndex = build_index(module)
        self.resolver = Resolver(self.index, self._imported_constant if external is not None else None)
        constants = Constants(self.index, self.resolver)
        self.scaler_facts: ScalerFacts = find_scalers(self.index, self.resolver, external, constants)
        self.scalers: Dict[str, ScalerInfo] = self.scaler_facts.scalers
        self.classifier = Classifier(self.index, self.resolver, self.scaler_facts, external)
        self.regions = Regions(self.index, self.resolver)
        self.branches = Branches(self.resolver, constants)
        self.flow = FlowAnalysis(self.index, self.classifier, self.regions, self.scaler_facts, self.branches)
        self._occurrences_in: Dict[int, List[Occurrence]] = {}  # id(unit) -> `occurrences_in(unit)`
        self._call_order: Optional[Dict[int, int]] = None
        self._records: Optional[Dict[int, CallRecord]] = None
        self._facts: Dict[type, "Analysis"] = {}

    # ------------------------------------------------------------------ other modules
    def _imported_constant(self, node: cst.CSTNode, local: str, attribute: str, field: str = "") -> Optional[Mapping[str, Any]]:
        """What the summary of the linted module an import names says of a constant it defines
        (`Resolver.dtypes`, `Resolver.settings`): `from config import AMP_DTYPE`, `import
        config` read as `config.AMP_DTYPE`, `from pkg import config` read as
        `config.AMP_DTYPE`; with `field`, of that field of the class so named
        (`TrainConfig.mixed_precision`)."""
        found = imported_module(node, local)
        if found is None or self.external is None:
            return None
        module, level, name = found
        if name is not None and attribute:
            if "." in attribute:
                return None
            module, name = (f"{module}.{name}" if module else name), attribute
        elif name is None:
            if not attribute or "." in attribute:
                return None
            name = attribute
        elif "." in name:
            return None
        return self.external.constant(module, level, f"{name}.{field}" if field else name)

    # ------------------------------------------------------------------ fact families
    def facts(self, family: Type[A]) -> A:
        """The fact family `family` (an `Analysis` of `amplint.analyses`) of this file, built
        on first use and kept: `model.facts(Checkpoints).restored_before(record, key)`."""
        found = self._facts.get(family)
        if found is None:
            found = self._facts[family] = family(self)
        return found  # type: ignore[return-value]

    # ------------------------------------------------------------------ the file
    @property
    def units(self) -> List[CodeUnit]:
        return self.index.units

    @property
    def autocast_regions(self) -> List[AutocastRegion]:
        return self.regions.all

    @property
    def skipped_units(self) -> List[CodeUnit]:
        """Units whose flow the rules or the summary needed but was too complex to follow
        within the budget: counted, never guessed."""
        return list(self.flow.skipped)

    def classify(self, record: CallRecord) -> Classified:
        return self.classifier.classify(record)

    def qualified(self, node: cst.BaseExpression) -> Optional[str]:
        """The imported dotted path a name stands for: `amp.autocast` -> `torch.cuda.amp.autocast`."""
        return self.resolver.qualified(node)

    def identity(self, unit: CodeUnit, name: str) -> str:
        """The variable `name` is when read in `unit` (a key shared by every read of it)."""
        return self.resolver.identity(name, unit.scope)

    def values(self, unit: CodeUnit, name: str) -> List[Tuple[cst.BaseExpression, Scope]]:
        """The values `name` may hold when read in `unit`, each with the scope it is read in."""
        return self.resolver.values(name, unit.scope)

    def statement_of(self, call: cst.Call) -> Optional[cst.BaseStatement]:
        """The statement that contains the call `call`."""
        return self.index.statement_of(call)

    def call_record(self, call: cst.Call) -> Optional[CallRecord]:
        """The index's record of a call node (its unit, its frames)."""
        if self._records is None:
            self._records = {id(record.node): record for record in self.index.calls}
        return self._records.get(id(call))

    # ------------------------------------------------------------------ scalers
    def plain_grad_scaler(self, key: Optional[str], occurrences: Sequence[Occurrence]) -> bool:
        """Whether `key` is a plain GradScaler that may be on, whose `update()` the code must
        call itself (a framework's scaler updates on its own): one the file builds, or one a
        unit's `occurrences` scale a loss with (an object known only by its `.step(optimizer)`
        may be a wrapper that updates inside)."""
        info = self.scaler_facts.info(key)
        if info is None or info.framework is not None or info.known_disabled:
            return False
        return bool(info.constructions) or any(
            o.kind is EventKind.SCALE and o.receiver is not None and o.receiver.key == key for o in occurrences
        )

    def is_live(self, scaler: Optional[str], facts: FrozenSet[Assumption] = frozenset()) -> bool:
        """Whether the scaler `scaler` (a key) is on, given what a path assumed."""
        return self.scaler_facts.is_live(scaler, facts)

    def assumptions(self, test: cst.BaseExpression, outcome: bool) -> List[Assumption]:
        """What taking a branch tells (`amplint.semantic.conditions`), computed once per test."""
        return self.branches.assumptions(test, outcome)

    def scaler_name(self, key: Optional[str], default: str = "scaler") -> str:
        info = self.scalers.get(key) if key is not None else None
        return info.name if info is not None else default

    def exported_facts(self, func: cst.BaseExpression, scope: Scope, family: str) -> Optional[Tuple[str, str, Any]]:
        """What the fact family keyed `family` exported, in another linted module's summary,
        of the class or function `func` (read in `scope`) names there: `ModelEMA` of `from
        utils import ModelEMA`, `utils.ModelEMA` of `import utils` or `from pkg import utils`.
        (its name there, its file's name, the facts as exported); None when the name is no
        import of a linted module, or the family exported nothing of it."""
        if self.external is None:
            return None
        name = dotted_name(func)
        if name is None:
            return None
        for target, level, qualified in import_targets(name, self.resolver.bindings(name.partition(".")[0], scope)):
            foreign = self.external.module(target, level)
            facts = foreign.facts.get(family, {}).get(qualified) if foreign is not None else None
            if facts is not None:
                return qualified, os.path.basename(foreign.path), facts
        return None

    def grad_scalers_built(self) -> Iterator[Tuple[ScalerInfo, CallRecord]]:
        """Each `GradScaler(...)` the file builds into a variable, with the scaler it fills;
        not one built with a literal `enabled=False` (whatever else the variable holds).
        A framework's scaler the user's code owns (timm's `NativeScaler()`) counts too."""
        for binding, call in self.scaler_facts.constructions:
            info = self.scalers.get(binding_key(binding))
            record = self.call_record(call)
            if info is None or record is None:
                continue
            if info.framework is not None and not frameworks.BY_NAME[info.framework].user_owns_state:
                continue
            enabled = next((arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value == "enabled"), None)
            if enabled is not None and self.resolver.boolean(enabled, binding.value_scope) is False:
                continue
            yield info, record

    @property
    def float16_possible(self) -> bool:
        """Whether the file's autocast may run in float16: False only when it has autocast
        regions and every active one is known to be bfloat16 (or float32). A GradScaler that
        only serves bfloat16 never overflows at its default scale (bfloat16 has float32's range)."""
        active = [region for region in self.autocast_regions if region.active]
        if not active:
            return True
        return any(not region.possible_dtypes or region.may_be_float16 for region in active)

    def occurrences_in(self, unit: CodeUnit) -> Iterator[Occurrence]:
        """Every event `unit` runs, directly or in the helpers it calls (in source order,
        without regard to paths): listed once a unit, for the many rules and facts that ask."""
        found = self._occurrences_in.get(id(unit))
        if found is None:
            found = self._occurrences_in[id(unit)] = list(self._occurrences_of(unit))
        return iter(found)

    def _occurrences_of(self, unit: CodeUnit) -> Iterator[Occurrence]:
        for record in unit.calls:
            if not record.immediate or self.branches.never_runs(record):
                continue
            item = self.classify(record)
            context = self.regions.context(record)
            if isinstance(item, AmpEvent):
                yield self.flow.own_occurrence(item, unit, context)
            elif isinstance(item, HelperCall):
                mapper = ArgumentMapper(item, self.classifier)
                summary = self.flow.summary_for(item)
                possible = None
                if summary.sequences is not None:
                    # Only what a way the call's own arguments allow runs (`clip_grad=None`).
                    possible = {_event_key(e.event) for seq in summary.sequences if self.flow.facts_at(item, seq.facts) is not None for e in seq.events}
                for inner in summary.events:
                    if possible is not None and _event_key(inner.event) not in possible:
                        continue
                    inherited = inner.inherits_region
                    yield self.flow.occurrence(
                        event=inner.event,
                        unit=unit,
                        via=(record.node,) + inner.via,
                        region=context.region if inherited else inner.region,
                        loop_inside_region=context.loop_inside_region if inherited else inner.loop_inside_region,
                        under_no_grad=inner.under_no_grad or context.under_no_grad,
                        receiver=mapper.ref(inner.receiver),
                        argument=mapper.ref(inner.argument),
                    )

    def spelling_in(self, unit: CodeUnit, key: Optional[str]) -> Optional[str]:
        """How `unit`'s own code writes the scaler or optimizer `key` (`self.scaler`), read off
        the AMP calls it makes on it; None when it makes none."""
        for occurrence in self.occurrences_in(unit):
            if occurrence.via:
                continue
            for ref in (occurrence.receiver, occurrence.argument):
                if ref is not None and key is not None and ref.key == key:
                    return ref.text
        return None

    def following(self, occurrence: Occurrence, *kinds: EventKind) -> Optional[Occurrence]:
        """The first event of these kinds after `occurrence` in its unit's source order."""
        found = False
        for other in self.occurrences_in(occurrence.unit):
            if other is occurrence:
                found = True
            elif found and other.kind in kinds:
                return other
        return None

    def states_before(self, *kinds: EventKind) -> Iterator[Tuple[Occurrence, FlowState]]:
        """Each occurrence of these kinds, on every way through its unit, with the state just
        before it (the flow analysis; units too complex to follow are skipped and counted)."""
        found = []
        for unit in self.units:
            flow: Optional[UnitFlow] = self.flow.unit_flow(unit)
            if flow is None:
                continue
            for occurrence, states in flow.before.items():
                if occurrence.kind in kinds:
                    ordered = sorted(states, key=self._state_key) if len(states) > 1 else states
                    found.append((occurrence, ordered))
        # Events where they are written first, then through ever deeper helper calls: a
        # finding reached both ways is worded as the unit that contains it sees it. Within
        # that, in an order that does not depend on how sets happened to iterate (hash seeds,
        # memory addresses): the first report of a node is the one kept, so the same file
        # always gets the same message.
        found.sort(key=lambda pair: (len(pair[0].via), self._occurrence_key(pair[0])))
        for occurrence, states in found:
            for state in states:
                yield occurrence, state

    def exit_states(self, unit: CodeUnit) -> List[FlowState]:
        """Every state `unit` may return with, in a stable order (none for a unit too complex
        to follow: skipped and counted)."""
        flow: Optional[UnitFlow] = self.flow.unit_flow(unit)
        return sorted(flow.exits, key=self._state_key) if flow is not None else []

    def ordered(self, occurrences: Iterable[Occurrence]) -> List[Occurrence]:
        """`occurrences` in an order that does not depend on how sets happened to iterate."""
        return sorted(occurrences, key=self._occurrence_key)

    def _node_key(self, node: cst.CSTNode) -> Tuple[int, str]:
        """A node's place among the file's calls, else its code: the same in every run."""
        if self._call_order is None:
            self._call_order = {id(record.node): position for position, record in enumerate(self.index.calls)}
        position = self._call_order.get(id(node))
        return (position, "") if position is not None else (-1, source_text(node))

    def _occurrence_key(self, occurrence: Optional[Occurrence]) -> tuple:
        if occurrence is None:
            return ()
        return (
            occurrence.kind.name,
            self._node_key(occurrence.event.node),
            len(occurrence.via),
            tuple(self._node_key(call) for call in occurrence.via),
        )

    def _state_key(self, state: FlowState) -> tuple:
        gradients = state.gradients
        occurrence = self._occurrence_key
        return (
            sorted((condition.text, value) for condition, value in state.facts),
            sorted(state.scaled),
            gradients.scaler or "",
            gradients.entry,
            sorted(gradients.unscaled),
            sorted(gradients.stepped),
            gradients.mixed,
            gradients.scaled_since_step,
            occurrence(gradients.scaled_by),
            occurrence(gradients.unscale),
            occurrence(gradients.last_backward),
            sorted(occurrence(o) for o in gradients.plain_backwards),
            sorted(occurrence(o) for o in gradients.entry_uses),
        )


def _event_key(event: AmpEvent) -> object:
    """An event as the ways through its helper list it: itself, or for another module's, as its
    summary names it (each way through was written out with events of its own)."""
    return (event.kind, event.foreign) if event.foreign is not None else id(event)
