"""The AMP facts of one file: what the rules query.

`amplint.semantics` builds these once per file; rules only read them. Names follow the AMP
domain: an `AutocastRegion` is code that runs under `torch.autocast`, a `ScalerRef` is a name
that holds a `GradScaler`, an `AmpCall` is one call that matters to mixed precision (a
backward, an unscale, a clip, a step), and a `Path` is one way through a function's control
flow as the sequence of `AmpCall`s executed along it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from typing import Dict, FrozenSet, Iterator, List, Optional, Sequence, Set, Tuple, Union

import libcst as cst

from amplint.conditions import Assumption


# Stands for "scaled by a helper we cannot see" (`loss = self.scale_loss(loss)`): enough to
# not call the loss unscaled, never enough to call its gradients scaled.
UNKNOWN_SCALER = "<unknown scaler>"


class CallKind(enum.Enum):
    TENSOR_BACKWARD = "backward"  # loss.backward(), torch.autograd.backward(loss)
    FRAMEWORK_BACKWARD = "framework backward"  # accelerator.backward(loss): scales itself
    SCALE = "scaler.scale"
    UNSCALE = "scaler.unscale_"
    CLIP = "clip"
    SCALER_STEP = "scaler.step"
    SCALER_UPDATE = "scaler.update"
    OPTIMIZER_STEP = "optimizer.step"
    ZERO_GRAD = "zero_grad"  # optimizer.zero_grad(), model.zero_grad(): gradients so far are gone
    # A call to a function of this file whose only AMP work is an unscaled backward
    # (`self._run_step(batch)` around `loss.backward()`); the AmpCall is that backward's.
    HELPER_BACKWARD = "backward in a helper"


@dataclass(frozen=True, eq=False)
class AmpCall:
    kind: CallKind
    node: cst.Call
    # The object the method is called on, as written: `self.scaler`, `optimizer_g`.
    receiver: Optional[str] = None
    # The first argument as written: the optimizer of `scaler.step(opt)`; for a backward,
    # the tensor whose backward runs.
    argument: Optional[str] = None
    # Backward only: the tensor expression, who scales it inline (`scaler` in
    # `scaler.scale(loss).backward()`, or UNKNOWN_SCALER), and the names it reads.
    tensor: Optional[cst.BaseExpression] = None
    scaled_inline_by: Optional[str] = None
    tensor_reads: FrozenSet[str] = frozenset()


@dataclass(frozen=True)
class ScalerRef:
    """A name that holds a GradScaler: a local, a module global, a `self.` attribute, a parameter."""

    name: str
    # False only when every construction passes the literal `enabled=False`; a scaler whose
    # state is unknown (`enabled=args.amp`, a parameter) is treated as enabled.
    enabled: Optional[bool]
    # What must hold on a path for the scaler to be live there: it is not None, it reports
    # is_enabled(), and its `enabled=` expression is true.
    live_requirements: Tuple[Assumption, ...] = ()

    @property
    def known_disabled(self) -> bool:
        return self.enabled is False

    def live_under(self, facts: FrozenSet[Assumption]) -> bool:
        if self.known_disabled:
            return False
        return not any((cond, not value) in facts for cond, value in self.live_requirements)


@dataclass(eq=False)
class AutocastRegion:
    """Code that runs under one `torch.autocast` context: a `with` body or a decorated function."""

    anchor: cst.Call  # the autocast(...) call: where findings about the region are reported
    unit: "CodeUnit"
    device: Optional[str]
    dtype: Optional[str]  # "float16", "bfloat16", ...; None when unknown or one of several
    # Every dtype it can run in: {"float16", "bfloat16"} for `torch.float16 if cuda else
    # torch.bfloat16`; empty when unknown at lint time.
    possible_dtypes: FrozenSet[str]
    enabled: Optional[bool]  # False only for a literal enabled=False
    cache_enabled: Optional[bool]
    under_no_grad: bool  # nested in torch.no_grad()/inference_mode(): inference only
    dtype_is_default: bool = False  # float16 because the device's default says so
    # What holds whenever the region is on: `enabled=scaler is not None` -> scaler is not None.
    enabled_requires: Tuple[Assumption, ...] = ()
    assigned: Set[str] = field(default_factory=set)  # names bound inside the region

    @property
    def active(self) -> bool:
        # autocast(dtype=torch.float32) is how models switch low precision off locally.
        return self.enabled is not False and self.dtype != "float32"

    @property
    def may_be_float16(self) -> bool:
        return "float16" in self.possible_dtypes


@dataclass(frozen=True, eq=False)
class CallSite:
    call: AmpCall
    unit: "CodeUnit"
    region: Optional[AutocastRegion]  # the enabled autocast region it executes in, if any
    loop_inside_region: bool  # a for/while between the region's start and the call
    under_no_grad: bool


@dataclass(frozen=True)
class PathStep:
    call: AmpCall
    # Backward: the scaler whose scale() the tensor went through on this path, if any
    # (UNKNOWN_SCALER: through a scaling helper we cannot see).
    scaler: Optional[str] = None
    # Whether that scaler (for scaler calls, the receiver) is live on this path: not None,
    # not disabled. A disabled scaler's scale() is the identity.
    scaler_live: bool = False
    # Clips and plain steps: the scalers live at this point of the path. A later branch can
    # reveal that a scaler was off all along (`if scaler.is_enabled():`, `else` of `if
    # scaler is not None:`), and then the gradients it "scaled" never carried a factor.
    live_scalers: Optional[FrozenSet[str]] = None

    @property
    def scaled(self) -> bool:
        """Backward only: the gradients it produces carry a live scaler's factor."""
        return self.scaler is not None and self.scaler_live


