"""What autocast does to the expressions evaluated under it (a fact family: `RegionOps`).

Autocast does not change what a tensor is; it changes the dtype each eligible op runs in. The
policy of each op is data, in `amplint.semantic.pytorch.autocast_ops`:

- lower precision: matrix products and convolutions run in the region's dtype, *whatever the
  dtype of their inputs*; a float32 input is cast down (`.float()` before them is undone);
- float32 (CUDA): `log`, `log1p`, `log2`, `log10`, `exp`, `softmax`, `log_softmax`, `sum`,
  `pow`, the losses ...; on CPU only a list of losses, linear algebra and FFTs (not `log`, not
  `softmax`: on CPU they run in their input's dtype, measured on torch 2.13);
- banned (CUDA): `binary_cross_entropy` (and `nn.BCELoss`) raise inside an enabled region;
  on CPU it is on the float32 list and runs;
- everything unlisted (`sigmoid`, `1 - p`, `+`, `clamp`) runs in its input's dtype, so
  downstream of a low-precision op it runs in low precision too.

`RegionOps` finds the ops evaluated inside each enabled autocast region (written in
it, or in a function of the file called from inside it, transitively, unless that function
switches autocast off itself), and those a module's `forward` evaluates under its caller's
autocast. Its parts, each in its module: naming the ops (`torch_ops`: `torch.matmul`,
`x.mm(y)`, `a @ b`, `self.fc(x)` for `self.fc = nn.Linear(...)`), and two questions about
their inputs: is this an explicit float32 cast (`float32_casts`, seen through views and
straight-line assignments: `straight_line`), and is this a probability that saturates in low
precision (`probabilities`: a sigmoid, `1 - sigmoid`, a softmax, with the epsilon guards
around it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Set, Tuple, Union

import libcst as cst

from amplint.analyses.float32_casts import Float32Casts
from amplint.analyses.probabilities import Probabilities, Probability
from amplint.analyses.straight_line import StraightLineValues
from amplint.analyses.torch_ops import TorchOp, TorchOps
from amplint.semantic import (
    Analysis,
    AutocastRegion,
    CallRecord,
    CodeUnit,
    ProductRecord,
    Scope,
    SemanticModel,
    WithFrame,
    callers_autocast,
    dotted_name,
    source_text,
)
from amplint.semantic.pytorch.autocast_ops import autocast_policy


def region_devices(region: AutocastRegion) -> FrozenSet[str]:
    """The devices a region may run on; CUDA or CPU when the code does not say."""
    return region.possible_devices or frozenset({"cuda", "cpu"})


def region_words(region: AutocastRegion) -> str:
    """How a message names a region: its autocast call, or the hook a framework runs under
    its own autocast and the call that sets that framework's precision."""
    if region.caller:
        return f"`{region.caller}.forward`, which runs under its caller's autocast"
    if region.hook:
        return f"`{region.hook}`, which `{source_text(region.anchor)}` runs under autocast"
    return f"`{source_text(region.anchor)}`"


@dataclass(frozen=True, eq=False)
class RegionOp:
    """An op evaluated inside an enabled autocast region."""

    op: TorchOp
    unit: CodeUnit  # the unit whose code contains it
    region: AutocastRegion
    # The calls from the region's unit down to the helper that contains the op; empty when
    # the op is written inside the region.
    via: Tuple[cst.Call, ...] = ()

    @property
    def node(self) -> Union[cst.Call, cst.BaseExpression]:
        return self.op.node

    def policies(self) -> FrozenSet[Optional[str]]:
        """What autocast does to the op on each device the region may run on."""
        return frozenset(autocast_policy(self.op.name, device) for device in region_devices(self.region))


_MAX_DEPTH = 4
# nn.Module methods that return the module itself.
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "train", "eval", "requires_grad_"})
# Decorators that leave a function's autocast as its caller's.
_PLAIN_DECORATORS = frozenset(
    {"staticmethod", "classmethod", "property", "cached_property", "wraps", "override", "no_grad", "inference_mode",
     "enable_grad", "compile", "script", "ignore", "unused", "export", "lru_cache", "cache", "abstractmethod"}
)


