"""Hooks a framework calls while it owns the loss scale (AMP001, AMP003, AMP009, and the
summaries of modules whose Trainer subclasses another module builds).

A framework that trains a class of the file in float16 calls some of its methods itself, at
fixed points of its own step (`frameworks.Framework`): Lightning's `on_after_backward` runs
while the gradients still carry its scaler's scale (`scaled_gradient_hooks`); a Hugging Face
Trainer steps through its scaler after a subclass's `training_step` returns
(`stepped_after_hooks`), so a plain `loss.backward()` there is never scaled. These hooks have
no caller in the file: the framework's own code is the caller.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from amplint.semantic import (
    Analysis,
    CallRecord,
    CodeUnit,
    EventKind,
    FlowState,
    ForeignHook,
    HelperCall,
    Occurrence,
    class_scaler_key,
    dotted_name,
    passed_for,
    settings_float16,
)
from amplint.semantic.pytorch import frameworks, vocabulary


class FrameworkHooks(Analysis):
    def uses_of_scaled_gradients(self) -> List[Tuple[Occurrence, str]]:
        """Clips and gradient reads in a hook the framework calls while the gradients still
        carry its loss scale (Lightning's `on_after_backward` in a LightningModule trained in
        float16: `frameworks.Framework.scaled_gradient_hooks`), made on those gradients
        before anything in the hook unscales them; each with the framework scaler's key."""
        found: List[Tuple[Occurrence, str]] = []
        for unit, key, framework in self._hooks():
            if unit.name.rsplit(".", 1)[-1] not in framework.scaled_gradient_hooks:
                continue
            found.extend((use, key) for use in self._at_exits_where_live(unit, key, lambda state: state.gradients.entry_uses))
        return found

    def backwards_before_framework_step(self) -> List[Tuple[Occurrence, str]]:
        """Plain backwards a hook runs that the framework then steps through its scaler
        (`loss.backward()` in a Hugging Face Trainer subclass's `training_step` under fp16
        TrainingArguments: `frameworks.Framework.stepped_after_hooks`), pending when the hook
        returns; each with the framework scaler's key. A hook that scales some way of its own
        (a scaler, `self.accelerator.backward`, apex's `scale_loss`) is left alone: its
        plain backward is the branch for when scaling is off."""
        found: List[Tuple[Occurrence, str]] = []
        for unit, key, framework in self._hooks():
            found.extend((backward, key) for backward in self._pending_at_exit(unit, framework, key))
        return found

    def trained_class_hooks(self) -> Dict[str, List[Tuple[Occurrence, frameworks.Framework]]]:
        """For each top-level class a framework trains (`Framework.module_bases`: a Trainer
        subclass), the plain backwards its hooks leave pending for the framework to step
        through its scaler (as `backwards_before_framework_step` finds them), whatever
        precision this file gives it: a module that builds the framework's settings and the
        class (another module's `MyTrainer(args=TrainingArguments(fp16=True))`) decides.
        Empty for most files: only the hooks of such classes are looked at."""
        model = self.model
        found: Dict[str, List[Tuple[Occurrence, frameworks.Framework]]] = {}
        module_scope = model.index.module_scope
        for unit in model.units:
            owner = unit.scope.class_scope
            if owner is None or owner.parent is not module_scope:
                continue
            hook = unit.name.rsplit(".", 1)[-1]
            for framework in frameworks.CLASS_FRAMEWORKS:
                if hook not in framework.stepped_after_hooks or not any(base.rsplit(".", 1)[-1] in framework.module_bases for base in owner.bases):
                    continue
                if model.flow.has_visible_callers(unit):
                    break
                found.setdefault(owner.name, []).extend((backward, framework) for backward in self._pending_at_exit(unit, framework, None))
                break
        return {name: pending for name, pending in found.items() if pending}

    def imported_hook_backwards(self) -> List[Tuple[CallRecord, ForeignHook, bool]]:
        """Each construction of a class another linted module exports whose hooks leave a plain
        backward pending for its framework's scaler (`trained_class_hooks` there, exported with
        the constructor: `ForeignFunction.framework_hooks`), given settings this file builds
        that may be float16 (`DistillTrainer(model, args=TrainingArguments(fp16=args.fp16))`):
        the call, the hook's backward, and whether float16 is sure rather than one of several
        settings. Settings the file does not show built (parsed from the command line by
        `HfArgumentParser`, a parameter) are unknown, never float16."""
        model = self.model
        found: List[Tuple[CallRecord, ForeignHook, bool]] = []
        if model.external is None:
            return found
        for record in model.index.calls:
            item = model.classify(record) if record.immediate else None
            if not isinstance(item, HelperCall) or item.foreign is None or not item.foreign.framework_hooks:
                continue
            for hook in item.foreign.framework_hooks:
                framework = frameworks.BY_NAME.get(hook.framework)
                if framework is None:
                    continue
                settings = passed_for(record.node, framework.settings_keyword, hook.position)
                may, surely = settings_float16(settings, framework, record.unit.scope, model.resolver)
                if may:
                    found.append((record, hook, surely))
        return found

    def _pending_at_exit(self, unit: CodeUnit, framework: frameworks.Framework, key: Optional[str]) -> List[Occurrence]:
        """The plain backwards still pending when the hook `unit` returns, for a framework that
        steps through its scaler after it (where the scaler `key` is live; None: at every exit)."""
        if unit.name.rsplit(".", 1)[-1] not in framework.stepped_after_hooks:
            return []
        if any(
            o.kind in (EventKind.SCALE, EventKind.FRAMEWORK_BACKWARD, EventKind.SCALER_STEP, EventKind.UNSCALE)
            or (o.kind is EventKind.BACKWARD and o.event.scaled_inline_by is not None)
            for o in self.model.occurrences_in(unit)
        ):
            return []
        if _names_a_scaler(unit):
            return []
        return self._at_exits_where_live(unit, key, lambda state: state.gradients.plain_backwards)

    def _at_exits_where_live(self, unit: CodeUnit, key: Optional[str], pick: Callable[[FlowState], Iterable[Occurrence]]) -> List[Occurrence]:
        """What `pick` gives of each state `unit` may return with while the scaler `key` is
        live (None: every state), each once, in a stable order."""
        model = self.model
        found: Dict[int, Occurrence] = {}
        for state in model.exit_states(unit):
            if key is None or model.is_live(key, state.facts):
                for occurrence in model.ordered(pick(state)):
                    found.setdefault(id(occurrence), occurrence)
        return list(found.values())

    def _hooks(self) -> Iterator[Tuple[CodeUnit, str, frameworks.Framework]]:
        """The methods of the classes a framework may train in float16 that the framework
        calls itself (no caller in the file): each with the framework's scaler key."""
        model = self.model
        for unit in model.units:
            name = model.scaler_facts.fp16_classes.get(unit.class_name or "")
            owner = model.resolver.owning_class(unit.scope) if name is not None else None
            if owner is None or model.flow.has_visible_callers(unit):
                continue
            framework = frameworks.BY_NAME[name]
            yield unit, class_scaler_key(owner, framework), framework


def _names_a_scaler(unit: CodeUnit) -> bool:
    """Whether `unit` names a scaler or something like one (`self.scaler`, `amp`)."""
    names = (name for record in unit.calls for name in [dotted_name(record.node.func)] + [dotted_name(a.value) for a in record.node.args])
    return any(
        name is not None and (vocabulary.named_like_a_scaler(name) or vocabulary.named_like_scaling(name) or name.split(".")[0] == "amp")
        for name in names
    )