# One way through a unit: the AMP calls it executes, in order. A path ends where the unit
# ends, or right after an optimizer step or zero_grad(): past those, no earlier gradient
# matters, so no rule needs to look across them.
Path = Tuple[PathStep, ...]


@dataclass(frozen=True)
class Gradients:
    """What the gradients hold just before a step of a path: the state AMP001/3/5 query."""

    # The latest backward through a live scaler: the gradients carry its factor...
    scaled_by: Optional[PathStep] = None
    # ...unless this scaler.unscale_() has divided it out since.
    unscaled_by: Optional[PathStep] = None
    # Backwards that no scaler touched (a scaling helper counts as touching).
    unscaled_backwards: Tuple[PathStep, ...] = ()
    # The most recent backward of any kind.
    last_backward: Optional[PathStep] = None

    @property
    def carry_scale(self) -> bool:
        return self.scaled_by is not None and self.unscaled_by is None


def gradients_along(path: Path) -> Iterator[Tuple[PathStep, Gradients]]:
    """Each step of `path` with the state of the gradients just before it."""
    state = Gradients()
    for step in path:
        if step.live_scalers is not None and state.scaled_by is not None:
            if state.scaled_by.scaler not in step.live_scalers:
                state = replace(state, scaled_by=None, unscaled_by=None)
        yield step, state
        kind = step.call.kind
        if kind in (CallKind.TENSOR_BACKWARD, CallKind.HELPER_BACKWARD):
            state = replace(state, last_backward=step)
        if kind is CallKind.TENSOR_BACKWARD:
            if step.scaled:
                state = replace(state, scaled_by=step, unscaled_by=None)
            elif step.scaler is None:
                state = replace(state, unscaled_backwards=state.unscaled_backwards + (step,))
        elif kind is CallKind.HELPER_BACKWARD:
            state = replace(state, unscaled_backwards=state.unscaled_backwards + (step,))
        elif kind is CallKind.UNSCALE and state.scaled_by is not None:
            state = replace(state, unscaled_by=step)


@dataclass(eq=False)
class CodeUnit:
    """A module's top-level code or one function body: the scope of flow analysis."""

    node: Union[cst.Module, cst.FunctionDef]
    name: str
    enclosing: Optional["CodeUnit"] = None  # the function or module it is defined in
    class_name: Optional[str] = None  # for methods
    no_grad: bool = False
    # Scalers and scaler-like helpers this unit scales, steps, calls or hands on.
    scalers_used: Set[str] = field(default_factory=set)
    calls: List[CallSite] = field(default_factory=list)
    regions: List[AutocastRegion] = field(default_factory=list)
    # (names bound, names read) for each assignment in the unit, in source order.
    assignments: List[Tuple[FrozenSet[str], FrozenSet[str]]] = field(default_factory=list)
    _paths: Optional[Sequence[Path]] = None
    _paths_done: bool = False
    _module: Optional["ModuleFacts"] = None

    def calls_of(self, *kinds: CallKind) -> List[CallSite]:
        return [site for site in self.calls if site.call.kind in kinds]

    @property
    def paths(self) -> Optional[Sequence[Path]]:
        """Every way through the unit, as the AMP calls executed; None when too many to enumerate."""
        if not self._paths_done:
            from amplint.paths import enumerate_paths

            assert self._module is not None
            self._paths = enumerate_paths(self, self._module)
            self._paths_done = True
        return self._paths

    def values_derived_from(self, names: Set[str]) -> Set[str]:
        """`names` plus every name assigned, directly or transitively, from one of them."""
        derived = set(names)
        changed = True
        while changed:
            changed = False
            for targets, reads in self.assignments:
                if reads & derived and not targets <= derived:
                    derived |= targets
                    changed = True
        return derived


@dataclass(eq=False)
class ModuleFacts:
    units: List[CodeUnit]
    scalers: Dict[str, ScalerRef]
    optimizers: Set[str]
    calls_by_node: Dict[int, AmpCall]  # id(cst.Call) -> what it is
    # Names like `loss_scaler` or `self.scaler` that are used but are not GradScalers we
    # can see built: timm's NativeScaler `loss_scaler(loss, optimizer)`, a scaler passed in.
    other_scaler_names: Set[str] = field(default_factory=set)

    def amp_call(self, node: cst.Call) -> Optional[AmpCall]:
        return self.calls_by_node.get(id(node))

    def scaling_serves(self, unit: CodeUnit) -> bool:
        """Whether a live GradScaler (or a scaler-like helper) may serve the unit's training
        step: one used in the unit, in a function it is nested in, in another method of its
        class, or at the module's top level."""
        def serving(name: str) -> bool:
            ref = self.scalers.get(name)
            return name in self.other_scaler_names if ref is None else not ref.known_disabled

        related = [self.units[0]]
        scope: Optional[CodeUnit] = unit
        while scope is not None:
            related.append(scope)
            scope = scope.enclosing
        if unit.class_name is not None:
            related += [u for u in self.units if u.class_name == unit.class_name]
        if any(serving(name) for u in related for name in u.scalers_used):
            return True
        # A loss scaled by something we cannot name (`amp["scaler"].scale(loss)`) is scaled.
        return any(
            site.call.kind is CallKind.TENSOR_BACKWARD and site.call.scaled_inline_by is not None for site in unit.calls
        )
