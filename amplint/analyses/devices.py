"""Where code places its tensors and modules, and what an autocast region is gated on.

- **Placements.** `.to(device)`, `.to(device=...)`, `.to(device, dtype)`, `.cuda()` and
  `device=` keyword arguments (`torch.randn(..., device=device)`), each with every device type
  its argument can name (`Resolver.devices`). A placement is a *choice made at run time* when
  its argument can name more than one device type: `torch.device("cuda" if
  torch.cuda.is_available() else "cpu")`, `"mps" if mps_ok else "cpu"`, a `device` set on
  several branches. A literal (`.to("cuda")`, `.cuda()`, `.cpu()` for saving) or a variable
  with one device (`cpu_device = torch.device("cpu")` for results) is no choice; an unknown
  device (`args.device`) is no evidence of anything.
- **Gates.** Whether an autocast region only runs where its device is: its `enabled=` reads
  the device or CUDA's availability (`enabled=device.type == "cuda"`, `use_amp = args.amp and
  torch.cuda.is_available()`), an `if` around it tests them, or its function (or class) is
  decorated with a CUDA requirement (`@pytest.mark.skipif(not torch.cuda.is_available(), ...)`,
  `@require_torch_gpu`).
- **Related code.** The code that decides where a region's unit runs: the unit, the
  functions it is nested in, the methods of its class, the module's top level, and the
  units of the file that call it (to three levels), with theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Optional, Set

import libcst as cst

from amplint.semantic import (
    Analysis,
    AutocastRegion,
    CallRecord,
    CodeUnit,
    GuardFrame,
    SemanticModel,
    iter_tree,
    names_read,
    source_text,
    split_args,
)

# Words in a test or an `enabled=` expression that make it about where the code runs.
_DEVICE_WORDS = ("cuda", "gpu", "device")
_MAX_CALLER_DEPTH = 3


@dataclass(frozen=True, eq=False)
class Placement:
    """A call that puts a module or tensor on a device."""

    node: cst.Call
    record: CallRecord
    device: Optional[cst.BaseExpression]  # the device argument; None for `.cuda()`
    devices: FrozenSet[str]  # every device type it can name; empty when unknown

    @property
    def chosen_at_run_time(self) -> bool:
        return len(self.devices) > 1

    @property
    def literal(self) -> bool:
        """`.cuda()`, `.to("cuda")`, `device="cuda:0"`: no choice, the code says where."""
        return self.device is None or isinstance(self.device, (cst.SimpleString, cst.FormattedString))

    @property
    def unit(self) -> CodeUnit:
        return self.record.unit


class Devices(Analysis):
    """Placements and what regions are gated on: `model.facts(Devices)`."""

    def __init__(self, model: SemanticModel) -> None:
        super().__init__(model)
        index = model.index
        self.index = index
        self.resolver = model.resolver
        self.regions = model.regions
        self.classify = model.classify
        self.placements: List[Placement] = []
        for record in index.calls:
            placement = self._placement(record)
            if placement is not None:
                self.placements.append(placement)
        self._by_unit: Dict[int, List[Placement]] = {}
        for placement in self.placements:
            self._by_unit.setdefault(id(placement.unit), []).append(placement)
        self._frames: Optional[Dict[int, tuple]] = None
        self._callers: Optional[Dict[int, List[CodeUnit]]] = None

    def _placement(self, record: CallRecord) -> Optional[Placement]:
        call = record.node
        func = call.func
        scope = record.unit.scope
        positional, keywords = split_args(call.args)
        if isinstance(func, cst.Attribute) and func.attr.value == "cuda":
            return Placement(call, record, None, frozenset({"cuda"}))
        candidates: List[cst.BaseExpression] = []
        if "device" in keywords:
            candidates.append(keywords["device"])
        if isinstance(func, cst.Attribute) and func.attr.value == "to" and positional:
            candidates.append(positional[0])
        for value in candidates:
            devices = self.resolver.devices(value, scope)
            if devices:
                return Placement(call, record, value, devices)
        return None

    # related code
    def related_units(self, unit: CodeUnit) -> List[CodeUnit]:
        """The unit, what encloses it, its class's methods, the module's top level, and the
        units of the file that call it (to three levels) with what encloses them."""
        found: List[CodeUnit] = []
        seen: Set[int] = set()

        def add(each: CodeUnit) -> None:
            scope: Optional[CodeUnit] = each
            while scope is not None:
                if id(scope) not in seen:
                    seen.add(id(scope))
                    found.append(scope)
                scope = scope.enclosing

        pending = [(unit, 0)]
        while pending:
            current, depth = pending.pop()
            add(current)
            if current.class_name is not None:
                for other in self.index.units:
                    if other.class_name == current.class_name:
                        add(other)
            if depth < _MAX_CALLER_DEPTH:
                pending.extend((caller, depth + 1) for caller in self.callers().get(id(current), ()) if id(caller) not in seen)
        add(self.index.units[0])
        return found

    def callers(self) -> Dict[int, List[CodeUnit]]:
        if self._callers is None:
            self._callers = {}
            for record in self.index.calls:
                callee = getattr(self.classify(record), "callee", None)
                if callee is not None and callee is not record.unit:
                    self._callers.setdefault(id(callee), []).append(record.unit)
        return self._callers

    def placements_in(self, units: Iterable[CodeUnit]) -> List[Placement]:
        return [p for unit in units for p in self._by_unit.get(id(unit), ())]

    # gates
    def gated_on_device(self, region: AutocastRegion) -> bool:
        """Whether the region only runs, or is only enabled, where its device is."""
        if self._reads_device(region.enabled_expression, region.scope, 0):
            return True
        for frame in self._region_frames(region):
            if isinstance(frame, GuardFrame) and _mentions_device(source_text(frame.test)):
                return True
        if self._leaves_unless_on_device(region) or self._called_only_on_device(region.unit):
            return True
        unit: Optional[CodeUnit] = region.unit
        while unit is not None and not unit.is_module:
            decorators = list(unit.decorators)
            owner = unit.scope.class_scope
            if owner is not None and isinstance(owner.node, cst.ClassDef):
                decorators += [d.decorator for d in owner.node.decorators]
            if any(_mentions_device(source_text(d), words=("cuda", "gpu")) for d in decorators):
                return True
            unit = unit.enclosing
        return False

    def _leaves_unless_on_device(self, region: AutocastRegion) -> bool:
        """Whether the region's function, before the statement that holds it, leaves on a
        test of the device (`if args.device != "cuda": return`)."""
        function = region.unit.node
        if not isinstance(function, cst.FunctionDef) or not isinstance(function.body, cst.IndentedBlock):
            return False
        for statement in function.body.body:
            if any(node is region.anchor for node in iter_tree(statement)):
                return False
            if isinstance(statement, cst.If) and _mentions_device(source_text(statement.test)) and _leaves(statement.body):
                return True
        return False

    def _called_only_on_device(self, unit: CodeUnit) -> bool:
        """Whether every call of `unit` in the file is inside an `if` that tests the device
        (`if args.device == "cuda": train_amp(model, args)`); False when nothing calls it."""
        calls = [record for record in self.index.calls if getattr(self.classify(record), "callee", None) is unit and record.unit is not unit]
        return bool(calls) and all(
            any(isinstance(frame, GuardFrame) and _mentions_device(source_text(frame.test)) for frame in record.frames) for record in calls
        )

    def _reads_device(self, expression: Optional[cst.BaseExpression], scope, depth: int) -> bool:
        """`enabled=` reads the device or CUDA's availability, directly or through the values
        of the names it reads (`use_amp = args.amp and device.type == "cuda"`)."""
        if expression is None or depth > 3:
            return False
        if _mentions_device(source_text(expression)):
            return True
        for name in names_read(expression):
            for value, where in self.resolver.values(name, scope):
                if self._reads_device(value, where, depth + 1):
                    return True
        return False

    def _region_frames(self, region: AutocastRegion) -> tuple:
        if self._frames is None:
            self._frames = {}
            for unit, frame, frames in self.index.withs:
                found = self.regions.region_of(frame, unit)
                if found is not None:
                    self._frames.setdefault(id(found), frames)
        return self._frames.get(id(region), ())

    def runtime_device_choices(self, region: AutocastRegion) -> List[Placement]:
        """Placements in the code around `region` (its unit, what encloses it, its class, the
        module's top level, its callers in the file) on a device chosen at run time among
        device types that include one the region does not switch autocast on for
        (`.to(device)` with `device = torch.device("cuda" if ... else "cpu")` around an
        `autocast("cuda")`). Empty when the region is gated on the device (its `enabled=`,
        an `if` around it or a decorator test for CUDA), when its own function puts things on
        the region's device literally (`net.to("cuda")`, `x.cuda()`: that code runs there), or
        when the device is unknown."""
        if not region.possible_devices or self.gated_on_device(region):
            return []
        own = self.placements_in([region.unit])
        if any(p.literal and p.devices and p.devices <= region.possible_devices for p in own):
            return []
        return [
            placement
            for placement in self.placements_in(self.related_units(region.unit))
            if placement.chosen_at_run_time and placement.devices - region.possible_devices
        ]


def _leaves(block: cst.BaseSuite) -> bool:
    """Whether `block` ends by leaving its function: a `return` or a `raise`."""
    body = block.body if isinstance(block, cst.IndentedBlock) else [block]
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        return isinstance(last.body[-1], (cst.Return, cst.Raise))
    return isinstance(last, (cst.Return, cst.Raise))


def _mentions_device(text: str, words=_DEVICE_WORDS) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in words)
