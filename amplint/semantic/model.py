"""`SemanticModel`: the questions rules ask about one file, answered from the core's parts.

The core answers what two or more rules need: bindings and identity, scalers, autocast
regions, the AMP events a unit runs (`occurrences_in`) and the state before each
(`states_before`), calls. A fact family only one rule (or one family of rules) needs is an
`Analysis` in `amplint.analyses`, built on first use by `model.facts(Family)`.
"""

from __future__ import annotations

import os
from functools import cached_property
from typing import Any, Callable, Dict, FrozenSet, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Type, TypeVar

import libcst as cst

from amplint.semantic.calls import Classified, Classifier, HelperCall
from amplint.semantic.conditions import Assumption, ConditionMemo, StandIn, alternatives, assumptions, stand_ins, substitute
from amplint.semantic.exports import ExternalModules, ForeignHook, import_targets, imported_module
from amplint.semantic.flow import ArgumentMapper, FlowAnalysis, UnitFlow
from amplint.semantic.index import Binding, CallRecord, CodeUnit, ModuleIndex, Scope, build_index
from amplint.semantic.pytorch import frameworks, vocabulary
from amplint.semantic.names import dotted_name, names_bound, names_read, names_used, roots, source_text
from amplint.semantic.regions import Regions
from amplint.semantic.resolve import Resolver, argument, is_infinity
from amplint.semantic.scalers import ScalerFacts, binding_key, class_scaler_key, find_scalers, passed_for, settings_float16
from amplint.semantic.types import (
    AmpEvent,
    AutocastRegion,
    EventKind,
    FlowState,
    Occurrence,
    Ref,
    ScalerInfo,
)
from amplint.semantic.walk import iter_tree


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
        self.scaler_facts: ScalerFacts = find_scalers(self.index, self.resolver, external)
        self.scalers: Dict[str, ScalerInfo] = self.scaler_facts.scalers
        self.classifier = Classifier(self.index, self.resolver, self.scaler_facts, external)
        self.regions = Regions(self.index, self.resolver)
        self.flow = FlowAnalysis(self)
        self._scaling: Dict[int, Tuple[Optional[str], FrozenSet[str]]] = {}
        self._assumptions: Dict[Tuple[int, bool], List[Assumption]] = {}
        self._alternatives: Dict[Tuple[int, bool, bool], List[List[Assumption]]] = {}
        self._conditions: ConditionMemo = {}  # each test's condition, printed once
        self._occurrences_in: Dict[int, List[Occurrence]] = {}  # id(unit) -> `occurrences_in(unit)`
        self._stand_ins: Dict[int, Dict[str, StandIn]] = {}
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

    def binding(self, unit: CodeUnit, name: str) -> List[Binding]:
        """Every binding `name` may refer to when read in `unit`."""
        return self.resolver.bindings(name, unit.scope)

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
        info = self.scalers.get(key) if key is not None else None
        if info is None and key is not None and key.startswith("ext:") and self.external is not None:
            info = self.external.scaler(key)  # held by an instance of another module's class
        if info is None or info.framework is not None or info.known_disabled:
            return False
        return bool(info.constructions) or any(
            o.kind is EventKind.SCALE and o.receiver is not None and o.receiver.key == key for o in occurrences
        )

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
            self._assumptions[key] = assumptions(test, outcome, self._conditions)
        return self._assumptions[key]

    def alternatives(
        self, test: cst.BaseExpression, outcome: bool, unit: Optional[CodeUnit] = None
    ) -> List[List[Assumption]]:
        """The ways a branch can be taken (`amplint.semantic.conditions.alternatives`), once per
        test; read in `unit`, with its locals that stand for stable expressions written as
        those expressions (`stand_ins`), so that conditions compare across aliases and calls."""
        key = (id(test), outcome, unit is not None)
        if key not in self._alternatives:
            cases = alternatives(test, outcome, self._conditions)
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

    def grad_scalers_built_by_calls(self) -> Iterator[Tuple[CallRecord, str, Optional[Ref]]]:
        """Each call to a function of another linted module that builds a new GradScaler on
        every call and steps, with it, an optimizer that outlives the call (its summary's
        `fresh_scalers`): the call, the construction as quoted there (with the module's
        name), and the optimizer as this file names it: the argument passed for the
        function's parameter, or the instance a method is called on (None when not known)."""
        if self.external is None:
            return
        for record in self.index.calls:
            item = self.classify(record) if record.immediate else None
            if not isinstance(item, HelperCall) or item.foreign is None:
                continue
            for fresh in item.foreign.fresh_scalers:
                optimizer: Optional[Ref] = None
                if fresh.optimizer.startswith("param:"):
                    passed = item.argument_for(fresh.optimizer[len("param:") :])
                    optimizer = self.classifier.ref(passed, record.unit.scope)
                elif fresh.optimizer == "self" and isinstance(record.node.func, cst.Attribute):
                    optimizer = self.classifier.ref(record.node.func.value, record.unit.scope)
                yield record, f"{fresh.text} in {item.foreign.origin}", optimizer

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

    def hook_uses_of_scaled_gradients(self) -> List[Tuple[Occurrence, str]]:
        """Clips and gradient reads in a hook the framework calls while the gradients still
        carry its loss scale (Lightning's `on_after_backward` in a LightningModule trained in
        float16: `frameworks.Framework.scaled_gradient_hooks`), made on those gradients
        before anything in the hook unscales them; each with the framework scaler's key."""
        found: List[Tuple[Occurrence, str]] = []
        for unit, key, framework in self._framework_hooks():
            if unit.name.rsplit(".", 1)[-1] not in framework.scaled_gradient_hooks:
                continue
            flow = self.flow.unit_flow(unit)
            if flow is None:
                continue
            found.extend((use, key) for use in self._at_exits_where_live(flow, key, lambda state: state.gradients.entry_uses))
        return found

    def hook_backwards_before_framework_step(self) -> List[Tuple[Occurrence, str]]:
        """Plain backwards a hook runs that the framework then steps through its scaler
        (`loss.backward()` in a Hugging Face Trainer subclass's `training_step` under fp16
        TrainingArguments: `frameworks.Framework.stepped_after_hooks`), pending when the hook
        returns; each with the framework scaler's key. A hook that scales some way of its own
        (a scaler, `self.accelerator.backward`, apex's `scale_loss`) is left alone: its
        plain backward is the branch for when scaling is off."""
        found: List[Tuple[Occurrence, str]] = []
        for unit, key, framework in self._framework_hooks():
            found.extend((backward, key) for backward in self._pending_at_hook_exit(unit, framework, key))
        return found

    def trained_class_hooks(self) -> Dict[str, List[Tuple[Occurrence, frameworks.Framework]]]:
        """For each top-level class a framework trains (`Framework.module_bases`: a Trainer
        subclass), the plain backwards its hooks leave pending for the framework to step
        through its scaler (as `hook_backwards_before_framework_step` finds them), whatever
        precision this file gives it: a module that builds the framework's settings and the
        class (another module's `MyTrainer(args=TrainingArguments(fp16=True))`) decides.
        Empty for most files: only the hooks of such classes are looked at."""
        found: Dict[str, List[Tuple[Occurrence, frameworks.Framework]]] = {}
        module_scope = self.index.module_scope
        for unit in self.units:
            owner = unit.scope.class_scope
            if owner is None or owner.parent is not module_scope:
                continue
            hook = unit.name.rsplit(".", 1)[-1]
            for framework in frameworks.CLASS_FRAMEWORKS:
                if hook not in framework.stepped_after_hooks or not any(base.rsplit(".", 1)[-1] in framework.module_bases for base in owner.bases):
                    continue
                if self.flow.has_visible_callers(unit):
                    break
                found.setdefault(owner.name, []).extend((backward, framework) for backward in self._pending_at_hook_exit(unit, framework, None))
                break
        return {name: pending for name, pending in found.items() if pending}

    def imported_hook_backwards(self) -> List[Tuple[CallRecord, "ForeignHook", bool]]:
        """Each construction of a class another linted module exports whose hooks leave a plain
        backward pending for its framework's scaler (`trained_class_hooks` there, exported with
        the constructor: `ForeignFunction.framework_hooks`), given settings this file builds
        that may be float16 (`DistillTrainer(model, args=TrainingArguments(fp16=args.fp16))`):
        the call, the hook's backward, and whether float16 is sure rather than one of several
        settings. Settings the file does not show built (parsed from the command line by
        `HfArgumentParser`, a parameter) are unknown, never float16."""
        found: List[Tuple[CallRecord, ForeignHook, bool]] = []
        if self.external is None:
            return found
        for record in self.index.calls:
            item = self.classify(record) if record.immediate else None
            if not isinstance(item, HelperCall) or item.foreign is None or not item.foreign.framework_hooks:
                continue
            for hook in item.foreign.framework_hooks:
                framework = frameworks.BY_NAME.get(hook.framework)
                if framework is None:
                    continue
                settings = passed_for(record.node, framework.settings_keyword, hook.position)
                may, surely = settings_float16(settings, framework, record.unit.scope, self.resolver)
                if may:
                    found.append((record, hook, surely))
        return found

    def _pending_at_hook_exit(self, unit: CodeUnit, framework: frameworks.Framework, key: Optional[str]) -> List[Occurrence]:
        """The plain backwards still pending when the hook `unit` returns, for a framework that
        steps through its scaler after it (where the scaler `key` is live; None: at every exit)."""
        if unit.name.rsplit(".", 1)[-1] not in framework.stepped_after_hooks:
            return []
        flow = self.flow.unit_flow(unit)
        occurrences = self.occurrences_in(unit)
        if flow is None or any(
            o.kind in (EventKind.SCALE, EventKind.FRAMEWORK_BACKWARD, EventKind.SCALER_STEP, EventKind.UNSCALE)
            or (o.kind is EventKind.BACKWARD and o.event.scaled_inline_by is not None)
            for o in occurrences
        ):
            return []
        if self._names_a_scaler(unit):
            return []
        return self._at_exits_where_live(flow, key, lambda state: state.gradients.plain_backwards)

    def _at_exits_where_live(self, flow, key: Optional[str], pick: Callable[[Any], Iterable[Occurrence]]) -> List[Occurrence]:
        """What `pick` gives of each state a unit's flow exits with while the scaler `key` is
        live (None: every state), each once, in a stable order."""
        found: Dict[int, Occurrence] = {}
        for state in sorted(flow.exits, key=self._state_key):
            if key is None or self.is_live(key, state.facts):
                for occurrence in sorted(pick(state), key=self._occurrence_key):
                    found.setdefault(id(occurrence), occurrence)
        return list(found.values())

    def _names_a_scaler(self, unit: CodeUnit) -> bool:
        """Whether `unit` names a scaler or something like one (`self.scaler`, `amp`)."""
        names = (name for record in unit.calls for name in [dotted_name(record.node.func)] + [dotted_name(a.value) for a in record.node.args])
        return any(
            name is not None and (vocabulary.named_like_a_scaler(name) or vocabulary.named_like_scaling(name) or name.split(".")[0] == "amp")
            for name in names
        )

    def _framework_hooks(self) -> Iterator[Tuple[CodeUnit, str, frameworks.Framework]]:
        """The methods of the classes a framework may train in float16 that the framework
        calls itself (no caller in the file): each with the framework's scaler key."""
        for unit in self.units:
            name = self.scaler_facts.fp16_classes.get(unit.class_name or "")
            owner = self.resolver.owning_class(unit.scope) if name is not None else None
            if owner is None or self.flow.has_visible_callers(unit):
                continue
            framework = frameworks.BY_NAME[name]
            yield unit, class_scaler_key(owner, framework), framework

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
        without regard to paths): listed once a unit, for the many rules and facts that ask."""
        found = self._occurrences_in.get(id(unit))
        if found is None:
            found = self._occurrences_in[id(unit)] = list(self._occurrences_of(unit))
        return iter(found)

    def _occurrences_of(self, unit: CodeUnit) -> Iterator[Occurrence]:
        for record in unit.calls:
            if not record.immediate:
                continue
            item = self.classify(record)
            context = self.regions.context(record)
            if isinstance(item, AmpEvent):
                yield self.flow.own_occurrence(item, unit, context)
            elif isinstance(item, HelperCall):
                mapper = ArgumentMapper(item, self)
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

    # ------------------------------------------------------------------ names
    @cached_property
    def names_used(self) -> Dict[str, int]:
        """How often each name is used outside imports (`names.names_used`): whether a fix
        replaces the last use of an imported name."""
        return names_used(self.module)



def _calls_get_scale(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "get_scale"


def _assigned(statement: cst.CSTNode) -> Set[str]:
    if isinstance(statement, cst.Assign):
        return {name for target in statement.targets for name in roots(names_bound(target.target))}
    if isinstance(statement, (cst.AnnAssign, cst.AugAssign)):
        return set(roots(names_bound(statement.target)))
    return set()


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
