"""What each call is to mixed precision: an AMP event, a call to a helper of the linted code
whose AMP work it stands for, or nothing.

A method called on a variable that holds a GradScaler is the scaler's; a call that resolves
to a function of the file (`train_step(...)`, `self._run_step(...)`, `trainer.fit(...)` with
`trainer = Trainer()` a class of the file) is a helper call, followed by the flow analysis,
and so is a call of an instance whose class is certain (`loss_scaler(loss, opt)`,
`self.rotary(pos)`: its `__call__`, or an nn.Module's `forward`);
everything else is classified from the PyTorch API and, where the code does not say, from
naming conventions (`amplint.semantic.pytorch.vocabulary`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Union

import libcst as cst

from amplint.semantic.pytorch import api as torch_api, frameworks, vocabulary
from amplint.semantic.foreign import ExternalModules, ForeignFunction, imported_module, is_module_class
from amplint.semantic.gradient_use import gradient_use
from amplint.semantic.index import CallRecord, CodeUnit, LoopFrame, ModuleIndex, Scope
from amplint.semantic.types import UNKNOWN_SCALER, AmpEvent, EventKind, Ref
from amplint.semantic.names import dotted_name, names_bound, names_read, roots, source_text
from amplint.semantic.resolve import Resolver, argument, drawn_from
from amplint.semantic.framework_settings import class_scaler_key
from amplint.semantic.scalers import ScalerFacts
from amplint.semantic.walk import iter_tree, post_order

_SCALER_METHODS = {
    "scale": EventKind.SCALE,
    "unscale_": EventKind.UNSCALE,
    "step": EventKind.SCALER_STEP,
    "update": EventKind.SCALER_UPDATE,
}


# nn.Module methods that return the module itself: `Net(...).to(device)` is a `Net`.
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "requires_grad_", "half", "float", "bfloat16"})
# What an `nn.Module` subclass names as its base.
_MODULE_CLASSES = frozenset({"torch.nn.Module", "torch.nn.modules.module.Module"})


@dataclass(frozen=True, eq=False)
class HelperCall:
    """A call to a function of the linted code; its AMP work is its callee's: a function
    of this file, or one another linted module exports (`foreign`)."""

    record: CallRecord
    callee: Optional[CodeUnit]
    bound_self: bool  # called as a method (`obj.f(...)`): its first parameter is bound already
    foreign: Optional[ForeignFunction] = None

    @property
    def parameters(self) -> List[str]:
        if self.callee is not None:
            return self.callee.parameters
        return list(self.foreign.params) if self.foreign is not None else []

    def argument_for(self, parameter: str) -> Optional[cst.BaseExpression]:
        """What the call passes for the callee's `parameter`."""
        params = self.parameters
        if parameter not in params:
            return None
        call = self.record.node
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value == parameter:
                return arg.value
        index = params.index(parameter) - (1 if self.bound_self else 0)
        positional = [arg for arg in call.args if arg.keyword is None]
        for position, arg in enumerate(positional):
            if arg.star:
                return None  # `f(*args)`: cannot tell what lands where
            if position == index:
                return arg.value
        return None


Classified = Union[AmpEvent, HelperCall, None]


