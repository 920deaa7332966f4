"""The AMP model of one file: the types rules query.

An `AutocastRegion` is code that runs under `torch.autocast`; a `ScalerInfo` is one variable
that holds a `GradScaler` (or a framework's loss scaler: accelerate or Lightning in float16);
an `AmpEvent` is one call that matters to mixed precision (a backward, an unscale, a clip, a
step); an `Occurrence` is an event as it executes in one code unit, directly or through the
helper functions it calls; a `GradientState` is what the gradients hold just before an
occurrence, as the flow analysis (`amplint.semantic.flow`) finds it on some way through the
unit.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import FrozenSet, Optional, Set, Tuple

import libcst as cst

from amplint.semantic.conditions import Assumption
from amplint.semantic.index import CodeUnit, Scope
from amplint.semantic.names import source_text

# Stands for "scaled by a helper we cannot see" (`loss = self.scale_loss(loss)`): enough to
# not call the loss unscaled, never enough to call its gradients scaled.
UNKNOWN_SCALER = "<unknown scaler>"


class EventKind(enum.Enum):
    BACKWARD = "backward"  # loss.backward(), torch.autograd.backward(loss)
    FRAMEWORK_BACKWARD = "framework backward"  # accelerator.backward(loss): scales (or manages) the loss itself
    SCALE = "scaler.scale"
    UNSCALE = "scaler.unscale_"
    CLIP = "clip"
    SCALER_STEP = "scaler.step"
    SCALER_UPDATE = "scaler.update"
    OPTIMIZER_STEP = "optimizer.step"
    ZERO_GRAD = "zero_grad"  # optimizer.zero_grad(), model.zero_grad(): gradients so far are gone
    GRADIENT_READ = "gradient read"  # `p.grad` read (not written, not compared with None)
    AUTOGRAD_GRAD = "autograd.grad"  # torch.autograd.grad(outputs, inputs): gradients as values


@dataclass(frozen=True)
class Ref:
    """An object as written at a call (`self.scaler`) and the variable it is (`key`)."""

    text: str
    key: str


@dataclass(frozen=True, eq=False)
class AmpEvent:
    kind: EventKind
    node: cst.CSTNode  # the call (for a gradient read, the `x.grad` attribute)
    unit: CodeUnit  # the unit whose code contains the call
    receiver: Optional[Ref] = None  # the scaler or optimizer the method is called on
    argument: Optional[Ref] = None  # the optimizer of `scaler.step(opt)` / `scaler.unscale_(opt)`
    # Backward only: the tensor expression, who scales it inline (`scaler` in
    # `scaler.scale(loss).backward()`: that scaler's key, or UNKNOWN_SCALER), and the
    # variables it reads.
    tensor: Optional[cst.BaseExpression] = None
    scaled_inline_by: Optional[str] = None
    tensor_reads: FrozenSet[str] = frozenset()
    # A framework's own scaler (accelerate, Lightning, Fabric in float16): the key of the
    # object whose backward/clip/step this is. Framework backwards with no evident float16
    # have none: they manage their own precision and nothing is assumed.
    framework_scaler: Optional[str] = None
    # An event of another linted module, run through a call in this one (`node` is that
    # call): how to name it, "`s.step(opt)` in optim_utils.py".
    foreign: Optional[str] = None
    # Gradient reads: the statement (or compound-statement header) the read is part of, and
    # how it uses the gradients (`amplint.semantic.gradient_use`: "norm", "noise", or None).
    statement: Optional[cst.CSTNode] = None
    gradient_use: Optional[str] = None
    # An event of another module that its own module already reports (a clip its function
    # makes on the gradients it was called with, then steps the scaler on): callers leave it.
    reported_where_written: bool = False

    def describe(self) -> str:
        """The call as a message quotes it."""
        return self.foreign or f"`{source_text(self.node)}`"


@dataclass(frozen=True)
class ScalerInfo:
    """A variable that holds a GradScaler: a local, a module global, a `self.` attribute, a
    parameter; or a framework object whose float16 mixed precision scales the loss."""

    key: str
    name: str  # as written where it is bound: `scaler`, `self.scaler`, `accelerator`
    # False only when every construction passes the literal `enabled=False`; a scaler whose
    # state is unknown (`enabled=args.amp`, a parameter) is treated as enabled.
    enabled: Optional[bool]
    # What must hold on a path for the scaler to be live there: it is not None, it reports
    # is_enabled(), and its `enabled=` expression is true.
    live_requirements: Tuple[Assumption, ...] = ()
    framework: Optional[str] = None  # "accelerate", "lightning", "fabric"
    constructions: Tuple[cst.Call, ...] = ()  # where it is built, when this file builds it
    # A framework's scaler for a class of the file that another module trains: "train.py
    # trains `LitModel`" (`ExternalModules.trained_here`).
    trained_by: Optional[str] = None

    @property
    def known_disabled(self) -> bool:
        return self.enabled is False

    @property
    def when_float16(self) -> str:
        """What a message about a framework's scaler adds: that float16 is one of several
        configured precisions (" when float16 mixed precision is chosen"), and which module
        trains the class in it, when another one does."""
        if self.framework is None:
            return ""
        if self.trained_by is not None:
            return f" when {self.trained_by} in float16" if self.enabled is None else f" ({self.trained_by} in float16)"
        return " when float16 mixed precision is chosen" if self.enabled is None else ""

    def live_under(self, facts: FrozenSet[Assumption]) -> bool:
        if self.known_disabled:
            return False
        return not any((cond, not value) in facts for cond, value in self.live_requirements)


@dataclass(eq=False)
class AutocastRegion:
    """Code that runs under one `torch.autocast` context: a `with` body or a decorated function."""

    anchor: cst.Call  # the autocast(...) call: where findings about the region are reported
    unit: CodeUnit
    scope: Scope  # where the autocast call is written: its arguments' names are read there
    device: Optional[str]  # the device type when it is one; None when unknown or one of several
    possible_devices: FrozenSet[str]
    dtype: Optional[str]  # "float16", "bfloat16", ...; None when unknown or one of several
    # Every dtype it can run in: {"float16", "bfloat16"} for `torch.float16 if cuda else
    # torch.bfloat16`; empty when unknown at lint time.
    possible_dtypes: FrozenSet[str]
    enabled: Optional[bool]  # False only for a literal enabled=False
    cache_enabled: Optional[bool]
    under_no_grad: bool  # nested in torch.no_grad()/inference_mode(): inference only
    dtype_is_default: bool = False  # the device's default dtype
    legacy: Optional[str] = None  # "torch.cuda.amp.autocast" for the deprecated per-device classes
    # "accelerate" for `with accelerator.autocast():`, a framework's context in its own precision.
    framework: Optional[str] = None
    # The hook a framework runs under its own autocast ("training_step" of a LightningModule
    # under `Trainer(precision="16-mixed")`): the region is the whole method, its anchor the
    # call that builds the framework object and sets its precision.
    hook: Optional[str] = None
    # The class of an `nn.Module` whose `forward` is the region: it runs under the autocast of
    # whoever calls the module (`RegionOps.ops_under_callers_autocast`), in a dtype and on a
    # device the file does not show.
    caller: Optional[str] = None
    # What holds whenever the region is on: `enabled=scaler is not None` -> scaler is not None.
    enabled_requires: Tuple[Assumption, ...] = ()
    enabled_expression: Optional[cst.BaseExpression] = None  # its `enabled=` argument, if any
    body: Optional[cst.BaseSuite] = None  # the `with` body (None for a decorated function)
    assigned: Set[str] = field(default_factory=set)  # variables bound inside the region

    @property
    def active(self) -> bool:
        # autocast(dtype=torch.float32) is how models switch low precision off locally.
        return self.enabled is not False and self.dtype != "float32"

    @property
    def may_be_float16(self) -> bool:
        return "float16" in self.possible_dtypes


@dataclass(frozen=True, eq=False)
class Occurrence:
    """An event as it executes in `unit`: directly, or inside the helpers called along `via`."""

    event: AmpEvent
    unit: CodeUnit
    via: Tuple[cst.Call, ...] = ()  # the helper calls from `unit` down to the event
    region: Optional[AutocastRegion] = None  # the enabled autocast region it runs in, if any
    loop_inside_region: bool = False  # a for/while between the region's start and the call
    under_no_grad: bool = False
    # The scaler/optimizer as the caller knows them (a helper's parameter mapped to the argument).
    receiver: Optional[Ref] = None
    argument: Optional[Ref] = None

    @property
    def kind(self) -> EventKind:
        return self.event.kind

    @property
    def node(self) -> cst.CSTNode:
        """The call to point at: the event itself (in this file)."""
        return self.event.node

    @property
    def call_site(self) -> cst.CSTNode:
        """Where `unit` runs it: the event, or the first helper call on the way to it."""
        return self.via[0] if self.via else self.event.node


@dataclass(frozen=True)
class GradientState:
    """What the gradients hold at one point of one way through a unit."""

    # The latest backward through a live scaler, and that scaler's key.
    scaled_by: Optional[Occurrence] = None
    scaler: Optional[str] = None
    # The gradients are the ones the function was called with: scaled or not, nobody here
    # knows, until a live scaler.step() or unscale_() on them shows they carried a scale.
    entry: bool = False
    # Optimizers whose gradients scaler.unscale_() has divided since ("*": unknown which).
    unscaled: FrozenSet[str] = frozenset()
    unscale: Optional[Occurrence] = None  # the latest such unscale_()
    # Optimizers the scaler has stepped since the scaled backward.
    stepped: FrozenSet[str] = frozenset()
    # Backwards that no scaler touched, since the last step or zero_grad().
    plain_backwards: FrozenSet[Occurrence] = frozenset()
    mixed: bool = False  # a plain backward since the last optimizer step or zero_grad()
    # A backward through a live scaler since the scaler last stepped: with one, plain
    # backwards beside it may well be an fp32 model's own (an actor-critic's critic).
    scaled_since_step: bool = False
    last_backward: Optional[Occurrence] = None
    # Clips and reads of the gradients the function was called with, before anything showed
    # whether they were scaled.
    entry_uses: FrozenSet[Occurrence] = frozenset()

    @property
    def carry_scale(self) -> bool:
        """The gradients carry a live scaler's factor: scaled, not unscaled, not yet stepped."""
        return self.scaled_by is not None and not self.unscaled and not self.stepped


@dataclass(frozen=True)
class FlowState:
    """One abstract state of the flow analysis: what the way so far assumed, which variables
    hold a `scaler.scale(...)`-ed tensor, and the gradients."""

    facts: FrozenSet[Assumption] = frozenset()
    scaled: FrozenSet[Tuple[str, str]] = frozenset()  # (variable, scaler key)
    gradients: GradientState = GradientState()
