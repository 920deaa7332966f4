"""amplint's semantic model of a file: what its mixed-precision code does, built once per file
and queried by every rule.

    model = analyze(cst.parse_module(source))

The parts, each in its own module:
- `walk`: a fast read-only walk over LibCST trees;
- `index`: one walk collecting scopes, bindings, code units and every call with its context;
- `resolve`: what a name refers to, and which dtypes and devices an expression can be;
- `vocabulary`: the naming conventions amplint falls back on, in one place;
- `scalers`: which variables hold GradScalers and optimizers, and which frameworks scale;
- `regions`: autocast regions and the region each call runs in;
- `calls`: what each call is (an AMP event, a helper of the file, or nothing);
- `flow`: the order of events through each unit and helper, and the gradients' state;
- `checkpoints`: where optimizers' and scalers' state is saved and restored;
- `repetition`: the loops whose every iteration runs a call again;
- `precision`: where modules are cast, which optimizers train them, in-place averages (EMAs);
- `devices`: where code places its tensors, and what an autocast region is gated on;
- `deprecations`: uses of the deprecated per-device AMP API and their replacements;
- `model`: the public types rules see.

Rules ask questions of `SemanticModel`; they never walk the tree for facts another rule
needs too. `rules/README.md` says how to add one.
"""

from __future__ import annotations

from functools import cached_property
from typing import Dict, FrozenSet, Iterator, List, Optional, Set, Tuple

import libcst as cst

from amplint.semantic.calls import Classified, Classifier, HelperCall
from amplint.semantic.checkpoints import Checkpoints, HandOff, StateCall
from amplint.semantic.conditions import Assumption, StandIn, alternatives, assumptions, stand_ins, substitute
from amplint.semantic.deprecations import DeprecatedAmpUse, find_deprecated_uses
from amplint.semantic.devices import Devices, Placement
from amplint.semantic.exports import ExternalModules, export_summary
from amplint.semantic.expressions import RegionExpressions, RegionOp
from amplint.semantic.flow import FlowAnalysis, UnitFlow
from amplint.semantic.index import Binding, CallRecord, CodeUnit, ModuleIndex, Scope, build_index
from amplint.semantic.model import (
    UNKNOWN_SCALER,
    AmpEvent,
    AutocastRegion,
    EventKind,
    FlowState,
    GradientState,
    Occurrence,
    Ref,
    ScalerInfo,
)
from amplint.semantic.names import dotted_name, names_bound, names_read, roots
from amplint.semantic.precision import (
    InPlaceAverage,
    ModuleCast,
    OptimizerBuild,
    PrecisionFacts,
    PrecisionFinder,
    Successors,
    averaged_in,
    find_precision,
    trained_in,
)
from amplint.semantic.regions import Regions
from amplint.semantic.repetition import Repetition, Repetitions
from amplint.semantic.resolve import Resolver, argument, is_infinity
from amplint.semantic.scalers import ScalerFacts, all_bindings, binding_key, find_scalers
from amplint.semantic.walk import iter_tree

__all__ = [
    "AMP_VOCABULARY",
    "UNKNOWN_SCALER",
    "AmpEvent",
    "AutocastRegion",
    "Binding",
    "CallRecord",
    "CodeUnit",
    "DeprecatedAmpUse",
    "EventKind",
    "FlowState",
    "GradientState",
    "HandOff",
    "InPlaceAverage",
    "ModuleCast",
    "Occurrence",
    "OptimizerBuild",
    "Placement",
    "Ref",
    "Repetition",
    "RegionOp",
    "ScalerInfo",
    "StateCall",
    "SemanticModel",
    "analyze",
]

# What a file must mention for the model to find an autocast region, a GradScaler or a
# framework's loss scaling in it: a scaler is known by its construction, by `unscale_`, by
# `.scale(loss)` feeding a backward, or by `scaler.step(optimizer)`; frameworks by their
# `mixed_precision=` / `precision=` settings.
AMP_VOCABULARY = ("autocast", "GradScaler", "unscale_", ".scale(", "caler.step(", "mixed_precision", "precision=")