class RegionOps(Analysis):
    """The ops under autocast and what their inputs are: `model.facts(RegionOps)`."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        self._ops: Optional[List[RegionOp]] = None
        self._functions: Optional[Dict[int, CodeUnit]] = None
        self._in_region: Optional[Set[int]] = None
        self._callers: Optional[List[RegionOp]] = None
        self._reached: List[Tuple[CodeUnit, AutocastRegion, Tuple[cst.Call, ...]]] = []
        self.values = values = StraightLineValues()
        self.torch_ops = TorchOps(model)
        self.casts = Float32Casts(model, values)
        self.probabilities = Probabilities(model, self.torch_ops, self.casts, values)

    # ---------------------------------------------------------------- ops under autocast
    def ops_in_regions(self) -> List[RegionOp]:
        """Every known op evaluated inside an enabled autocast region, once each: written in
        the region first, then in the file's functions called from inside it (through helpers
        that do not switch autocast off), in source order."""
        if self._ops is not None:
            return self._ops
        found: List[RegionOp] = []
        seen: Set[Tuple[int, int]] = set()
        hooks = self.model.regions.hook_regions
        if not hooks and not any(region.active for region in self.model.autocast_regions):
            self._ops = found
            return found
        # (helper, the region it is called under, the calls on the way, the helpers on the way)
        pending: List[Tuple[CodeUnit, AutocastRegion, Tuple[cst.Call, ...], Tuple[CodeUnit, ...]]] = []
        for unit in self.model.units:
            hook = hooks.get(id(unit))  # a method a framework runs under its own autocast
            for record in self._records(unit):
                context = self._context(record)
                region = context.region
                if region is None and hook is not None and not context.autocast_off:
                    region = hook  # no region of its own inside: the framework's
                if region is None:
                    continue
                self._add(found, seen, record, unit, region, ())
                callee = self.callee(record)
                if callee is not None and callee is not unit:
                    pending.append((callee, region, (record.node,), (unit, callee)))  # type: ignore[arg-type]
        while pending:
            unit, region, via, chain = pending.pop(0)
            self._reached.append((unit, region, via))
            for record in self._records(unit):
                context = self._context(record)
                if context.region is not None or context.autocast_off:
                    continue  # its own region (found above), or autocast switched off there
                self._add(found, seen, record, unit, region, via)
                callee = self.callee(record)
                if callee is not None and len(via) < _MAX_DEPTH and all(callee is not u for u in chain):
                    pending.append((callee, region, via + (record.node,), chain + (callee,)))  # type: ignore[operator]
        self._ops = found
        return found

    def called_in_regions(self) -> List[Tuple[CodeUnit, AutocastRegion, Tuple[cst.Call, ...]]]:
        """The file's functions that run whole inside an enabled region, as `ops_in_regions`
        follows them: each with the region it is called under and the calls on the way (from
        the region's unit down to it), once per way it is reached. Their own regions and the
        code where they switch autocast off are theirs, not the caller's."""
        self.ops_in_regions()
        return self._reached

    def ops_under_callers_autocast(self) -> List[RegionOp]:
        """The known ops an `nn.Module`'s `forward` evaluates where no region of the file
        reaches them, itself or in the file's functions it calls: they run under whatever
        autocast the module's caller has on, and mixed-precision training and inference call
        their model under one. Left out: what the file's own regions reach (`ops_in_regions`),
        code under autocast switched off (in the forward, on the way, or around a call of the
        module or helper that the file makes), and a hook a framework already runs under its
        own autocast. Each op once, the forwards' own first, in source order."""
        if self._callers is not None:
            return self._callers
        found: List[RegionOp] = []
        seen: Set[Tuple[int, int]] = set()
        guarded = self._called_with_autocast_off()
        pending: List[Tuple[CodeUnit, AutocastRegion, Tuple[cst.Call, ...], Tuple[CodeUnit, ...]]] = []
        for unit in self.model.units:
            owner = unit.scope.class_scope if not unit.is_module else None
            if owner is None or unit.node.name.value != "forward" or id(unit) in guarded or self.may_switch_autocast(unit):  # type: ignore[union-attr]
                continue
            if id(unit) in self.model.regions.hook_regions or not self.model.classifier.is_module_class(owner):
                continue
            pending.append((unit, callers_autocast(unit, owner), (), (unit,)))
        reached = {id(op.node) for op in self.ops_in_regions()}
        while pending:
            unit, region, via, chain = pending.pop(0)
            for record in self._records(unit):
                context = self._context(record)
                if context.region is not None or context.autocast_off or id(record.node) in reached or self.in_unknown_context(record):
                    continue
                reached.add(id(record.node))
                self._add(found, seen, record, unit, region, via)
                callee = self.callee(record)
                if callee is None or id(callee) in guarded or self.may_switch_autocast(callee):
                    continue
                if len(via) < _MAX_DEPTH and all(callee is not u for u in chain):
                    pending.append((callee, region, via + (record.node,), chain + (callee,)))  # type: ignore[operator]
        self._callers = found
        return found

    def in_unknown_context(self, record: Union[CallRecord, ProductRecord]) -> bool:
        """Inside a `with` whose item is neither an autocast nor `no_grad`: a context manager of
        the file's (`with fp32():` over `torch.autocast(..., enabled=False)`) or anyone's may
        switch autocast off, and no caller's autocast is guessed through it."""
        regions = self.model.regions
        return any(
            isinstance(frame, WithFrame) and regions.region_of(frame, record.unit) is None and not regions.is_no_grad(frame.item)
            for frame in record.frames
        )

    def may_switch_autocast(self, unit: CodeUnit) -> bool:
        """A function whose own code may run with autocast off whatever its caller has on: one
        decorated by anything but the plain decorators (`custom_fwd(cast_inputs=...)` under
        another name), or one that asks `torch.is_autocast_enabled()`."""
        for decorator in getattr(unit.node, "decorators", ()):
            expression = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
            if (dotted_name(expression) or "").rsplit(".", 1)[-1] not in _PLAIN_DECORATORS:
                return True
        return any((dotted_name(record.node.func) or "").endswith("is_autocast_enabled") for record in unit.calls)

    def _called_with_autocast_off(self) -> Set[int]:
        """The file's functions it calls somewhere under autocast switched off
        (`with torch.autocast("cuda", enabled=False): freqs = self.rotary(pos)`)."""
        found: Set[int] = set()
        for unit in self.model.units:
            for record in unit.calls:
                if record.immediate and self.model.regions.context(record).autocast_off:
                    callee = self.callee(record)
                    if callee is not None:
                        found.add(id(callee))
        return found

    def runs_in_region(self, node: cst.CSTNode) -> bool:
        """Whether an op is evaluated inside an enabled autocast region (see `ops_in_regions`)."""
        if self._in_region is None:
            self._in_region = {id(op.node) for op in self.ops_in_regions()}
        return id(node) in self._in_region

    def _records(self, unit: CodeUnit) -> List[Union[CallRecord, ProductRecord]]:
        records: List[Union[CallRecord, ProductRecord]] = [r for r in unit.calls if r.immediate]
        records.extend(unit.products)
        return records

    def _context(self, record: Union[CallRecord, ProductRecord]):
        if isinstance(record, CallRecord):
            return self.model.regions.context(record)
        return self.model.regions.context_of(record.unit, record.frames)

    def callee(self, record: Union[CallRecord, ProductRecord]) -> Optional[CodeUnit]:
        """The function of this file a call runs: a helper (`scores(q, k)`, `self._attend(x)`),
        or the `forward` of a module whose class the file defines (`self.block(x)` with
        `self.block = Block(...)`)."""
        if not isinstance(record, CallRecord):
            return None
        from amplint.semantic import HelperCall

        item = self.model.classify(record)
        if isinstance(item, HelperCall):
            return item.callee
        name = dotted_name(record.node.func)
        if name == "self":
            # `self(x)` in a module's method (a LightningModule's `training_step`): its `forward`.
            owner = self.model.resolver.owning_class(record.unit.scope)
            return self._forward(owner) if owner is not None else None
        if name is None or name == "super":
            return None
        owners = set()
        for value, _ in self.model.resolver.values(name, record.unit.scope):
            # `Net(...).to(device)`, `.cuda()`, `.train()` return the module itself.
            while (
                isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and value.func.attr.value in _RETURNS_SELF
            ):
                if dotted_name(value.func.value) == name:
                    value = None  # `model = model.to(device)`: the same object, bound elsewhere
                    break
                value = value.func.value
            if value is None:
                continue
            if not isinstance(value, cst.Call) or dotted_name(value.func) not in self.model.index.classes:
                return None
            owners.add(dotted_name(value.func))
        if len(owners) != 1:
            return None
        return self._forward(self.model.index.classes[owners.pop()])

    def _forward(self, owner: Scope, depth: int = 0) -> Optional[CodeUnit]:
        """A class's `forward`, its own or a base class's of this file."""
        if depth > _MAX_DEPTH:
            return None
        if self._functions is None:
            self._functions = {id(u.node): u for u in self.model.units if not u.is_module}
        for binding in owner.bindings.get("forward", ()):
            if binding.kind == "def" and id(binding.node) in self._functions:
                return self._functions[id(binding.node)]
        for base in owner.bases:
            parent = self.model.index.classes.get(base.rsplit(".", 1)[-1])
            if parent is not None and parent is not owner:
                found = self._forward(parent, depth + 1)
                if found is not None:
                    return found
        return None

    def _add(self, found, seen, record, unit, region, via) -> None:
        # Once per op and region: a helper called under a float16 and a bfloat16 region runs in both.
        key = (id(record.node), id(region))
        if key in seen:
            return
        op = self.torch_ops.torch_op(record.node, unit)
        if op is not None:
            seen.add(key)
            found.append(RegionOp(op, unit, region, via))

    # ---------------------------------------------------------------- what their inputs are
    def float32_cast(self, expression: cst.BaseExpression, unit: CodeUnit) -> Optional[cst.Call]:
        """`Float32Casts.float32_cast`."""
        return self.casts.float32_cast(expression, unit)

    def evidently_float32(self, expression: cst.BaseExpression, unit: CodeUnit) -> bool:
        """`Float32Casts.evidently_float32`."""
        return self.casts.evidently_float32(expression, unit)

    def probability(self, expression: cst.BaseExpression, unit: CodeUnit, op: str = "log") -> Optional[Probability]:
        """`Probabilities.probability`."""
        return self.probabilities.probability(expression, unit, op)


__all__ = ["RegionOp", "RegionOps", "region_devices", "region_words"]
