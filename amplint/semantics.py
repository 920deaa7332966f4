"""Build a file's AMP facts (`amplint.facts`) from its LibCST tree, in two walks.

The first walk collects declarations: imports, what each name is assigned, which names hold
GradScalers and optimizers (by construction and by use). The second walk, knowing those,
classifies every call that matters to AMP and records where it runs: in which function, under
which autocast region, inside `torch.no_grad()` or not.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple, Union

import libcst as cst

from amplint import torch_api
from amplint.conditions import assumptions, condition
from amplint.facts import (
    UNKNOWN_SCALER,
    AmpCall,
    AutocastRegion,
    CallKind,
    CallSite,
    CodeUnit,
    ModuleFacts,
    ScalerRef,
)
from amplint.names import dotted_name, is_none, names_bound, names_read, source_text
from amplint.torch_api import ImportAliases

# Receivers whose `.backward(loss)` is a framework's, which scales (or manages) the loss itself.
_FRAMEWORK_RECEIVERS = frozenset(
    {
        "self",
        "accelerator",
        "accel",
        "fabric",
        "engine",
        "model_engine",
        "ds_engine",
        "deepspeed",
        "deepspeed_engine",
        "trainer",
        "runner",
        "strategy",
        "booster",
        "learner",
        "model",
    }
)
_FRAMEWORK_FRAGMENTS = ("accelerator", "engine", "fabric", "booster")
# Receivers whose `.clip_grad_norm_()` unscales first (accelerate, Fabric, trainers); FSDP's
# `model.clip_grad_norm_()` does not.
_SELF_UNSCALING_CLIP_FRAGMENTS = ("accelerator", "accel", "fabric", "trainer", "strategy", "engine", "booster")

# `x.step()` on these is a schedule, an EMA or a progress bar, never an optimizer update.
_NOT_OPTIMIZER_FRAGMENTS = ("sched", "scaler", "ema", "swa", "bar", "warmup", "progress", "option", "env")
_OPTIMIZER_NAME = re.compile(r"(^|_)opt($|_|\d|[a-z]$)")
_OPTIMIZER_CLASSES = frozenset(
    {
        "SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "NAdam",
        "RAdam", "LBFGS", "SparseAdam", "ASGD", "Adafactor", "Lion", "LAMB", "Lamb", "LARS",
        "AdamW8bit", "Adam8bit", "PagedAdamW", "PagedAdamW8bit", "FusedAdam", "FusedLAMB",
        "FusedSGD", "ZeroRedundancyOptimizer", "Muon", "Shampoo", "Sophia", "AdaBelief",
    }
)

# What the walk is inside of: ("autocast", AutocastRegion), ("no_grad", None),
# ("loop", None), or ("guard", assumptions) for the branch of an `if`.
_Context = Tuple[str, Any]

_AMP_METHOD_NAMES = frozenset({"backward", "scale", "unscale_", "step", "update", "zero_grad", "clip_grad_norm_"})

Scope = Union[cst.Module, cst.FunctionDef]
_MAX_CONSTANT_DEPTH = 4


def looks_like_optimizer(name: str) -> bool:
    """`optimizer`, `self.opt_g`, `optD`, `d_optim`; not `scheduler`, `ema`, `pbar`, `env`."""
    last = name.rsplit(".", 1)[-1].lower()
    if _named_like_a_non_optimizer(name):
        return False
    return "optim" in last or _OPTIMIZER_NAME.search(last) is not None


def _named_like_a_non_optimizer(name: str) -> bool:
    last = name.rsplit(".", 1)[-1].lower()
    return any(fragment in last for fragment in _NOT_OPTIMIZER_FRAGMENTS)


def is_framework_receiver(name: str) -> bool:
    last = name.rsplit(".", 1)[-1].lower()
    return last in _FRAMEWORK_RECEIVERS or any(f in last for f in _FRAMEWORK_FRAGMENTS)


def _is_framework_backward(receiver: str, call: cst.Call) -> bool:
    """`accelerator.backward(loss)`, fairseq's/apex's `optimizer.backward(loss)`: a method
    that takes the loss. Tensor.backward's only positional argument is a gradient tensor,
    never named like a loss."""
    if is_framework_receiver(receiver) or looks_like_optimizer(receiver):
        return True
    first = call.args[0] if call.args and call.args[0].keyword is None else None
    name = dotted_name(first.value) if first is not None else None
    return name is not None and "loss" in name.rsplit(".", 1)[-1].lower()


def scaler_scaling(expression: cst.CSTNode, scalers: Dict[str, ScalerRef]) -> Optional[str]:
    """Who scales `expression`: the known scaler whose `.scale(...)` it calls, or
    UNKNOWN_SCALER when it goes through a helper named like one (`self.scale_loss(loss)`,
    apex's `amp.scale_loss(...)`) that may well scale; None when nothing does."""
    found: List[str] = []

    class _Finder(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            func = call.func
            name = dotted_name(func) or ""
            if isinstance(func, cst.Attribute) and func.attr.value == "scale" and dotted_name(func.value) in scalers:
                found.append(dotted_name(func.value) or "")
            elif "scale" in name.rsplit(".", 1)[-1].lower():
                found.append(UNKNOWN_SCALER)
            elif isinstance(func, cst.Attribute) and func.attr.value == "scale":
                found.append(UNKNOWN_SCALER)  # `amp["scaler"].scale(loss)`: a scaler we cannot name

    expression.visit(_Finder())
    known = [name for name in found if name != UNKNOWN_SCALER]
    return known[0] if known else (UNKNOWN_SCALER if found else None)


# --------------------------------------------------------------------------- first walk


class _Declarations(cst.CSTVisitor):
    """Imports, assignments per scope, and the evidence that names are scalers or optimizers."""

    def __init__(self) -> None:
        self.aliases = ImportAliases()
        # id(scope node) -> name -> every value assigned to it there (None: not a plain value).
        self.assigned: Dict[int, Dict[str, List[Optional[cst.BaseExpression]]]] = {}
        self.parent_scope: Dict[int, Optional[int]] = {}
        self._scopes: List[int] = []
        # Module-wide view by name, for scalers and optimizers (`self.scaler` spans methods).
        self.values_by_name: Dict[str, List[Optional[cst.BaseExpression]]] = {}
        self.scaler_annotated: List[str] = []
        self.scaler_uses: List[Tuple[str, str, bool]] = []  # (receiver, method, backward-ed)
        self.scaler_step_arguments: List[Tuple[str, str]] = []  # (receiver, first argument)
        self.scaler_like_names: set = set()
        # For following a parameter back to the arguments its callers in this file pass.
        self.parameters: Dict[int, Tuple[str, List[str]]] = {}  # scope -> (function name, params)
        self.calls_by_callee: Dict[str, List[Tuple[cst.Call, int]]] = {}  # callee name -> (call, caller scope)
        self.unscales_in: Dict[str, set] = {}  # function name -> receivers of its .unscale_() calls
        # `self.x` is looked up in the class whose methods assign it.
        self.class_of_scope: Dict[int, int] = {}
        self._classes: List[int] = []
        self._class_body: List[bool] = []  # directly in a class body (not in one of its methods)
        self.attribute_values: Dict[Tuple[int, str], List[Optional[cst.BaseExpression]]] = {}

    # scopes
    def visit_Module(self, node: cst.Module) -> None:
        self._enter(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(id(node))
        self._class_body.append(True)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._classes.pop()
        self._class_body.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._bind(node.name.value, None)
        self._enter(node)
        self._class_body.append(False)
        if self._classes:
            self.class_of_scope[id(node)] = self._classes[-1]
        params = node.params
        self.parameters[id(node)] = (
            node.name.value,
            [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)],
        )
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            self._bind(param.name.value, None)
            if param.annotation is not None and "GradScaler" in source_text(param.annotation.annotation):
                self.scaler_annotated.append(param.name.value)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                self._bind(star.name.value, None)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scopes.pop()
        self._class_body.pop()

    def _enter(self, node: Scope) -> None:
        self.parent_scope[id(node)] = self._scopes[-1] if self._scopes else None
        self.assigned[id(node)] = {}
        self._scopes.append(id(node))

    def _bind(self, name: str, value: Optional[cst.BaseExpression]) -> None:
        if self._class_body and self._class_body[-1] and "." not in name:
            # `class Trainer: scaler = GradScaler(...)` is read as `self.scaler`.
            owner = self._classes[-1]
            self.attribute_values.setdefault((owner, f"self.{name}"), []).append(value)
            self.values_by_name.setdefault(f"self.{name}", []).append(value)
        if self._scopes:
            self.assigned[self._scopes[-1]].setdefault(name, []).append(value)
            owner = self.class_of_scope.get(self._scopes[-1])
            if owner is not None and name.startswith("self."):
                self.attribute_values.setdefault((owner, name), []).append(value)
        self.values_by_name.setdefault(name, []).append(value)

    # imports and assignments
    def visit_Import(self, node: cst.Import) -> None:
        self.aliases.add_import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.aliases.add_import_from(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        single = len(node.targets) == 1 and not isinstance(node.targets[0].target, (cst.Tuple, cst.List))
        for target in node.targets:
            for name in names_bound(target.target):
                self._bind(name, node.value if single else None)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        for name in names_bound(node.target):
            self._bind(name, node.value)
            if "GradScaler" in source_text(node.annotation.annotation):
                self.scaler_annotated.append(name)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        for name in names_bound(node.target):
            self._bind(name, None)

    def visit_For(self, node: cst.For) -> None:
        for name in names_bound(node.target):
            self._bind(name, None)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            for name in names_bound(node.asname.name):
                self._bind(name, None)

    # evidence of use
    def _note_scaler_like(self, name: Optional[str]) -> None:
        """A name like `loss_scaler` used as an object that may scale: called on the loss
        (timm's NativeScaler) or handed to other code. sklearn's `StandardScaler()` built
        and `.fit()` is neither, nor is a `scaler` parameter nothing uses."""
        if name is not None and "scaler" in name.rsplit(".", 1)[-1].lower():
            if name.rsplit(".", 1)[-1] not in torch_api.GRAD_SCALER_BARE_NAMES:
                self.scaler_like_names.add(name)

    def visit_Call(self, node: cst.Call) -> None:
        for arg in node.args:
            name = dotted_name(arg.value)
            self._note_scaler_like(name)
        callee = dotted_name(node.func)
        if callee is not None and self._scopes:
            self.calls_by_callee.setdefault(callee.rsplit(".", 1)[-1], []).append((node, self._scopes[-1]))
            if any(arg.keyword is None for arg in node.args):
                self._note_scaler_like(callee)
        func = node.func
        if not isinstance(func, cst.Attribute):
            return
        method = func.attr.value
        if method == "backward" and isinstance(func.value, cst.Call):
            inner = func.value.func
            if isinstance(inner, cst.Attribute) and inner.attr.value == "scale":
                receiver = dotted_name(inner.value)
                if receiver is not None:
                    self.scaler_uses.append((receiver, "scale", True))
        if method in ("scale", "unscale_", "step"):
            receiver = dotted_name(func.value)
            if receiver is not None:
                self.scaler_uses.append((receiver, method, False))
                if method == "unscale_" and self._scopes and self._scopes[-1] in self.parameters:
                    function = self.parameters[self._scopes[-1]][0]
                    self.unscales_in.setdefault(function, set()).add(receiver)
                if method in ("unscale_", "step") and node.args:
                    argument = dotted_name(node.args[0].value)
                    if argument is not None:
                        self.scaler_step_arguments.append((receiver, argument))

    # derived facts
    def constant(self, name: str, scope: Optional[int]) -> Optional[cst.BaseExpression]:
        """The one value `name` is ever given in the nearest scope that binds it; None if unsure."""
        values = self.values(name, scope)
        return values[0] if len(values) == 1 else None

    def values(self, name: str, scope: Optional[int]) -> List[Optional[cst.BaseExpression]]:
        """Every value `name` is given in the nearest scope that binds it (None: not a plain value)."""
        owner = self.class_of_scope.get(scope) if scope is not None else None
        if owner is not None and (owner, name) in self.attribute_values:
            # `self.amp_ctx` as this class assigns it; one it never assigns may come from a
            # base class, so the whole file's assignments stand in.
            return self.attribute_values[(owner, name)]
        if "." in name:  # `config.dtype`: assignments anywhere in the file
            return self.values_by_name.get(name, [])
        binding = self.binding_scope(name, scope)
        return self.assigned[binding][name] if binding is not None else []

    def binding_scope(self, name: str, scope: Optional[int]) -> Optional[int]:
        while scope is not None:
            if name in self.assigned.get(scope, {}):
                return scope
            scope = self.parent_scope.get(scope)
        return None

    def arguments_for(self, name: str, scope: Optional[int]) -> List[Tuple[cst.BaseExpression, int]]:
        """When `name` is a parameter: what the calls in this file pass for it, with each
        caller's scope. `train(args.device, amp_dtype)` -> (amp_dtype, main's scope)."""
        binding = self.binding_scope(name, scope)
        if binding is None or binding not in self.parameters:
            return []
        function, params = self.parameters[binding]
        index = params.index(name) if name in params else -1
        found = []
        for call, caller in self.calls_by_callee.get(function, []):
            positional = [arg.value for arg in call.args if arg.keyword is None and not arg.star]
            keyword = {arg.keyword.value: arg.value for arg in call.args if arg.keyword is not None}
            # `self.train(x)` or `trainer.train(x)` binds the method's first parameter itself.
            shift = 1 if isinstance(call.func, cst.Attribute) and params[:1] in (["self"], ["cls"]) else 0
            if name in keyword:
                found.append((keyword[name], caller))
            elif 0 <= index - shift < len(positional):
                found.append((positional[index - shift], caller))
        return found

    def scalers(self) -> Dict[str, ScalerRef]:
        enabled_by_name: Dict[str, List[Tuple[Optional[bool], List]]] = {}
        for name, values in self.values_by_name.items():
            for value in values:
                construction = self._scaler_construction(value)
                if construction is not None:
                    enabled_by_name.setdefault(name, []).append(construction)
        for name in self.scaler_annotated:
            enabled_by_name.setdefault(name, []).append((None, []))
        parameter_names = {p for _, params in self.parameters.values() for p in params}
        # `s.unscale_(opt)`, and `s.step(optimizer)`: an optimizer's own step() takes a
        # closure, never an optimizer, so whatever is stepped with one is a scaler.
        used_as_scaler = {r for r, method, _ in self.scaler_uses if method == "unscale_"}
        used_as_scaler |= {r for r, argument in self.scaler_step_arguments if looks_like_optimizer(argument)}
        for receiver, method, backwarded in self.scaler_uses:
            named_scaler = "scaler" in receiver.rsplit(".", 1)[-1].lower()
            if backwarded or receiver in used_as_scaler or named_scaler:
                enabled_by_name.setdefault(receiver, [])
        refs = {}
        for name, constructions in enabled_by_name.items():
            if constructions and name in parameter_names:
                # A parameter can hold any scaler a caller passes: its state is unknown.
                constructions.append((None, []))
            states = {enabled for enabled, _ in constructions}
            enabled: Optional[bool] = states.pop() if len(states) == 1 else None
            if not constructions:
                enabled = None
            requirements = [
                (condition(cst.parse_expression(name)), True),
                (condition(cst.parse_expression(f"{name}.is_enabled()")), True),
            ]
            if len(constructions) == 1:
                requirements.extend(constructions[0][1])
            refs[name] = ScalerRef(name, enabled, tuple(requirements))
        return refs

    def _scaler_construction(self, value: Optional[cst.BaseExpression]) -> Optional[Tuple[Optional[bool], List]]:
        """(enabled, what must hold for it to be live) when `value` builds a GradScaler."""
        if isinstance(value, cst.IfExp):
            for branch, outcome in ((value.body, True), (value.orelse, False)):
                built = self._scaler_construction(branch)
                if built is not None:
                    return built[0], built[1] + assumptions(value.test, outcome)
            return None
        if not isinstance(value, cst.Call) or not self._is_grad_scaler(value.func):
            return None
        for arg in value.args:
            if arg.keyword is not None and arg.keyword.value == "enabled":
                literal = _bool_literal(arg.value)
                if literal is not None:
                    return literal, []
                return None, assumptions(arg.value, True)
        return True, []

    def _is_grad_scaler(self, func: cst.BaseExpression) -> bool:
        qualified = self.aliases.resolve(func)
        if qualified in torch_api.GRAD_SCALER:
            return True
        return qualified is None and isinstance(func, cst.Name) and func.value in torch_api.GRAD_SCALER_BARE_NAMES

    def optimizers(self, scalers: Dict[str, ScalerRef]) -> set:
        found = {argument for receiver, argument in self.scaler_step_arguments if receiver in scalers}
        for name, values in self.values_by_name.items():
            if any(isinstance(v, cst.Call) and self._builds_optimizer(v.func) for v in values):
                found.add(name)
        return found

    def _builds_optimizer(self, func: cst.BaseExpression) -> bool:
        qualified = self.aliases.resolve(func) or ""
        last = (dotted_name(func) or "").rsplit(".", 1)[-1]
        if qualified.startswith(torch_api.OPTIMIZER_MODULE_PREFIXES):
            # Schedulers (lr_scheduler, swa_utils.SWALR) and AveragedModel are not optimizers.
            return last[:1].isupper() and "lr_scheduler" not in qualified and "swa_utils" not in qualified
        return last in _OPTIMIZER_CLASSES or last.lower() in ("create_optimizer", "create_optimizer_v2", "build_optimizer")


# --------------------------------------------------------------------------- second walk


class _Classifier:
    """Says what a call is, given the file's declarations."""

    def __init__(self, decls: _Declarations, scalers: Dict[str, ScalerRef], optimizers: set) -> None:
        self.decls = decls
        self.scalers = scalers
        self.optimizers = optimizers
        # Functions of this file that unscale a known scaler; names the AMP API already
        # gives a meaning are left to it.
        self.unscaling_helpers = {
            function
            for function, receivers in decls.unscales_in.items()
            if receivers & set(scalers) and function not in _AMP_METHOD_NAMES
        }

    def classify(self, node: cst.Call) -> Optional[AmpCall]:
        func = node.func
        qualified = self.decls.aliases.resolve(func)
        if qualified in torch_api.AUTOGRAD_BACKWARD:
            tensor = _argument(node, 0, "tensors")
            return self._backward(node, tensor) if tensor is not None else None
        if qualified in torch_api.CLIP_FUNCTIONS:
            return AmpCall(CallKind.CLIP, node)
        if (dotted_name(func) or "").rsplit(".", 1)[-1] in self.unscaling_helpers:
            # `self.unscale_grads()`, defined in this file around `scaler.unscale_(opt)`.
            return AmpCall(CallKind.UNSCALE, node)
        if not isinstance(func, cst.Attribute):
            return None
        method = func.attr.value
        receiver = dotted_name(func.value)
        if method == "backward":
            if receiver is not None and _is_framework_backward(receiver, node):
                return AmpCall(CallKind.FRAMEWORK_BACKWARD, node, receiver=receiver)
            return self._backward(node, func.value)
        if method == "clip_grad_norm_":
            # FSDP's `model.clip_grad_norm_`; accelerate's unscales before clipping.
            last = (receiver or "").rsplit(".", 1)[-1].lower()
            if any(fragment in last for fragment in _SELF_UNSCALING_CLIP_FRAGMENTS):
                return None
            return AmpCall(CallKind.CLIP, node, receiver=receiver)
        if receiver is None:
            # `optimizers[0].step()`, `opts["main"].step()`
            if method == "step" and isinstance(func.value, cst.Subscript):
                container = dotted_name(func.value.value)
                if container is not None and looks_like_optimizer(container):
                    return AmpCall(CallKind.OPTIMIZER_STEP, node, receiver=source_text(func.value))
            return None
        argument = _argument(node, 0, "optimizer")
        argument_name = dotted_name(argument) if argument is not None else None
        if receiver in self.scalers:
            kind = {
                "scale": CallKind.SCALE,
                "unscale_": CallKind.UNSCALE,
                "step": CallKind.SCALER_STEP,
                "update": CallKind.SCALER_UPDATE,
            }.get(method)
            return AmpCall(kind, node, receiver=receiver, argument=argument_name) if kind else None
        if method == "step" and (receiver in self.optimizers or looks_like_optimizer(receiver)):
            if not _named_like_a_non_optimizer(receiver):
                return AmpCall(CallKind.OPTIMIZER_STEP, node, receiver=receiver)
        if method == "zero_grad":
            return AmpCall(CallKind.ZERO_GRAD, node, receiver=receiver)
        return None

    def _backward(self, node: cst.Call, tensor: cst.BaseExpression) -> AmpCall:
        return AmpCall(
            CallKind.TENSOR_BACKWARD,
            node,
            argument=dotted_name(tensor),
            tensor=tensor,
            scaled_inline_by=scaler_scaling(tensor, self.scalers),
            tensor_reads=frozenset(names_read(tensor)),
        )

class _UnitBuilder(cst.CSTVisitor):
    """Splits the file into code units and records each AMP call with its context."""

    def __init__(self, decls: _Declarations, classifier: _Classifier, facts: ModuleFacts) -> None:
        self.decls = decls
        self.classifier = classifier
        self.facts = facts
        # Per open unit: the unit, its stack of enclosing contexts, its scope id.
        self._frames: List[Tuple[CodeUnit, List[_Context], int]] = []
        self._classes: List[str] = []
        self._with_pushes: List[int] = []
        self._scaler_names = set(classifier.scalers) | facts.other_scaler_names

    # units
    def visit_Module(self, node: cst.Module) -> None:
        self._open_unit(CodeUnit(node, "<module>"), id(node), [])

    def leave_Module(self, original_node: cst.Module) -> None:
        self._frames.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self._classes.append(node.name.value)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._classes.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        name = ".".join([*self._classes, node.name.value])
        unit = CodeUnit(node, name, enclosing=self._frames[-1][0], class_name=self._classes[-1] if self._classes else None)
        stack: List[_Context] = []
        for decorator in node.decorators:
            expression = decorator.decorator
            if self._is_no_grad(expression):
                unit.no_grad = True
            elif isinstance(expression, cst.Call):
                region = self._autocast_region(expression, unit, id(node), under_no_grad=unit.no_grad)
                if region is not None:
                    stack.append(("autocast", region))
        self._open_unit(unit, id(node), stack)

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._frames.pop()

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def _open_unit(self, unit: CodeUnit, scope: int, stack: List[_Context]) -> None:
        unit._module = self.facts
        for kind, region in stack:
            if region is not None:
                unit.regions.append(region)
        self.facts.units.append(unit)
        self._frames.append((unit, stack, scope))

    # contexts
    def visit_With(self, node: cst.With) -> None:
        unit, stack, scope = self._frames[-1]
        pushed = 0
        for item in node.items:
            if self._is_no_grad(item.item):
                stack.append(("no_grad", None))
                pushed += 1
                continue
            region = self._autocast_region(item.item, unit, scope, under_no_grad=self._under_no_grad())
            if region is not None:
                unit.regions.append(region)
                stack.append(("autocast", region))
                pushed += 1
        self._with_pushes.append(pushed)

    def leave_With(self, original_node: cst.With) -> None:
        stack = self._frames[-1][1]
        for _ in range(self._with_pushes.pop()):
            stack.pop()

    def visit_For(self, node: cst.For) -> None:
        self._frames[-1][1].append(("loop", None))

    def leave_For(self, original_node: cst.For) -> None:
        self._frames[-1][1].pop()

    def visit_While(self, node: cst.While) -> None:
        self._frames[-1][1].append(("loop", None))

    def leave_While(self, original_node: cst.While) -> None:
        self._frames[-1][1].pop()

    # calls and assignments
    def visit_Call(self, node: cst.Call) -> None:
        unit = self._frames[-1][0]
        for expression in (node.func, *(arg.value for arg in node.args)):
            name = dotted_name(expression)
            if name in self._scaler_names:
                unit.scalers_used.add(name)
        if isinstance(node.func, cst.Attribute) and dotted_name(node.func.value) in self._scaler_names:
            unit.scalers_used.add(dotted_name(node.func.value) or "")
        call = self.classifier.classify(node)
        if call is None:
            return
        self.facts.calls_by_node[id(node)] = call
        unit, stack, _ = self._frames[-1]
        region, loop_inside = None, False
        for index in range(len(stack) - 1, -1, -1):
            kind, candidate = stack[index]
            if kind == "autocast":
                if candidate is not None and candidate.active and not self._guarded_off(candidate, stack):
                    region = candidate
                    loop_inside = any(k == "loop" for k, _ in stack[index + 1 :])
                break
        unit.calls.append(CallSite(call, unit, region, loop_inside, self._under_no_grad()))

    def _guarded_off(self, region: AutocastRegion, stack: List[_Context]) -> bool:
        """Inside `with autocast(enabled=scaler is not None):`, the `else` of `if scaler is
        not None:` runs with autocast off."""
        guards = {fact for kind, facts in stack if kind == "guard" for fact in facts}
        return any((cond, not value) in guards for cond, value in region.enabled_requires)

    # which branch of an `if` the walk is in
    def visit_If_body(self, node: cst.If) -> None:
        self._frames[-1][1].append(("guard", assumptions(node.test, True)))

    def leave_If_body(self, node: cst.If) -> None:
        self._frames[-1][1].pop()

    def visit_If_orelse(self, node: cst.If) -> None:
        self._frames[-1][1].append(("guard", assumptions(node.test, False)))

    def leave_If_orelse(self, node: cst.If) -> None:
        self._frames[-1][1].pop()

    def visit_Assign(self, node: cst.Assign) -> None:
        targets = [name for t in node.targets for name in names_bound(t.target)]
        self._record_assignment(targets, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._record_assignment(names_bound(node.target), node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        targets = names_bound(node.target)
        self._record_assignment(targets, node.value, extra_reads=targets)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._record_assignment(names_bound(node.asname.name), node.item)

    def _record_assignment(self, targets: Sequence[str], value: cst.CSTNode, extra_reads: Sequence[str] = ()) -> None:
        unit, stack, _ = self._frames[-1]
        unit.assignments.append((frozenset(targets), frozenset([*names_read(value), *extra_reads])))
        for kind, region in stack:
            if kind == "autocast" and region is not None:
                region.assigned.update(targets)

    # helpers
    def _under_no_grad(self) -> bool:
        unit, stack, _ = self._frames[-1]
        return unit.no_grad or any(kind == "no_grad" for kind, _ in stack)

    def _is_no_grad(self, expression: cst.BaseExpression) -> bool:
        func = expression.func if isinstance(expression, cst.Call) else expression
        qualified = self.decls.aliases.resolve(func)
        if qualified in torch_api.NO_GRAD_CONTEXTS:
            return True
        if qualified == "torch.set_grad_enabled" and isinstance(expression, cst.Call) and expression.args:
            return _bool_literal(expression.args[0].value) is False
        return False

    def _autocast_region(
        self, expression: cst.BaseExpression, unit: CodeUnit, scope: int, under_no_grad: bool
    ) -> Optional[AutocastRegion]:
        call = self._autocast_call(expression, scope)
        if call is None:
            return None
        anchor, qualified, positional, keywords = call
        if qualified in torch_api.AUTOCAST:
            names = ("device_type", "dtype", "enabled", "cache_enabled")
            default_device = None
        else:
            names = ("enabled", "dtype", "cache_enabled")
            default_device = torch_api.LEGACY_AUTOCAST_DEVICE[qualified]
        values = dict(zip(names, positional))
        values.update(keywords)
        device = self._string(values.get("device_type"), scope) if "device_type" in values else default_device
        dtype_is_default = values.get("dtype") is None or is_none(values.get("dtype"))
        if dtype_is_default:
            # The default: float16 on CUDA, bfloat16 on CPU; other devices are left unknown.
            default = {"cuda": "float16", "cpu": "bfloat16"}.get(device or "")
            dtypes = frozenset({default}) if default else frozenset()
        else:
            dtypes = self._dtypes(values.get("dtype"), scope)
        return AutocastRegion(
            anchor=anchor,
            unit=unit,
            device=device,
            dtype=next(iter(dtypes)) if len(dtypes) == 1 else None,
            possible_dtypes=dtypes,
            enabled=self._bool(values.get("enabled"), scope),
            enabled_requires=tuple(assumptions(values["enabled"], True)) if "enabled" in values else (),
            cache_enabled=self._bool(values.get("cache_enabled"), scope),
            under_no_grad=under_no_grad,
            dtype_is_default=dtype_is_default,
        )

    def _autocast_call(
        self, expression: cst.BaseExpression, scope: int, depth: int = 0
    ) -> Optional[Tuple[cst.Call, str, List[cst.BaseExpression], Dict[str, cst.BaseExpression]]]:
        """The autocast call behind a `with` item: direct, a context object built earlier
        (`ctx = nullcontext() if cpu else torch.autocast(...)`), or a `functools.partial`."""
        if depth > _MAX_CONSTANT_DEPTH:
            return None
        if isinstance(expression, cst.IfExp):
            return self._autocast_call(expression.body, scope, depth + 1) or self._autocast_call(
                expression.orelse, scope, depth + 1
            )
        if isinstance(expression, cst.Call):
            qualified = self.decls.aliases.resolve(expression.func)
            if qualified in torch_api.AUTOCAST or qualified in torch_api.LEGACY_AUTOCAST_DEVICE:
                positional, keywords = _split_args(expression.args)
                return expression, qualified, positional, keywords
            if qualified in ("functools.partial",) and expression.args:
                inner = self.decls.aliases.resolve(expression.args[0].value)
                if inner in torch_api.AUTOCAST or inner in torch_api.LEGACY_AUTOCAST_DEVICE:
                    positional, keywords = _split_args(expression.args[1:])
                    return expression, inner, positional, keywords
                return None
            # `with amp_ctx():` where `amp_ctx = partial(torch.autocast, ...)`.
            # A context object may be bound on several branches (`partial(torch.autocast, ...)`
            # when AMP is on, `suppress` when off): where any binding is autocast, it may be.
            name = dotted_name(expression.func)
            for bound in self.decls.values(name, scope) if name else ():
                if isinstance(bound, cst.Call) and self.decls.aliases.resolve(bound.func) == "functools.partial":
                    built = self._autocast_call(bound, scope, depth + 1)
                    if built is not None:
                        _, qualified, positional, keywords = built
                        extra_positional, extra_keywords = _split_args(expression.args)
                        return expression, qualified, positional + extra_positional, {**keywords, **extra_keywords}
            return None
        name = dotted_name(expression)
        for bound in self.decls.values(name, scope) if name else ():
            built = self._autocast_call(bound, scope, depth + 1) if bound is not None else None
            if built is not None:
                return built
        return None

    def _resolve(self, value: Optional[cst.BaseExpression], scope: int) -> Optional[cst.BaseExpression]:
        for _ in range(_MAX_CONSTANT_DEPTH):
            if isinstance(value, cst.Name) and value.value in ("True", "False", "None"):
                return value
            name = dotted_name(value) if value is not None else None
            if name is None or self.decls.aliases.resolve(value) is not None:
                return value
            bound = self.decls.constant(name, scope)
            if bound is None:
                return None
            value = bound
        return None

    def _dtypes(self, value: Optional[cst.BaseExpression], scope: int, depth: int = 0) -> FrozenSet[str]:
        """The dtypes `value` can be: one, each branch of a conditional expression
        (`torch.float16 if device == "cuda" else torch.bfloat16`), each value of a dict
        literal it is looked up in, each value a name is assigned or, for a parameter,
        passed by a caller in this file; empty when unknown (a config attribute,
        `getattr(torch, name)`, a parameter no caller here passes)."""
        if value is None or depth > _MAX_CONSTANT_DEPTH:
            return frozenset()
        if isinstance(value, cst.IfExp):
            return self._dtypes(value.body, scope, depth + 1) | self._dtypes(value.orelse, scope, depth + 1)
        if isinstance(value, cst.Subscript):
            # nanoGPT's `{'float32': torch.float32, 'float16': torch.float16, ...}[dtype]`.
            table = value.value if isinstance(value.value, cst.Dict) else self._resolve(value.value, scope)
            if isinstance(table, cst.Dict):
                found: FrozenSet[str] = frozenset()
                for element in table.elements:
                    if isinstance(element, cst.DictElement):
                        found |= self._dtypes(element.value, scope, depth + 1)
                return found
            return frozenset()
        dtype = torch_api.DTYPES.get(self.decls.aliases.resolve(value) or "")
        if dtype is not None:
            return frozenset({dtype})
        # A name set on several branches (`if fp16: dt = torch.float16 else: ...`) can be
        # each; a parameter can be what each caller in this file passes.
        name = dotted_name(value)
        if name is None:
            return frozenset()
        found: FrozenSet[str] = frozenset()
        for bound in self.decls.values(name, scope):
            found |= self._dtypes(bound, scope, depth + 1)
        for argument, caller in self.decls.arguments_for(name, scope):
            found |= self._dtypes(argument, caller, depth + 1)
        return found

    def _string(self, value: Optional[cst.BaseExpression], scope: int) -> Optional[str]:
        value = self._resolve(value, scope)
        if isinstance(value, cst.SimpleString):
            return value.evaluated_value.split(":")[0]
        return None

    def _bool(self, value: Optional[cst.BaseExpression], scope: int) -> Optional[bool]:
        if value is None:
            return True
        return _bool_literal(self._resolve(value, scope))


# --------------------------------------------------------------------------- entry point


def analyze(module: cst.Module) -> ModuleFacts:
    decls = _Declarations()
    module.visit(decls)
    scalers = decls.scalers()
    optimizers = decls.optimizers(scalers)
    facts = ModuleFacts(units=[], scalers=scalers, optimizers=optimizers, calls_by_node={})
    facts.other_scaler_names = {
        name
        for name in decls.scaler_like_names
        if name not in scalers and not any(name.startswith(s + ".") for s in scalers)
    }
    classifier = _Classifier(decls, scalers, optimizers)
    module.visit(_UnitBuilder(decls, classifier, facts))
    _inline_helpers(facts, decls)
    return facts


def _inline_helpers(facts: ModuleFacts, decls: _Declarations) -> None:
    """Let a call to a helper of this file stand for the AMP step inside it, one level deep.

    Training loops often split the step: `_run_step()` does the forward and
    `loss.backward()` while the caller runs `scaler.step()`, or the caller backpropagates
    and `update_optimizer()` steps. Only helpers whose AMP work is unambiguous are inlined
    (see `_helper_summary`); a helper called as `obj.name()` on anything but `self` is not.
    """
    by_name: Dict[str, List[CodeUnit]] = {}
    for unit in facts.units[1:]:
        by_name.setdefault(unit.name.rsplit(".", 1)[-1], []).append(unit)
    units_by_scope = {id(unit.node): unit for unit in facts.units}
    summaries = {
        name: (units[0], summary)
        for name, units in by_name.items()
        if len(units) == 1 and name not in _AMP_METHOD_NAMES
        for summary in [_helper_summary(units[0])]
        if summary is not None
    }
    for name, (helper, summary) in summaries.items():
        for call, scope in decls.calls_by_callee.get(name, []):
            method_call = isinstance(call.func, cst.Attribute)
            if method_call != (helper.class_name is not None) or id(call) in facts.calls_by_node:
                continue
            if method_call and dotted_name(call.func) != f"self.{name}":
                continue
            caller = units_by_scope.get(scope)
            if caller is None or caller is helper:
                continue
            facts.calls_by_node[id(call)] = summary
            caller.calls.append(CallSite(summary, caller, None, False, False))
            caller._paths_done = False  # its paths now run through the helper


def _helper_summary(unit: CodeUnit) -> Optional[AmpCall]:
    """What a call to `unit` amounts to, when that is unambiguous:
    - only backwards, all unscaled, on tensors it computed itself (never on a parameter,
      which a caller may have scaled), after any zero_grad: a HELPER_BACKWARD;
    - a scaler.step with nothing but unscale_/clip/update/zero_grad around it, and no plain
      optimizer step on another path: that SCALER_STEP;
    - nothing but gradient clipping: that CLIP.
    """
    kinds = [site.call.kind for site in unit.calls if site.call.kind is not CallKind.FRAMEWORK_BACKWARD]
    stepping = {CallKind.UNSCALE, CallKind.CLIP, CallKind.SCALER_STEP, CallKind.SCALER_UPDATE, CallKind.ZERO_GRAD}
    if CallKind.SCALER_STEP in kinds and set(kinds) <= stepping:
        return next(site.call for site in unit.calls if site.call.kind is CallKind.SCALER_STEP)
    if kinds and set(kinds) == {CallKind.CLIP}:
        return unit.calls[0].call  # a `clip_gradients(model, max_norm)` helper
    if CallKind.TENSOR_BACKWARD not in kinds or CallKind.ZERO_GRAD in kinds[kinds.index(CallKind.TENSOR_BACKWARD) :]:
        return None
    if not set(kinds) <= {CallKind.TENSOR_BACKWARD, CallKind.ZERO_GRAD}:
        return None
    node = unit.node
    params = set()
    if isinstance(node, cst.FunctionDef):
        params = {p.name.value for p in (*node.params.posonly_params, *node.params.params, *node.params.kwonly_params)}
    backwards = [site.call for site in unit.calls if site.call.kind is CallKind.TENSOR_BACKWARD]
    for path in unit.paths or [()]:
        for step in path:
            if step.call.kind is CallKind.TENSOR_BACKWARD and (step.scaler is not None or step.call.tensor_reads & params):
                return None
    return replace(backwards[0], kind=CallKind.HELPER_BACKWARD) if unit.paths else None


def _split_args(args: Sequence[cst.Arg]) -> Tuple[List[cst.BaseExpression], Dict[str, cst.BaseExpression]]:
    positional: List[cst.BaseExpression] = []
    keywords: Dict[str, cst.BaseExpression] = {}
    for arg in args:
        if arg.star:
            continue
        if arg.keyword is not None:
            keywords[arg.keyword.value] = arg.value
        else:
            positional.append(arg.value)
    return positional, keywords


def _argument(call: cst.Call, index: int, keyword: str) -> Optional[cst.BaseExpression]:
    positional, keywords = _split_args(call.args)
    if keyword in keywords:
        return keywords[keyword]
    return positional[index] if len(positional) > index else None


def _bool_literal(node: Optional[cst.BaseExpression]) -> Optional[bool]:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None