_STEPS = frozenset({EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP})


def analyze(module: cst.Module, external: Optional[ExternalModules] = None) -> "SemanticModel":
    """The model of one module; `external` gives the summaries of other linted modules it
    may import (the second phase of a lint run)."""
    return SemanticModel(module, external)


class SemanticModel:
    def __init__(self, module: cst.Module, external: Optional[ExternalModules] = None) -> None:
        self.module = module
        self.external = external
        self.index: ModuleIndex = build_index(module)
        self.resolver = Resolver(self.index)
        self.scaler_facts: ScalerFacts = find_scalers(self.index, self.resolver)
        self.scalers: Dict[str, ScalerInfo] = self.scaler_facts.scalers
        self.classifier = Classifier(self.index, self.resolver, self.scaler_facts, external)
        self.regions = Regions(self.index, self.resolver)
        self.flow = FlowAnalysis(self)
        self._scaling: Dict[int, Tuple[Optional[str], FrozenSet[str]]] = {}
        self._assumptions: Dict[Tuple[int, bool], List[Assumption]] = {}
        self._alternatives: Dict[Tuple[int, bool, bool], List[List[Assumption]]] = {}
        self._stand_ins: Dict[int, Dict[str, StandIn]] = {}
        self._checkpoints: Optional[Checkpoints] = None
        self._repetitions: Optional[Repetitions] = None
        self._expressions: Optional[RegionExpressions] = None

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

    def binding(self, unit: CodeUnit, name: str) -> List[Binding]:
        """Every binding `name` may refer to when read in `unit`."""
        return self.resolver.bindings(name, unit.scope)

    def identity(self, unit: CodeUnit, name: str) -> str:
        """The variable `name` is when read in `unit` (a key shared by every read of it)."""
        return self.resolver.identity(name, unit.scope)

    # ------------------------------------------------------------------ scalers
    def is_live(self, scaler: Optional[str], facts: FrozenSet[Assumption] = frozenset()) -> bool:
        """Whether the scaler `scaler` (a key) is on, given what a path assumed."""
        info = self.scalers.get(scaler) if scaler is not None else None
        if info is None and scaler is not None and scaler.startswith("ext:") and self.external is not None:
            info = self.external.scaler(scaler)
        return info is not None and info.live_under(facts)

    def assumptions(self, test: cst.BaseExpression, outcome: bool) -> List[Assumption]:
        """What taking a branch tells (`amplint.semantic.conditions`), computed once per test."""
        key = (id(test), outcome)
        if key not in self._assumptions:
            self._assumptions[key] = assumptions(test, outcome)
        return self._assumptions[key]

    def alternatives(
        self, test: cst.BaseExpression, outcome: bool, unit: Optional[CodeUnit] = None
    ) -> List[List[Assumption]]:
        """The ways a branch can be taken (`amplint.semantic.conditions.alternatives`), once per
        test; read in `unit`, with its locals that stand for stable expressions written as
        those expressions (`stand_ins`), so that conditions compare across aliases and calls."""
        key = (id(test), outcome, unit is not None)
        if key not in self._alternatives:
            cases = alternatives(test, outcome)
            stand_ins = self.stand_ins(unit) if unit is not None else {}
            if stand_ins:
                cases = [[(substitute(cond, stand_ins), value) for cond, value in case] for case in cases]
            self._alternatives[key] = cases
        return self._alternatives[key]

    def stand_ins(self, unit: CodeUnit) -> Dict[str, StandIn]:
        """The locals of a function bound once to a stable expression, each with that
        expression (`amplint.semantic.conditions.substitute`): an attribute of `self`, a
        module-level name, a parameter, or a call of one on such arguments or constants
        (`use_scaling = self._use_grad_scaling(model)`), that the function never rebinds."""
        if unit.is_module:
            return {}
        found = self._stand_ins.get(id(unit))
        if found is None:
            found = self._stand_ins[id(unit)] = stand_ins(unit, self.resolver)
        return found

    def scaler_name(self, key: Optional[str], default: str = "scaler") -> str:
        info = self.scalers.get(key) if key is not None else None
        return info.name if info is not None else default

    def scaling_and_reads(self, value: Optional[cst.CSTNode], unit: CodeUnit) -> Tuple[Optional[str], FrozenSet[str]]:
        """Who scales `value` inline (see `Classifier.scaling_of`) and the variables it reads."""
        if value is None:
            return None, frozenset()
        key = id(value)
        if key not in self._scaling:
            self._scaling[key] = (self.classifier.scaling_of(value, unit), frozenset(roots(names_read(value))))
        return self._scaling[key]

    def scalers_referenced(self, unit: CodeUnit) -> Set[str]:
        """Scalers (and scaler-like objects) `unit` calls, scales with, or hands on."""
        found: Set[str] = set()
        wanted = set(self.scalers) | self.scaler_facts.scaler_like
        for record in unit.calls:
            call = record.node
            names = [dotted_name(call.func)] + [dotted_name(arg.value) for arg in call.args]
            if isinstance(call.func, cst.Attribute):
                names.append(dotted_name(call.func.value))
            for name in names:
                if name is not None:
                    key = self.resolver.identity(name, unit.scope)
                    if key in wanted:
                        found.add(key)
        return found

    def scaling_serves(self, unit: CodeUnit) -> bool:
        """Whether a live GradScaler (or a scaler-like helper, or a framework in float16) may
        serve the unit's training step: one used in the unit, in a function it is nested in,
        in another method of its class, at the module's top level, or in a helper it calls."""

        def serving(key: str) -> bool:
            info = self.scalers.get(key)
            return key in self.scaler_facts.scaler_like if info is None else not info.known_disabled

        related = [self.units[0]]
        scope: Optional[CodeUnit] = unit
        while scope is not None:
            related.append(scope)
            scope = scope.enclosing
        if unit.class_name is not None:
            related += [u for u in self.units if u.class_name == unit.class_name]
        if any(serving(key) for u in related for key in self.scalers_referenced(u)):
            return True
        for occurrence in self.occurrences_in(unit):
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

    def grad_scalers_built(self) -> Iterator[Tuple[ScalerInfo, CallRecord]]:
        """Each `GradScaler(...)` the file builds into a variable, with the scaler it fills;
        not one built with a literal `enabled=False` (whatever else the variable holds)."""
        for binding, call in self.scaler_facts.constructions:
            info = self.scalers.get(binding_key(binding))
            record = self.repetitions.record(call)
            if info is None or info.framework is not None or record is None:
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

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoints(self) -> Checkpoints:
        """Where optimizers' and scalers' state is saved and restored (`amplint.semantic.checkpoints`)."""
        if self._checkpoints is None:
            self._checkpoints = Checkpoints(self.index, self.resolver, self.scaler_facts, self.classify)
        return self._checkpoints

    def optimizer_checkpoints(self, scaler: Optional[str] = None) -> List[StateCall]:
        """Where the file saves an optimizer's state (`optimizer.state_dict()`) or restores it
        (`optimizer.load_state_dict(...)`), copies kept in memory aside. With `scaler` (a
        key), only those a run of that scaler can reach: for a scaler local to a function,
        the checkpoints in the functions connected to it by calls in this file (what it
        calls, what calls it, where it is passed or returned); for one also kept in an
        attribute or a module global, the whole file's."""
        found = self.checkpoints.optimizer_state()
        aliases = self.checkpoints.aliases(scaler) if scaler is not None else set()
        if not aliases or not all(key.startswith("fn:") for key in aliases):
            return found  # kept on an object or in a module global: it lives as long as they do
        homes = [unit for unit in self.units if any(key.rsplit(":", 1)[0] == unit.scope.key for key in aliases)]
        connected = self.repetitions.connected(homes)
        return [call for call in found if any(call.record.unit is unit for unit in connected)]

    def scaler_state_kept(self, scaler: str) -> Optional[HandOff]:
        """Why the scaler `scaler`'s state may reach a checkpoint, or None when nothing the file
        shows saves or restores it (see `amplint.semantic.checkpoints`)."""
        return self.checkpoints.scaler_state_kept(scaler)

    def restored_before(self, record: CallRecord, scaler: str) -> Optional[StateCall]:
        """A `load_state_dict` of the scaler `scaler` that runs before the call `record` in its
        unit (directly, or in a helper it calls first), not on an exclusive branch."""
        order = {id(r.node): i for i, r in enumerate(record.unit.calls)}
        here = order.get(id(record.node), -1)
        for restore in self.checkpoints.state_calls:
            if not restore.restores or restore.key != scaler:
                continue
            if restore.record.unit is record.unit:
                before = restore.record
            else:
                # A helper of the unit that restores it: `self.load_checkpoint(path)`.
                before = next(
                    (
                        caller
                        for caller in self.repetitions.callers(restore.record.unit)
                        if caller.unit is record.unit
                    ),
                    None,
                )
                if before is None:
                    continue
            if order.get(id(before.node), here) < here and not self._exclusive(before.frames, record.frames):
                return restore
        return None

    def _exclusive(self, first, second) -> bool:
        """Whether two stacks of frames lie on branches that cannot both be taken: the two
        sides of one `if`, or `if args.resume:` and a later `if not args.resume:`."""
        from amplint.semantic.index import GuardFrame

        guards = {id(f.test): f.outcome for f in first if isinstance(f, GuardFrame)}
        if any(isinstance(f, GuardFrame) and guards.get(id(f.test), f.outcome) != f.outcome for f in second):
            return True
        facts = {fact for f in first if isinstance(f, GuardFrame) for fact in self.assumptions(f.test, f.outcome)}
        return any(
            (condition, not value) in facts
            for f in second
            if isinstance(f, GuardFrame)
            for condition, value in self.assumptions(f.test, f.outcome)
        )

    # ------------------------------------------------------------------ repetition
    @property
    def repetitions(self) -> Repetitions:
        """Which loops run a call again each iteration (`amplint.semantic.repetition`)."""
        if self._repetitions is None:
            self._repetitions = Repetitions(self.index, self.classify)
        return self._repetitions

    def iterations_of(self, record: CallRecord) -> List[Repetition]:
        """The loops that run the call `record` in every iteration: the innermost loop around
        it, or a loop of a caller around a call of its function; not when an `if` between them
        tests something the iteration changes (`if scaler is None:`)."""
        return [r for r in self.repetitions.around(record) if self.repetitions.runs_every_iteration(record, r)]

    def scaler_steps_within(self, scaler: str, record: CallRecord, repetition: Repetition) -> List[Occurrence]:
        """The `scaler.step(optimizer)` calls of the scaler `scaler` (a key) that run in the same
        iteration of `repetition` as the call `record`: in the loop's body, or anywhere in
        the function the iteration calls to reach `record`."""
        if repetition.via:
            candidates = list(self.occurrences_in(record.unit))
        else:
            candidates = [
                o for o in self.occurrences_in(repetition.unit) if self.repetitions.inside(o.call_site, repetition.loop)
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
            keys = {self.resolver.identity(".".join(parts[:n]), scope) for n in range(1, len(parts) + 1) if parts[:n] != ["self"]}
            bindings = [b for b in all_bindings(self.index) if binding_key(b) in keys]
            if any(self.repetitions.binds_each_iteration(b, repetition) for b in bindings):
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

    # ------------------------------------------------------------------ events
    def clip_only_measures(self, clip: Occurrence) -> bool:
        """A clip at an infinite norm (`clip_grad_norm_(params, float("inf"))`): it clips
        nothing and is there for the norm it returns."""
        return self.clip_only_measures_event(clip.event)

    def clip_only_measures_event(self, event: AmpEvent) -> bool:
        node = event.node
        if not isinstance(node, cst.Call) or event.foreign is not None:
            return event.gradient_use == "norm"  # another module's: as its summary says
        # FSDP's `model.clip_grad_norm_(max_norm)` takes the norm first.
        method = isinstance(node.func, cst.Attribute) and self.qualified(node.func) is None
        return is_infinity(argument(node, 0 if method else 1, "max_norm"))

    def scale_corrupts(self, event: AmpEvent) -> Optional[str]:
        """How a gradient read's use is corrupted by the loss scale, if it is: "norm" or
        "noise" (`amplint.semantic.gradient_use`), unless the result is divided by the
        scaler's `get_scale()`. A clip at an infinite norm is a norm read."""
        if event.kind is EventKind.CLIP:
            measures = self.clip_only_measures_event(event)
            return "norm" if measures and not self.divided_by_loss_scale(event) else None
        if event.kind is not EventKind.GRADIENT_READ or event.gradient_use is None:
            return None
        if event.foreign is None and event.gradient_use == "norm" and self.divided_by_loss_scale(event):
            return None  # `norm / scaler.get_scale()`
        return event.gradient_use

    def confirmed_entry_uses(self) -> Set[int]:
        """Events (ids) of clips and gradient reads on the gradients a function was called
        with that a later live scaler.step()/unscale_() in that function shows were scaled:
        what the function's own module reports (AMP003, AMP009)."""
        found: Set[int] = set()
        for occurrence, state in self.states_before(EventKind.SCALER_STEP, EventKind.UNSCALE):
            if occurrence.receiver is not None and self.is_live(occurrence.receiver.key, state.facts):
                found.update(id(use.event) for use in state.gradients.entry_uses)
        return found

    def divided_by_loss_scale(self, event: AmpEvent) -> bool:
        """Whether what `occurrence` computes (gradients from `autograd.grad` of a scaled
        loss, a norm of scaled gradients) is divided by, or multiplied with the inverse of, a
        scaler's `get_scale()` in its unit: the AMP docs' `[g * inv_scale for g in
        scaled_grads]`, or `norm / scaler.get_scale()`."""
        unit = event.unit
        node = event.node
        bound: Set[str] = set()
        scale: Set[str] = set()
        records = self.index.statement_records(unit)
        for statement, record in records:
            if any(_calls_get_scale(r.node) for r in record.calls):
                scale |= _assigned(statement)
            if statement is event.statement or any(r.node is node for r in record.calls):
                bound |= _assigned(statement)
        grads = values_derived_from(unit, bound)
        scales = values_derived_from(unit, scale)

        def is_gradient(side: cst.CSTNode, names: Set[str]) -> bool:
            return any(n is node for n in iter_tree(side)) or bool(set(roots(names_read(side))) & names)

        def is_scale(side: cst.CSTNode) -> bool:
            return any(isinstance(n, cst.Call) and _calls_get_scale(n) for n in iter_tree(side)) or bool(
                set(roots(names_read(side))) & scales
            )

        def not_nested(part: cst.CSTNode) -> bool:
            return not isinstance(part, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

        statements = [
            part
            for top in unit.body
            for part in iter_tree(top, not_nested)
            if isinstance(part, (cst.SimpleStatementLine, cst.SimpleStatementSuite))
        ]
        for statement in statements:
            local = set(grads)
            for part in iter_tree(statement):
                # `[g * inv_scale for g in scaled_grads]`: g is one of the gradients.
                if isinstance(part, cst.CompFor) and set(roots(names_read(part.iter))) & local:
                    local.update(roots(names_bound(part.target)))
            for part in iter_tree(statement):
                if isinstance(part, cst.BinaryOperation) and isinstance(part.operator, (cst.Divide, cst.Multiply)):
                    if (is_gradient(part.left, local) and is_scale(part.right)) or (
                        is_scale(part.left) and is_gradient(part.right, local)
                    ):
                        return True
                if isinstance(part, cst.AugAssign) and isinstance(part.operator, (cst.DivideAssign, cst.MultiplyAssign)):
                    if is_gradient(part.target, local) and is_scale(part.value):
                        return True
        return False

    def gradient_reads(self, unit: CodeUnit) -> List[AmpEvent]:
        """`p.grad` reads in `unit` (as events), not those only compared with None."""
        found = []
        for statement, record in self.index.statement_records(unit):
            for read in record.grad_reads:
                event = self.classifier.gradient_read(read, statement, unit)
                if event is not None:
                    found.append(event)
        return found

    def occurrences_in(self, unit: CodeUnit) -> Iterator[Occurrence]:
        """Every event `unit` runs, directly or in the helpers it calls (in source order,
        without regard to paths)."""
        for record in unit.calls:
            if not record.immediate:
                continue
            item = self.classify(record)
            context = self.regions.context(record)
            if isinstance(item, AmpEvent):
                yield self.flow.occurrence(
                    event=item,
                    unit=unit,
                    via=(),
                    region=context.region,
                    loop_inside_region=context.loop_inside_region,
                    under_no_grad=context.under_no_grad,
                    receiver=item.receiver,
                    argument=item.argument,
                )
            elif isinstance(item, HelperCall):
                from amplint.semantic.flow import _ArgumentMapper

                mapper = _ArgumentMapper(item, self)
                for inner in self.flow.summary_for(item).events:
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

    def events_in_regions(self, *kinds: EventKind) -> Iterator[Occurrence]:
        """Events of these kinds that run inside an enabled autocast region: written inside
        it, or inside a helper called from inside it (reported at that call)."""
        for unit in self.units:
            for occurrence in self.occurrences_in(unit):
                if occurrence.kind not in kinds or occurrence.region is None:
                    continue
                if occurrence.via and occurrence.region.unit is not unit:
                    continue  # the helper's own region: reported where the helper is analysed
                yield occurrence

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
                    found.extend((occurrence, state) for state in states)
        # Events where they are written first, then through ever deeper helper calls: a
        # finding reached both ways is worded as the unit that contains it sees it.
        found.sort(key=lambda pair: len(pair[0].via))
        yield from found

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
        for unit in self.units:
            flow = self.flow.unit_flow(unit)
            if flow is None:
                followed = False
                continue
            for occurrence, states in flow.before.items():
                if occurrence.kind in (EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP):
                    if any(pending(state.gradients) for state in states):
                        return True
        own = self.flow.unit_flow(backward.unit)
        if own is None:
            return self.trains(backward.unit)  # too complex to follow: what the unit does at all
        if not any(pending(state.gradients) for state in own.exits):
            return False  # zeroed (or never left) before any step
        if self.flow.has_visible_callers(backward.unit) and followed:
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
        if steps_here and any(o.kind in _STEPS for o in self.occurrences_in(unit)):
            return True
        callers = [
            record.unit
            for record in self.index.calls
            if getattr(self.classify(record), "callee", None) is unit
        ]
        if callers:
            return any(self.trains(caller, seen) for caller in callers)
        if unit.grad_reads:
            return False
        return bool(self.scaler_facts.optimizers) or any(
            o.kind in _STEPS for u in self.units for o in self.occurrences_in(u)
        )

    # ------------------------------------------------------------------ precision outside autocast
    @cached_property
    def precision_finder(self) -> PrecisionFinder:
        return find_precision(self.index, self.resolver)

    @property
    def precision(self) -> PrecisionFacts:
        """Casts of modules, optimizer constructions and what they train, in-place averages."""
        return self.precision_finder.facts

    @cached_property
    def successors(self) -> Successors:
        return Successors(self.index)

    def trained_in_low_precision(self, dtype: str = "float16") -> Iterator[Tuple[ModuleCast, OptimizerBuild]]:
        """Casts that may cast a module to `dtype` (`model.half()`, `unet.to(dtype=weight_dtype)`),
        each with an optimizer that then trains the module's parameters in that dtype: it holds
        them on a way the cast can take (their branch conditions do not contradict), nothing
        that may keep float32 master weights takes it (apex, DeepSpeed, accelerate), it is
        built or some optimizer steps after the cast, and nothing after the cast casts the
        module back to float32 or hands it to code that may (adapters, `cast_training_params`)."""
        return trained_in(self, dtype)

    def averaged_in_low_precision(self, dtype: str = "float16") -> Iterator[Tuple[ModuleCast, InPlaceAverage]]:
        """Casts that may cast a module to `dtype` whose parameters a loop that runs after the
        cast decays in place: an EMA kept in that dtype (`ema = deepcopy(model).half()`,
        then `e.mul_(d).add_(p, alpha=1 - d)`)."""
        return averaged_in(self, dtype)

    # ------------------------------------------------------------------ devices
    @cached_property
    def devices(self) -> Devices:
        """Placements (`.to(device)`, `.cuda()`, `device=`) and what regions are gated on."""
        return Devices(self.index, self.resolver, self.regions, self.classify)

    def runtime_device_choices(self, region: AutocastRegion) -> List[Placement]:
        """Placements in the code around `region` (its unit, what encloses it, its class, the
        module's top level, its callers in the file) on a device chosen at run time among
        device types that include one the region does not switch autocast on for
        (`.to(device)` with `device = torch.device("cuda" if ... else "cpu")` around an
        `autocast("cuda")`). Empty when the region is gated on the device (its `enabled=`,
        an `if` around it or a decorator test for CUDA), when its own function puts things on
        the region's device literally (`net.to("cuda")`, `x.cuda()`: that code runs there), or
        when the device is unknown."""
        if not region.possible_devices or self.devices.gated_on_device(region):
            return []
        own = self.devices.placements_in([region.unit])
        if any(p.literal and p.devices and p.devices <= region.possible_devices for p in own):
            return []
        return [
            placement
            for placement in self.devices.placements_in(self.devices.related_units(region.unit))
            if placement.chosen_at_run_time and placement.devices - region.possible_devices
        ]

    # ------------------------------------------------------------------ the deprecated API
    @cached_property
    def names_used(self) -> Dict[str, int]:
        """How often each name is used outside imports (`amplint.fix.names_used`): whether a
        fix replaces the last use of an imported name."""
        from amplint.fix import names_used

        return names_used(self.module)

    @cached_property
    def deprecated_amp_uses(self) -> List[DeprecatedAmpUse]:
        """Calls, decorators and hand-ons of `torch.cuda.amp.*` / `torch.cpu.amp.*` (not under a
        compatibility shim), each with its `torch.amp` replacement, the device type, how this
        file spells the replacement, the import that spelling needs, and the rewritten node."""
        return find_deprecated_uses(self.index, self.resolver)

    # ------------------------------------------------------------------ regions
    @property
    def expressions(self) -> RegionExpressions:
        """What autocast does to the ops evaluated under it (`amplint.semantic.expressions`)."""
        if self._expressions is None:
            self._expressions = RegionExpressions(self)
        return self._expressions

    def ops_in_regions(self) -> List[RegionOp]:
        """Every PyTorch op amplint can name (products, convolutions, logs, sigmoids,
        softmaxes, BCE) evaluated inside an enabled autocast region: written in it, or in a
        function of the file called from inside it (`via`) that does not switch autocast off."""
        return self.expressions.ops_in_regions()

    def backwards_fed_by(self, region: AutocastRegion) -> List[Occurrence]:
        """The backwards in the region's unit that run on something computed under it: inside
        the region, on a value derived from what it assigned, or in a helper handed such a value."""
        unit = region.unit
        found: List[Occurrence] = []
        derived: Optional[Set[str]] = None
        for occurrence in self.occurrences_in(unit):
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
                return self.classify(record)
        return None


def _calls_get_scale(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "get_scale"


def _assigned(statement: cst.CSTNode) -> Set[str]:
    if isinstance(statement, cst.Assign):
        return {name for target in statement.targets for name in roots(names_bound(target.target))}
    if isinstance(statement, (cst.AnnAssign, cst.AugAssign)):
        return set(roots(names_bound(statement.target)))
    return set()


def _leading_name(text: str) -> Optional[str]:
    """`optimizers` in `optimizers[0]`, `self.opts` in `self.opts["g"]`."""
    import re

    found = re.match(r"[A-Za-z_][\w.]*", text)
    return found.group(0).rstrip(".") if found else None


def values_derived_from(unit: CodeUnit, names: Set[str]) -> Set[str]:
    """`names` plus every variable assigned, directly or transitively, from one of them."""
    derived = set(names)
    changed = True
    while changed:
        changed = False
        for targets, reads in unit.assignments:
            if reads & derived and not targets <= derived:
                derived |= targets
                changed = True
    return derived
