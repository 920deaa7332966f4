"""Autocast regions: which `with` items and decorators are `torch.autocast`, with what device,
dtype and `enabled`, and which region each call runs in.

A region is found through aliases (`from torch.cuda.amp import autocast as ac`), context
objects built earlier (`ctx = nullcontext() if cpu else torch.autocast(...)`, `self.amp_ctx`
set in `__init__`), `functools.partial(torch.autocast, ...)` and decorators. The arguments of
the autocast call are read in the scope where it is written, so a context built in `__init__`
from its locals resolves there, wherever it is entered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

import libcst as cst

from amplint.semantic.pytorch import api as torch_api, frameworks
from amplint.semantic.conditions import assumptions
from amplint.semantic.index import CallRecord, CodeUnit, Frames, GuardFrame, LoopFrame, ModuleIndex, Scope, WithFrame
from amplint.semantic.types import AutocastRegion
from amplint.semantic.names import dotted_name, is_none, names_bound, roots
from amplint.semantic.resolve import DEFAULT_DTYPE, Resolver, split_args
from amplint.semantic.framework_settings import framework_of, hands_hooks_away, precisions
from amplint.semantic.walk import iter_tree

_MAX_DEPTH = 4
_AutocastCall = Tuple[cst.Call, str, List[cst.BaseExpression], Dict[str, cst.BaseExpression], Scope]


@dataclass(frozen=True)
class CallContext:
    """Where a call runs, as far as AMP cares."""

    region: Optional[AutocastRegion]  # the enabled autocast region, if any
    loop_inside_region: bool  # a for/while between the region's start and the call
    under_no_grad: bool
    autocast_off: bool = False  # a disabled autocast region switches it off here


class Regions:
    def __init__(self, index: ModuleIndex, resolver: Resolver) -> None:
        self.index = index
        self.resolver = resolver
        self._by_item: Dict[int, Optional[AutocastRegion]] = {}
        self._no_grad: Dict[int, bool] = {}
        self._contexts: Dict[int, CallContext] = {}
        self.unit_regions: Dict[int, List[AutocastRegion]] = {}  # id(unit) -> its decorator regions
        self.unit_no_grad: Dict[int, bool] = {}
        self.all: List[AutocastRegion] = []
        # id(unit) -> the autocast a framework runs that method under (`_hooks`). Not in `all`:
        # no autocast call of the file opens them, and what runs in the hook besides its ops
        # (a backward, a step) is where the framework means it to run.
        self.hook_regions: Dict[int, AutocastRegion] = {}
        for unit in index.units:
            self._unit(unit)
        self._hooks()
        for unit, frame, frames in index.withs:
            region = self.region_of(frame, unit)
            if region is not None:
                region.under_no_grad = self.context_of(unit, frames).under_no_grad

    # what a call runs under
    def context(self, record: CallRecord) -> CallContext:
        key = id(record.node)
        found = self._contexts.get(key)
        if found is None:
            found = self._contexts[key] = self.context_of(record.unit, record.frames)
        return found

    def context_of(self, unit: CodeUnit, frames: Frames) -> CallContext:
        stack: List[object] = [("autocast", r) for r in self.unit_regions.get(id(unit), ())]
        no_grad = self.unit_no_grad.get(id(unit), False)
        for frame in frames:
            if isinstance(frame, WithFrame):
                if self.is_no_grad(frame.item):
                    no_grad = True
                    continue
                region = self.region_of(frame, unit)
                if region is not None:
                    stack.append(("autocast", region))
            elif isinstance(frame, LoopFrame):
                stack.append(("loop", None))
            elif isinstance(frame, GuardFrame):
                stack.append(("guard", frame))
        for index in range(len(stack) - 1, -1, -1):
            kind, candidate = stack[index]  # type: ignore[misc]
            if kind != "autocast":
                continue
            if candidate.active and not _guarded_off(candidate, stack):
                loop_inside = any(k == "loop" for k, _ in stack[index + 1 :])  # type: ignore[misc]
                return CallContext(candidate, loop_inside, no_grad)
            # A nested disabled region (or the branch where it is off) switches autocast off.
            return CallContext(None, False, no_grad, autocast_off=True)
        return CallContext(None, False, no_grad)

    def region_of(self, frame: WithFrame, unit: CodeUnit) -> Optional[AutocastRegion]:
        key = id(frame.item)
        if key not in self._by_item:
            region = self._region(frame.item, unit, frame.scope, under_no_grad=False)
            self._by_item[key] = region
            if region is not None:
                region.body = frame.statement.body
                region.assigned = set(assigned_in(frame.statement.body))
                self.all.append(region)
        return self._by_item[key]

    def is_no_grad(self, expression: cst.BaseExpression) -> bool:
        key = id(expression)
        if key not in self._no_grad:
            self._no_grad[key] = self._is_no_grad(expression)
        return self._no_grad[key]

    def _is_no_grad(self, expression: cst.BaseExpression) -> bool:
        func = expression.func if isinstance(expression, cst.Call) else expression
        qualified = self.resolver.qualified(func)
        if qualified in torch_api.NO_GRAD_CONTEXTS:
            return True
        if qualified == "torch.set_grad_enabled" and isinstance(expression, cst.Call) and expression.args:
            return self.resolver.boolean(expression.args[0].value, self.index.module_scope) is False
        return False

    # units: decorators
    def _unit(self, unit: CodeUnit) -> None:
        regions: List[AutocastRegion] = []
        no_grad = False
        scope = unit.scope.parent or unit.scope
        for decorator in unit.decorators:
            if self.is_no_grad(decorator):
                no_grad = True
            elif isinstance(decorator, cst.Call):
                region = self._region(decorator, unit, scope, under_no_grad=no_grad)
                if region is not None:
                    region.assigned = set(assigned_in(unit.node.body))
                    regions.append(region)
                    self.all.append(region)
        self.unit_regions[id(unit)] = regions
        self.unit_no_grad[id(unit)] = no_grad

    def _named_autocast_off(self, expression: cst.BaseExpression, unit: CodeUnit, scope: Scope, under_no_grad: bool) -> Optional[AutocastRegion]:
        """Autocast switched off by a call that is not `torch.autocast` itself: a wrapper of it
        called with `enabled=False` (transformers' `maybe_autocast(device_type,
        enabled=False)` around every rotary embedding), by its name and that literal, though
        what it wraps is out of sight; and `custom_fwd(cast_inputs=...)` on a function, which
        runs it with autocast disabled (its inputs cast to that dtype first)."""
        if not isinstance(expression, cst.Call):
            return None
        name = (dotted_name(expression.func) or "").rsplit(".", 1)[-1]
        keywords = split_args(expression.args)[1]
        if name.endswith("autocast"):
            if "enabled" not in keywords or self.resolver.boolean(keywords["enabled"], scope) is not False:
                return None
        elif name != "custom_fwd" or "cast_inputs" not in keywords or is_none(keywords["cast_inputs"]):
            return None
        return _framework_autocast(expression, unit, scope, frozenset(), False, under_no_grad=under_no_grad)

    # hooks a framework runs under its own autocast
    def _hooks(self) -> None:
        """The methods of the file's classes that a framework runs inside its own autocast
        (`frameworks.Framework.autocast_hooks`: a LightningModule's `training_step` under
        `Trainer(precision="16-mixed")`): each a region over its whole body, in the precision
        of the framework objects the file builds. Only where that precision is known: a
        Trainer built in another module, or whose precision the file does not resolve
        (`precision=cfg.precision`, no `precision=`), leaves no region."""
        candidates: List[Tuple[CodeUnit, frameworks.Framework]] = []
        for unit in self.index.units:
            owner = unit.scope.class_scope if not unit.is_module else None
            if owner is None or not owner.bases:
                continue
            name = unit.node.name.value  # type: ignore[union-attr]
            bases = {base.rsplit(".", 1)[-1] for base in owner.bases}
            for framework in frameworks.CLASS_FRAMEWORKS:
                if name in framework.autocast_hooks and bases & framework.module_bases:
                    candidates.append((unit, framework))
        settings: Dict[str, Optional[Tuple[cst.Call, Scope, FrozenSet[str], Optional[bool]]]] = {}
        for unit, framework in candidates:
            if framework.name not in settings:
                settings[framework.name] = self._hook_precision(framework)
            found = settings[framework.name]
            if found is None:
                continue
            anchor, where, dtypes, enabled = found
            self.hook_regions[id(unit)] = _framework_autocast(
                anchor,
                unit,
                where,
                dtypes,
                enabled,
                under_no_grad=False,
                framework=framework.name,
                hook=unit.node.name.value,  # type: ignore[union-attr]
                assigned=set(assigned_in(unit.node.body)),
            )

    def _hook_precision(self, framework: frameworks.Framework) -> Optional[Tuple[cst.Call, Scope, FrozenSet[str], Optional[bool]]]:
        """The framework objects the file builds (`L.Trainer(...)`): the first, where its
        call is written, the dtypes their autocast may run in and whether it is surely on
        (None: some precision is full, `"16-mixed" if args.amp else "32"`). None when the
        file builds none, when a precision is unknown, when every one is full precision, or
        when one of several may be (`Trainer(precision="32-true").fit(GAN())` beside a
        mixed-precision one: which module each trains is not followed)."""
        built = [(r.node, r.unit.scope) for r in self.index.calls if framework_of(r.node, self.resolver) is framework]
        if not built:
            return None
        values: Set[str] = set()
        for call, where in built:
            found, known = precisions(call, framework, where, self.resolver)
            if not known or hands_hooks_away(call, framework, where, self.resolver):
                return None
            if len(built) > 1 and found & frameworks.FULL_PRECISIONS:
                return None  # one of several may train in full precision: which module it fits is not followed
            values |= found
        off = values & frameworks.FULL_PRECISIONS
        if off == values or any(v not in off and frameworks.autocast_dtype(v) is None for v in values):
            return None  # full precision only, or a precision that is no autocast ("16-true")
        dtypes = frozenset(d for d in map(frameworks.autocast_dtype, values - off) if d is not None)
        return built[0][0], built[0][1], dtypes, None if off else True

    # one autocast call
    def _region(self, expression: cst.BaseExpression, unit: CodeUnit, scope: Scope, under_no_grad: bool) -> Optional[AutocastRegion]:
        if isinstance(expression, cst.Call):
            region = self._framework_region(expression, unit, scope, under_no_grad)
            if region is not None:
                return region
        found = self._autocast_call(expression, scope)
        if found is None:
            return self._named_autocast_off(expression, unit, scope, under_no_grad)
        anchor, qualified, positional, keywords, where = found
        if qualified in torch_api.AUTOCAST:
            names: Tuple[str, ...] = ("device_type", "dtype", "enabled", "cache_enabled")
            default_devices: FrozenSet[str] = frozenset()
            legacy = None
        else:
            names = ("enabled", "dtype", "cache_enabled")
            default_devices = frozenset({torch_api.LEGACY_AUTOCAST_DEVICE[qualified]})
            legacy = qualified
        values = dict(zip(names, positional))
        values.update(keywords)
        devices = self.resolver.devices(values["device_type"], where) if "device_type" in values else default_devices
        dtype_is_default = values.get("dtype") is None or is_none(values.get("dtype"))
        if dtype_is_default:
            # The default: float16 on CUDA, bfloat16 on CPU; other devices are left unknown.
            dtypes = frozenset(DEFAULT_DTYPE[d] for d in devices if d in DEFAULT_DTYPE)
            if any(d not in DEFAULT_DTYPE for d in devices):
                dtypes = frozenset()  # one of the devices has a default we do not know
        else:
            dtypes = self.resolver.dtypes(values.get("dtype"), where)
        region = AutocastRegion(
            anchor=anchor,
            unit=unit,
            scope=where,
            device=next(iter(devices)) if len(devices) == 1 else None,
            possible_devices=devices,
            dtype=next(iter(dtypes)) if len(dtypes) == 1 else None,
            possible_dtypes=dtypes,
            enabled=self.resolver.boolean(values.get("enabled"), where),
            enabled_requires=tuple(assumptions(values["enabled"], True)) if "enabled" in values else (),
            enabled_expression=values.get("enabled"),
            cache_enabled=self.resolver.boolean(values.get("cache_enabled"), where),
            under_no_grad=under_no_grad,
            dtype_is_default=dtype_is_default,
            legacy=legacy,
        )
        return region

    def _framework_region(self, call: cst.Call, unit: CodeUnit, scope: Scope, under_no_grad: bool) -> Optional[AutocastRegion]:
        """`with accelerator.autocast():`: autocast in the precision of the framework object,
        on its device. The object is the `Accelerator(...)`/`Fabric(...)` the receiver is
        built from; a receiver named like one (`self.accelerator` set elsewhere) is one whose
        precision is unknown. Where any precision may be "no", the region may be off; where
        the precision is not all known, so is its dtype (empty)."""
        func = call.func
        if not isinstance(func, cst.Attribute):
            return None
        receiver = dotted_name(func.value)
        method = func.attr.value
        if receiver is None or not any(method in f.autocast_methods for f in frameworks.OBJECT_FRAMEWORKS):
            return None
        built: List[Tuple[cst.Call, frameworks.Framework, Scope]] = []
        unknown = False
        other_object = False  # built by a call that is no framework's: `MyAccelerator()`
        for bound, where in self.resolver.values(receiver, scope):
            framework = framework_of(bound, self.resolver) if isinstance(bound, cst.Call) else None
            if framework is None or method not in framework.autocast_methods:
                unknown = True
                other_object = other_object or isinstance(bound, cst.Call)
            else:
                built.append((bound, framework, where))
        if not built:
            if other_object:
                return None
            last = receiver.rsplit(".", 1)[-1].lower()
            named = [f for f in frameworks.OBJECT_FRAMEWORKS if method in f.autocast_methods and f.receiver_fragment in last]
            if not named:
                return None
            name = named[0].name
        else:
            name = built[0][1].name
        values: Set[str] = set()
        complete = not unknown and bool(built)
        for construction, framework, where in built:
            found, known = precisions(construction, framework, where, self.resolver)
            values |= found
            complete = complete and known
        off = values & frameworks.FULL_PRECISIONS
        # A value that is neither off nor a known dtype (accelerate's "fp8") leaves the dtype unknown.
        complete = complete and all(v in off or frameworks.autocast_dtype(v) for v in values)
        dtypes = frozenset(d for d in map(frameworks.autocast_dtype, values) if d is not None) if complete else frozenset()
        enabled: Optional[bool] = None
        if complete:
            enabled = False if off == values else (True if not off else None)
        return _framework_autocast(call, unit, scope, dtypes, enabled, under_no_grad=under_no_grad, framework=name)

    def _autocast_call(self, expression: cst.BaseExpression, scope: Scope, depth: int = 0) -> Optional[_AutocastCall]:
        """The autocast call behind a `with` item: direct, a context object built earlier
        (`ctx = nullcontext() if cpu else torch.autocast(...)`), or a `functools.partial`."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expression, cst.IfExp):
            return self._autocast_call(expression.body, scope, depth + 1) or self._autocast_call(
                expression.orelse, scope, depth + 1
            )
        if isinstance(expression, cst.Call):
            qualified = self.resolver.qualified(expression.func)
            if qualified in torch_api.AUTOCAST or qualified in torch_api.LEGACY_AUTOCAST_DEVICE:
                positional, keywords = split_args(expression.args)
                return expression, qualified, positional, keywords, scope
            if qualified == "functools.partial" and expression.args:
                inner = self.resolver.qualified(expression.args[0].value)
                if inner in torch_api.AUTOCAST or inner in torch_api.LEGACY_AUTOCAST_DEVICE:
                    positional, keywords = split_args(expression.args[1:])
                    return expression, inner, positional, keywords, scope
                return None
            # `with amp_ctx():` where `amp_ctx = partial(torch.autocast, ...)`. A context
            # object may be bound on several branches (`partial(torch.autocast, ...)` when AMP
            # is on, `suppress` when off): where any binding is autocast, it may be.
            name = dotted_name(expression.func)
            for bound, where in self.resolver.values(name, scope) if name else ():
                if isinstance(bound, cst.Call) and self.resolver.qualified(bound.func) == "functools.partial":
                    built = self._autocast_call(bound, where, depth + 1)
                    if built is not None:
                        _, qualified, positional, keywords, built_scope = built
                        extra_positional, extra_keywords = split_args(expression.args)
                        # The call's own arguments are read here; the partial's where it was built.
                        merged = {**keywords, **extra_keywords}
                        return expression, qualified, positional + extra_positional, merged, built_scope
            return None
        name = dotted_name(expression)
        for bound, where in self.resolver.values(name, scope) if name else ():
            built = self._autocast_call(bound, where, depth + 1) if bound is not None else None
            if built is not None:
                return built
        return None


def _guarded_off(region: AutocastRegion, stack: List[object]) -> bool:
    """Inside `with autocast(enabled=scaler is not None):`, the `else` of `if scaler is not
    None:` runs with autocast off."""
    if not region.enabled_requires:
        return False
    guards = set()
    for kind, frame in stack:  # type: ignore[misc]
        if kind == "guard":
            guards.update(assumptions(frame.test, frame.outcome))
    return any((cond, not value) in guards for cond, value in region.enabled_requires)


def assigned_in(body: cst.CSTNode) -> FrozenSet[str]:
    """The variables a block binds (assignment, loop and `with` targets, walruses), as roots."""
    bound: List[str] = []

    def descend(node: cst.CSTNode) -> bool:
        return not isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda))

    for node in iter_tree(body, descend):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                bound.extend(names_bound(target.target))
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For)):
            bound.extend(names_bound(node.target))
        elif isinstance(node, cst.NamedExpr):
            bound.extend(names_bound(node.target))
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            bound.extend(names_bound(node.asname.name))
    return frozenset(roots(bound))


def callers_autocast(forward: CodeUnit, owner: Scope) -> AutocastRegion:
    """The autocast an `nn.Module`'s `forward` may run under: its caller's, on a device and in
    a low-precision dtype the file does not show."""
    return _framework_autocast(forward.node, forward, forward.scope, frozenset({"float16", "bfloat16"}), None, under_no_grad=False, caller=owner.name)


def _framework_autocast(anchor: cst.CSTNode, unit: CodeUnit, scope: Scope, dtypes: FrozenSet[str], enabled: Optional[bool], **fields: Any) -> AutocastRegion:
    """The autocast a framework object opens (`accelerator.autocast()`, a Trainer around its
    hooks), or a wrapper of autocast opens: on a device it picks (unknown), in one of
    `dtypes`."""
    return AutocastRegion(
        anchor=anchor,
        unit=unit,
        scope=scope,
        device=None,
        possible_devices=frozenset(),
        dtype=next(iter(dtypes)) if len(dtypes) == 1 else None,
        possible_dtypes=dtypes,
        enabled=enabled,
        cache_enabled=None,
        **fields,
    )