class Classifier:
    def __init__(
        self, index: ModuleIndex, resolver: Resolver, scalers: ScalerFacts, external: Optional[ExternalModules] = None
    ) -> None:
        self.external = external
        self.index = index
        self.resolver = resolver
        self.scalers = scalers
        self._cache: Dict[int, Classified] = {}
        self._reads: Dict[int, Optional[AmpEvent]] = {}
        self._functions: Dict[int, CodeUnit] = {id(u.node): u for u in index.units if not u.is_module}
        self._work: Dict[int, bool] = {}

    def classify(self, record: CallRecord) -> Classified:
        key = id(record.node)
        if key not in self._cache:
            self._cache[key] = self._classify(record)
        return self._cache[key]

    def key(self, name: str, scope: Scope) -> str:
        return self.resolver.identity(name, scope)

    def ref(self, expression: Optional[cst.BaseExpression], scope: Scope) -> Optional[Ref]:
        if expression is None:
            return None
        name = dotted_name(expression)
        if name is None:
            return Ref(source_text(expression), "expr:" + source_text(expression))
        return Ref(name, self.key(name, scope))

    # the classification
    def _classify(self, record: CallRecord) -> Classified:
        node = record.node
        func = node.func
        scope = record.unit.scope
        qualified = self.resolver.qualified(func)
        if qualified in torch_api.AUTOGRAD_BACKWARD:
            tensor = argument(node, 0, "tensors")
            return self._backward(record, tensor) if tensor is not None else None
        if qualified in torch_api.CLIP_FUNCTIONS:
            return AmpEvent(EventKind.CLIP, node, record.unit)
        if qualified in torch_api.AUTOGRAD_GRAD:
            outputs = argument(node, 0, "outputs")
            if outputs is None:
                return None
            return AmpEvent(
                EventKind.AUTOGRAD_GRAD,
                node,
                record.unit,
                tensor=outputs,
                scaled_inline_by=self.scaling_of(outputs, record.unit),
                tensor_reads=frozenset(roots(names_read(outputs))),
            )
        if not isinstance(func, cst.Attribute):
            return self._helper(record) or self._called_scaler(record)
        method = func.attr.value
        receiver = dotted_name(func.value)
        if method == "backward" and receiver is None:
            return self._backward(record, func.value)  # `scaler.scale(loss).backward()`
        if receiver is None:
            # `optimizers[0].step()`, `opts["main"].step()`
            if method == "step" and isinstance(func.value, cst.Subscript):
                container = dotted_name(func.value.value)
                if container is not None and vocabulary.looks_like_optimizer(container):
                    text = source_text(func.value)
                    return AmpEvent(EventKind.OPTIMIZER_STEP, node, record.unit, receiver=Ref(text, "expr:" + text))
            return None
        receiver_key = self.key(receiver, scope)
        info = self.scalers.scalers.get(receiver_key)
        if info is not None and info.framework is None:
            kind = _SCALER_METHODS.get(method)
            if kind is None:
                return None
            return AmpEvent(kind, node, record.unit, receiver=Ref(receiver, receiver_key), argument=self.ref(argument(node, 0, "optimizer"), scope))
        helper = self._helper(record)
        if helper is not None:
            return helper
        called = self._called_scaler(record)
        if called is not None:
            return called
        if info is not None:  # a framework in float16: accelerate, Fabric, Lightning, DeepSpeed
            return self._framework(record, method, receiver, receiver_key, info.framework or "")
        on_self = _on_self(receiver, method)
        if on_self is not None:
            # `self.manual_backward(loss)`, `self.accelerator.backward(loss)` in a class the
            # framework trains: its backward, scaled when it may train in float16.
            trained = self._class_scaler(scope)
            if any(on_self in f.self_backward_methods for f in frameworks.CLASS_FRAMEWORKS):
                ref = Ref(receiver, receiver_key)
                return AmpEvent(EventKind.FRAMEWORK_BACKWARD, node, record.unit, receiver=ref, framework_scaler=trained)
            if trained is not None and on_self in frameworks.BY_NAME[self.scalers.scalers[trained].framework or ""].self_unscaling_methods:
                return AmpEvent(EventKind.UNSCALE, node, record.unit, receiver=Ref("self", trained))
            if any(on_self in f.self_unscaling_methods for f in frameworks.CLASS_FRAMEWORKS):
                return None
        if method == "backward":
            if self._is_framework_backward(receiver, node):
                return AmpEvent(EventKind.FRAMEWORK_BACKWARD, node, record.unit, receiver=Ref(receiver, receiver_key))
            return self._backward(record, func.value)
        if method == "clip_grad_norm_":
            # FSDP's `model.clip_grad_norm_`; accelerate's unscales before clipping.
            if vocabulary.clip_unscales_itself(receiver):
                return None
            return AmpEvent(EventKind.CLIP, node, record.unit, receiver=Ref(receiver, receiver_key))
        if method == "step":
            framework = self.scalers.prepared.get(receiver_key) or self._drawn_prepared(receiver, record)
            if framework is not None:
                # accelerate's AcceleratedOptimizer, Lightning's LightningOptimizer: step() is
                # the framework scaler's step.
                owner = self.scalers.scalers[framework]
                return AmpEvent(
                    EventKind.SCALER_STEP, node, record.unit, receiver=Ref(owner.name, framework), argument=Ref(receiver, receiver_key)
                )
            if receiver_key in self.scalers.optimizers or vocabulary.looks_like_optimizer(receiver):
                if not vocabulary.named_like_a_non_optimizer(receiver):
                    return AmpEvent(EventKind.OPTIMIZER_STEP, node, record.unit, receiver=Ref(receiver, receiver_key))
            return None
        if method == "zero_grad":
            return AmpEvent(EventKind.ZERO_GRAD, node, record.unit, receiver=Ref(receiver, receiver_key))
        return None

    def _drawn_prepared(self, name: str, record: CallRecord) -> Optional[str]:
        """The framework whose optimizers the loop around `record` draws `name` from (`for
        optimizer in [opt_d, opt_g]:`, `zip([opt_d, opt_g], losses)`, each prepared by the
        same accelerator)."""
        loop = next(
            (f.node for f in reversed(record.frames) if isinstance(f, LoopFrame) and isinstance(f.node, cst.For) and name in names_bound(f.node.target)),
            None,
        )
        drawn = drawn_from(loop, name) if loop is not None else None
        if not isinstance(drawn, (cst.List, cst.Tuple)) or not drawn.elements:
            return None
        found = set()
        for element in drawn.elements:
            element_name = dotted_name(element.value)
            framework = self.scalers.prepared.get(self.key(element_name, record.unit.scope)) if element_name else None
            if framework is None:
                return None
            found.add(framework)
        return found.pop() if len(found) == 1 else None

    def _framework(self, record: CallRecord, method: str, receiver: str, key: str, name: str) -> Optional[AmpEvent]:
        node = record.node
        ref = Ref(receiver, key)
        framework = frameworks.BY_NAME.get(name)
        if framework is None:
            return None
        if method in framework.backward_methods:
            return AmpEvent(EventKind.FRAMEWORK_BACKWARD, node, record.unit, receiver=ref, framework_scaler=key)
        if method in framework.unscaling_methods:
            return AmpEvent(EventKind.UNSCALE, node, record.unit, receiver=ref)
        if method in framework.step_methods:
            return AmpEvent(EventKind.SCALER_STEP, node, record.unit, receiver=ref)
        return None

    def _called_scaler(self, record: CallRecord) -> Optional[AmpEvent]:
        """`loss_scaler(loss, optimizer, clip_grad=...)`: an object that scales the loss, runs
        its backward, unscales before its own clip, steps and updates when called (timm's
        NativeScaler, `frameworks.TIMM`): a step through it, or, where a keyword holds the
        step back (`update_grad=(i + 1) % accum == 0`), a scaled backward only. The object
        is one the file builds, or a name like a scaler's called on a loss and an optimizer
        (a parameter `loss_scaler`), whose scaler the file does not show (not live)."""
        node = record.node
        callee = dotted_name(node.func)
        if callee is None:
            return None
        scope = record.unit.scope
        key = self.key(callee, scope)
        info = self.scalers.scalers.get(key)
        framework = frameworks.BY_NAME.get(info.framework or "") if info is not None else None
        if framework is None or not framework.called_steps:
            framework = frameworks.TIMM
            loss = argument(node, 0, "loss")
            optimizer = argument(node, 1, "optimizer")
            loss_name = dotted_name(loss) if loss is not None else None
            if info is not None or not vocabulary.named_like_a_scaler(callee) or optimizer is None:
                return None
            if loss_name is None or not vocabulary.named_like_a_loss(loss_name):
                return None
        ref = Ref(callee, key)
        held = any(
            arg.keyword is not None
            and arg.keyword.value in framework.hold_step_keywords
            and self.resolver.boolean(arg.value, scope) is not True
            for arg in node.args
        )
        if held:
            return AmpEvent(
                EventKind.FRAMEWORK_BACKWARD, node, record.unit, receiver=ref, framework_scaler=key if info is not None else None
            )
        return AmpEvent(EventKind.SCALER_STEP, node, record.unit, receiver=ref, argument=self.ref(argument(node, 1, "optimizer"), scope))

    def _class_scaler(self, scope: Scope) -> Optional[str]:
        """The scaler of the framework that may train the class `scope` is in, in float16."""
        owner = self.resolver.owning_class(scope)
        name = self.scalers.fp16_classes.get(owner.name) if owner is not None else None
        if owner is None or name is None:
            return None
        return class_scaler_key(owner, frameworks.BY_NAME[name])

    def _is_framework_backward(self, receiver: str, call: cst.Call) -> bool:
        """`accelerator.backward(loss)`, fairseq's/apex's `optimizer.backward(loss)`: a method
        that takes the loss. Tensor.backward's only positional argument is a gradient tensor,
        never named like a loss."""
        if vocabulary.is_framework_receiver(receiver) or vocabulary.looks_like_optimizer(receiver):
            return True
        first = call.args[0] if call.args and call.args[0].keyword is None else None
        name = dotted_name(first.value) if first is not None else None
        return name is not None and vocabulary.named_like_a_loss(name)

    def _backward(self, record: CallRecord, tensor: cst.BaseExpression) -> AmpEvent:
        scope = record.unit.scope
        return AmpEvent(
            EventKind.BACKWARD,
            record.node,
            record.unit,
            argument=self.ref(tensor, scope),
            tensor=tensor,
            scaled_inline_by=self.scaling_of(tensor, record.unit),
            tensor_reads=frozenset(roots(names_read(tensor))),
        )

    def gradient_read(self, read: cst.Attribute, statement: cst.CSTNode, unit: CodeUnit) -> Optional[AmpEvent]:
        """`p.grad` as an event, unless the statement only asks whether it is None."""
        key = id(read)
        if key not in self._reads:
            self._reads[key] = None if _only_tests_for_none(read, statement) else AmpEvent(
                EventKind.GRADIENT_READ,
                read,
                unit,
                statement=statement,
                gradient_use=gradient_use(read, statement, lambda name: self.resolver.local_values(name, unit.scope)),
            )
        return self._reads[key]

    def scaling_of(self, expression: cst.CSTNode, unit: CodeUnit) -> Optional[str]:
        """Who scales `expression` inline: the key of the live-or-not GradScaler whose
        `.scale(...)` it calls, or UNKNOWN_SCALER when it goes through a helper named like
        one (`self.scale_loss(loss)`, apex's `amp.scale_loss(...)`) or the `.scale()` of an
        object we cannot name (`amp["scaler"].scale(loss)`); None when nothing does."""
        found: List[str] = []
        for node in post_order(expression):
            if not isinstance(node, cst.Call):
                continue
            func = node.func
            name = dotted_name(func) or ""
            if isinstance(func, cst.Attribute) and func.attr.value == "scale":
                owner = dotted_name(func.value)
                key = self.key(owner, unit.scope) if owner is not None else None
                if key is not None and key in self.scalers.scalers:
                    found.append(key)
                    continue
                found.append(UNKNOWN_SCALER)
            elif vocabulary.named_like_scaling(name):
                found.append(UNKNOWN_SCALER)
        known = [key for key in found if key != UNKNOWN_SCALER]
        return known[0] if known else (UNKNOWN_SCALER if found else None)

    # helpers of the file
    def _helper(self, record: CallRecord) -> Optional[HelperCall]:
        func = record.node.func
        scope = record.unit.scope
        if isinstance(func, cst.Name):
            for binding in self.resolver.bindings(func.value, scope):
                if binding.kind == "def" and id(binding.node) in self._functions:
                    callee = self._functions[id(binding.node)]
                    if not callee.parameters[:1] in (["self"], ["cls"]) or callee.scope.class_scope is None:
                        return HelperCall(record, callee, bound_self=False)
                if binding.kind == "import":
                    return self._foreign(record, binding.node, func.value, None)
            return self._instance(record, func.value)
        if not isinstance(func, cst.Attribute):
            return None
        owner = dotted_name(func.value)
        method = func.attr.value
        if owner is None:
            return None
        if "." not in owner and owner not in ("self", "cls"):
            # `utils.clip_and_step(...)` with `utils` an imported linted module.
            for binding in self.resolver.bindings(owner, scope):
                if binding.kind == "import":
                    found = self._foreign(record, binding.node, owner, method, module_attribute=True)
                    if found is not None:
                        return found
        classes = []
        if owner in ("self", "cls"):
            classes = self.resolver.class_and_bases(scope)
        else:
            # `trainer.fit()` where `trainer = Trainer(...)`, a class of this file.
            for bound, _ in self.resolver.values(owner, scope):
                if isinstance(bound, cst.Call):
                    name = dotted_name(bound.func)
                    if name in self.index.classes:
                        classes.append(self.index.classes[name])
        for cls in classes:
            for binding in cls.bindings.get(method, ()):
                if binding.kind == "def" and id(binding.node) in self._functions:
                    callee = self._functions[id(binding.node)]
                    bound_self = bool(callee.parameters[:1]) and callee.parameters[0] in ("self", "cls")
                    return HelperCall(record, callee, bound_self=bound_self)
        inherited = self._inherited(record, classes, method)
        if inherited is not None:
            return inherited
        if owner == "self":
            instance = self._instance(record, f"self.{method}")  # `self.rotary(pos)`
            if instance is not None:
                return instance
        if owner not in ("self", "cls") and not vocabulary.is_framework_receiver(owner):
            # `trainer.fit()` where `trainer = Trainer(...)`, a class another linted module
            # exports. Not into a framework's own source (linting accelerate with its tests):
            # `accelerator.backward(loss)` is the framework's, whatever its code does inside.
            for bound, where in self.resolver.values(owner, scope):
                if isinstance(bound, cst.Call) and isinstance(bound.func, cst.Name):
                    for binding in self.resolver.bindings(bound.func.value, where):
                        if binding.kind == "import":
                            found = self._foreign(record, binding.node, bound.func.value, method, bound_self=True)
                            if found is not None:
                                return found
        return None

    def _instance(self, record: CallRecord, name: str) -> Optional[HelperCall]:
        """`loss_scaler(loss, optimizer)`, `rot(pos)`, `self.rotary(pos)`: a call of an instance
        whose class is certain (one binding, to `Cls(...)`, possibly `.to(device)`): its
        class's `__call__`, or its `forward` when the class is an `nn.Module`. A class of this
        file is followed only when that method does AMP work (nn.Module calls are many, and
        a forward without AMP work changes nothing); one another linted module exports, when
        its summary has the method. Anything less certain is not followed."""
        scope = record.unit.scope
        if "." in name and not name.startswith("self."):
            return None
        bindings = self.resolver.bindings(name, scope)
        if len(bindings) != 1 or bindings[0].kind != "assign":
            return None
        binding = bindings[0]
        if name.startswith("self.") and not any(binding.scope is owner for owner in self.resolver.class_and_bases(scope)):
            return None  # an attribute its class never sets: another class's, perhaps
        value = binding.value
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in _RETURNS_SELF:
            value = value.func.value  # `Rotary(dim).to(device)` is the module itself
        if not isinstance(value, cst.Call):
            return None
        class_name = dotted_name(value.func)
        if class_name is None:
            return None
        cls = self.index.classes.get(class_name)
        if cls is not None:
            callee = self._instance_method(cls)
            if callee is None or not self._does_amp_work(callee):
                return None
            return HelperCall(record, callee, bound_self=True)
        if not isinstance(value.func, cst.Name) or vocabulary.is_framework_receiver(name):
            return None
        for imported in self.resolver.bindings(class_name, binding.value_scope):
            if imported.kind != "import":
                continue
            found = self._foreign(record, imported.node, class_name, "__call__", bound_self=True)
            if found is None:
                # Asked by name first: without summaries, only the names looked up are noted.
                found = self._foreign(record, imported.node, class_name, "forward", bound_self=True)
                if found is not None and not self._foreign_module_class(imported.node, class_name):
                    found = None
            if found is not None:
                return found
        return None

    def _foreign_module_class(self, import_node: cst.CSTNode, local: str) -> bool:
        """Whether the class `local` imports is an `nn.Module` in the summary of its module."""
        found = imported_module(import_node, local) if self.external is not None else None
        if found is None or found[2] is None or self.external is None:
            return False
        module, level, name = found
        return is_module_class(self.external.raw(module, level), name)

    def _instance_method(self, cls: Scope) -> Optional[CodeUnit]:
        """What calling an instance of `cls` (a class of this file) runs: the `__call__` it or a
        base class of the file defines, else, for an `nn.Module`, its `forward`."""
        chain = self.resolver.class_and_bases(cls)
        for wanted in ("__call__", "forward"):
            if wanted == "forward" and not self.is_module_class(cls):
                return None
            for owner in chain:
                for binding in owner.bindings.get(wanted, ()):
                    if binding.kind == "def" and id(binding.node) in self._functions:
                        return self._functions[id(binding.node)]
        return None

    def is_module_class(self, cls: Scope) -> bool:
        """Whether `cls` is an `nn.Module`: it or a base class of this file names `torch.nn.Module`
        (or Lightning's module) among its bases."""
        return any(self._module_base(owner) for owner in self.resolver.class_and_bases(cls))

    def _module_base(self, cls: Scope) -> bool:
        """Whether `cls` names `torch.nn.Module` (or Lightning's module) among its bases."""
        node = cls.node
        if not isinstance(node, cst.ClassDef):
            return False
        for arg in node.bases:
            qualified = self.resolver.qualified(arg.value) or ""
            if qualified in _MODULE_CLASSES or qualified.endswith(".LightningModule"):
                return True
        return False

    def _does_amp_work(self, unit: CodeUnit) -> bool:
        """Whether `unit` runs an AMP event or reads a gradient, itself or in a helper it calls."""
        key = id(unit)
        if key not in self._work:
            self._work[key] = False  # a cycle back here adds nothing
            found = bool(unit.grad_reads)
            for record in unit.calls:
                if found:
                    break
                if not record.immediate:
                    continue
                item = self.classify(record)
                if isinstance(item, AmpEvent):
                    found = True
                elif isinstance(item, HelperCall):
                    found = bool(item.foreign.events) if item.foreign is not None else item.callee is not None and self._does_amp_work(item.callee)
            self._work[key] = found
        return self._work[key]

    def _inherited(self, record: CallRecord, classes: List[Scope], method: str) -> Optional[HelperCall]:
        """`self.step()` in (or `trainer.step()` on) a class of this file whose base another
        linted module exports: that base's method (or one it inherits in turn)."""
        if self.external is None:
            return None
        module_scope = self.index.module_scope
        for cls in classes:
            for owner in self.resolver.class_and_bases(cls):
                for base in owner.bases:
                    if base.rsplit(".", 1)[-1] in self.index.classes:
                        continue  # a class of this file: its methods were looked at
                    head, _, rest = base.partition(".")
                    for binding in self.resolver.bindings(head, module_scope):
                        if binding.kind != "import":
                            continue
                        if rest:  # `class A(trainers.Base)`
                            module, _, name = rest.rpartition(".")
                            found = self._foreign(record, binding.node, head, f"{name}.{method}", module_attribute=True, bound_self=True, submodule=module)
                        else:
                            found = self._foreign(record, binding.node, head, method, bound_self=True)
                        if found is not None:
                            return found
        return None

    def _foreign(
        self,
        record: CallRecord,
        import_node: cst.CSTNode,
        local: str,
        attribute: Optional[str],
        module_attribute: bool = False,
        bound_self: bool = False,
        submodule: str = "",
    ) -> Optional[HelperCall]:
        """A call to a function (or method) another linted module exports; a call to a class
        it exports runs its constructor (`Class.__init__`)."""
        if self.external is None:
            return None
        found = imported_module(import_node, local)
        if found is None:
            return None
        module, level, name = found
        if module_attribute:
            # `import pkg.utils as u; u.f()`, `from pkg import utils; utils.f()`.
            target = module if name is None else (f"{module}.{name}" if module else name)
            if submodule:  # `import pkg as p; class A(p.trainers.Base)`
                target = f"{target}.{submodule}" if target else submodule
            foreign = self.external.module(target, level)
            qualified = attribute or ""
        else:
            foreign = self.external.module(module, level)
            qualified = (name if attribute is None else f"{name}.{attribute}") or ""
        if foreign is None:
            return None
        function = foreign.functions.get(qualified)
        if function is None and not bound_self and "." not in qualified:
            # `ModelEMA(model)`: the class's constructor, its first parameter the new instance.
            function = foreign.functions.get(f"{qualified}.__init__")
            if function is not None:
                return HelperCall(record, None, bound_self=True, foreign=function)
        if function is None:
            return None
        return HelperCall(record, None, bound_self=bound_self or function.method and attribute is not None, foreign=function)


def _on_self(receiver: str, method: str) -> Optional[str]:
    """`self.manual_backward` -> "manual_backward", `self.accelerator.backward` ->
    "accelerator.backward"; None for a call not on `self`."""
    if receiver == "self":
        return method
    if receiver.startswith("self."):
        return f"{receiver[5:]}.{method}"
    return None


def _only_tests_for_none(read: cst.Attribute, statement: cst.CSTNode) -> bool:
    """`if p.grad is not None:`, `p.grad is None`: the scale changes nothing there."""
    for node in iter_tree(statement):
        if isinstance(node, cst.Comparison) and node.left is read:
            return all(isinstance(t.operator, (cst.Is, cst.IsNot)) for t in node.comparisons)
    return False
