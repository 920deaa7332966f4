from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amplint.analyses.framework_hooks import FrameworkHooks
from amplint.analyses.scaled_gradients import ScaledGradients
from amplint.lint.evidence import CLIP, FRAMEWORK_BACKWARD, SCALE, STEP, UNSCALE
from amplint.lint.fix import Fix, unscale_before
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule, quote
from amplint.semantic import EventKind, Occurrence, SemanticModel, source_text
from amplint.semantic.pytorch import frameworks


class ClipBeforeUnscale(Rule):
    """Gradient clipping on gradients that still carry the GradScaler's loss scale.

    ## What it does
    Flags `clip_grad_norm_` / `clip_grad_value_` (and FSDP's `model.clip_grad_norm_`)
    reached after `scaler.scale(loss).backward()` with no `scaler.unscale_(optimizer)` in
    between, including when `unscale_` is called only after the clip. Frameworks' scaled
    backwards count the same way (docs/frameworks.md), and so does a clip in a hook the
    framework calls before it unscales (Lightning's `on_after_backward` under 16-mixed).

    ## Why is this bad?
    After a scaled backward every gradient is multiplied by the loss scale (65536 at the
    start). A clip threshold of 1.0 then applies to gradients ~65536x too large, so nearly
    every step is clipped hard; `scaler.step()` later divides by the scale again, leaving an
    update that is tiny. The returned norm is also meaningless for logging.

    ## What goes wrong at runtime
    Nothing errors. The clip measures the scaled norm (scale x true norm), far above any
    `max_norm`, so it scales the gradients down to `max_norm` / scale of their length instead
    of `max_norm`: the applied update shrinks by scale x min(true norm, max_norm) / max_norm,
    exactly the loss scale where the correct clip engages too. Measured by `amplint verify`
    (CPU, SGD, max_norm 0.25 below the true norm of 0.877, so that the fixed run clips too,
    float16 and bfloat16 alike): the gradients `step()` applied were the loss scale (65536)
    times smaller, to within 0.01%, and the first update moved the weights 66,000x less than
    the correct one (float32's rounding of updates this small loses some); the float32 loss
    moved by 0.003% in 20 steps (it stayed at 0.118; the fixed run reached 0.031); and
    `clip_grad_norm_` returned 57,487 instead of 0.877, the true norm times the scale. With
    Adam, which divides the gradients' scale back out, the update was only 1.7x smaller; the
    logged norm is wrong whatever the optimizer.

    ## Example
    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```
    `accelerator.clip_grad_norm_` unscales by itself and is not flagged, nor is a clip whose
    threshold is multiplied by the scale (`max_norm * scaler.get_scale()`), which clips the
    scaled gradients where the unscaled ones would be clipped (the norm it returns is still the
    scaled one: reading it is AMP009's). A scaler that every call of the file builds with
    `enabled=False` (a parameter handed `GradScaler(enabled=False)`, `enabled=use_amp` left at
    a default of False) scales nothing and is not flagged.

    ## Fix safety
    Safe. `scaler.unscale_(optimizer)` is inserted just before the clip, with the scaler and the
    optimizer the function steps next; an `unscale_` of that optimizer later in the same block
    is moved up instead (a second one would raise). No fix where the optimizer is ambiguous (the
    scaler steps several after the clip), the clip is in another function than the step, or
    the scaler is a framework's. `amplint verify --fixes`: the fixed `buggy.py` reports exactly
    what `fixed.py` reports.
    """

    code = "AMP003"
    name = "clip-before-unscale"
    # A clip, and gradients a scaler scaled (or a scaler step or unscale after it).
    needs = ({CLIP}, {SCALE, FRAMEWORK_BACKWARD, STEP, UNSCALE})

    PREDICTIONS = (
        Prediction(
            "sgd",
            "first_update",
            "With SGD the first update is at least 1000x smaller than the correct one.",
            compare="fixed/buggy",
            at_least=1000,
            quotes=(("value", "66,000x"),),
        ),
        Prediction(
            "sgd",
            "applied_grad_norm",
            "The gradients `step()` applies shrink by what clipping the scaled gradients predicts, scale x min(true "
            "norm, max_norm) / max_norm (the scale, where the correct clip engages), within 1%; only where the scale is "
            "above 1 and the fixed run clips.",
            compare="fixed/buggy",
            at_least=0.99,
            at_most=1.01,
            expected="buggy.loss_scale * min(fixed.logged_grad_norm, fixed.max_norm) / fixed.max_norm",
            happened="min(buggy.loss_scale - 1, fixed.logged_grad_norm - fixed.max_norm)",
            quotes=(("within", "0.01%"),),
        ),
        Prediction(
            "sgd",
            "logged_grad_norm",
            "The norm `clip_grad_norm_` returns (the one that gets logged) is the true norm times the loss scale, within "
            "1% (by linearity: the gradients carry the scale), where the scale is above 1.",
            compare="buggy/fixed",
            at_least=0.99,
            at_most=1.01,
            expected="buggy.loss_scale",
            happened="buggy.loss_scale - 1",
            quotes=(("buggy", "returned 57,487"), ("fixed", "0.877")),
        ),
        Prediction(
            "sgd",
            "loss_moved",
            "With SGD the float32 loss is stuck at its first value: after the steps it has moved by less than 0.1%.",
            compare="buggy",
            at_most=0.001,
            quotes=(("buggy", "0.003%"),),
        ),
        Prediction(
            "adam",
            "first_update",
            "With Adam most of the shrinkage is normalised away, but not all: the first update is 1.1x to 10x "
            "smaller.",
            compare="fixed/buggy",
            at_least=1.1,
            at_most=10,
            quotes=(("value", "1.7x"),),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for clip, state in model.states_before(EventKind.CLIP):
            if _clips(clip, model) and state.gradients.carry_scale:
                yield Report(clip.node, _message(clip, state.gradients.scaler, model), fix=_fix(clip, state.gradients.scaler, model))
        # Gradients a function was called with: a scaler.step() or unscale_() after the clip
        # shows they carried the scale (a helper that clips, then steps the scaler).
        for step, state in model.states_before(EventKind.SCALER_STEP, EventKind.UNSCALE):
            if state.gradients.entry_uses and step.receiver is not None and model.is_live(step.receiver.key, state.facts):
                for clip in state.gradients.entry_uses:
                    if clip.kind is EventKind.CLIP and _clips(clip, model):
                        yield Report(clip.node, _message(clip, step.receiver.key, model))
        # A hook the framework calls before it unscales (Lightning's `on_after_backward`).
        for clip, scaler in model.facts(FrameworkHooks).uses_of_scaled_gradients():
            if clip.kind is EventKind.CLIP and _clips(clip, model):
                hook = clip.unit.name.rsplit(".", 1)[-1]
                yield Report(clip.node, _message(clip, scaler, model, frameworks.LIGHTNING.hook_advice.format(hook=hook)))

    VALID = (
        """
import torch
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
""",
        # unscale_ inside `if clip:` together with the clip.
        """
import torch
from torch.nn.utils import clip_grad_norm_
def step(self, loss):
    self.scaler.scale(loss).backward()
    if self.max_norm > 0:
        self.scaler.unscale_(self.optimizer)
        clip_grad_norm_(self.model.parameters(), self.max_norm)
    self.scaler.step(self.optimizer)
    self.scaler.update()
""",
        # No scaler, or a disabled one: nothing to unscale.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
""",
        # accelerate unscales inside its own clip.
        """
accelerator.backward(loss)
accelerator.clip_grad_norm_(model.parameters(), 1.0)
optimizer.step()
""",
        # The threshold carries the scale too: the clip is right (issue 36).
        """
import torch
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scaler.get_scale())
scaler.step(optimizer)
scaler.update()
""",
        # A step helper every call of the file hands a disabled GradScaler.
        """
import torch
def train_step(model, loss, optimizer, scaler):
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
scaler = torch.amp.GradScaler("cuda", enabled=False)
for x in loader:
    train_step(model, model(x), optimizer, scaler)
""",
        # Gradient accumulation: unscale at the boundary, then clip.
        """
import torch
for i, batch in enumerate(loader):
    scaler.scale(model(batch) / accum).backward()
    if (i + 1) % accum != 0:
        continue
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad()
""",
    )
    INVALID = (
        Flagged(
            """
import torch
scaler.scale(loss).backward()
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
scaler.step(optimizer)
scaler.update()
""",
            at=((4, 1),),
        ),
        Flagged(
            """
from torch import nn
def step(model, loss, opt, scaler):
    scaler.scale(loss).backward()
    nn.utils.clip_grad_value_(model.parameters(), 0.5)
    scaler.unscale_(opt)
    scaler.step(opt)
""",
            at=((5, 5),),
        ),
        Flagged(
            """
def step(self, loss):
    self.scaler.scale(loss).backward()
    self.model.clip_grad_norm_(1.0)
    self.scaler.step(self.optimizer)
""",
            at=((4, 5),),
        ),
    )


def _clips(clip: Occurrence, model: SemanticModel) -> bool:
    """A clip to judge: not one at an infinite norm, there only for the norm it returns
    (AMP009's), nor one at a threshold times the loss scale (`max_norm * scaler.get_scale()`,
    which clips the scaled gradients where the unscaled ones would be), nor one another
    module's function makes and its module reports."""
    gradients = model.facts(ScaledGradients)
    return not gradients.clip_only_measures(clip) and not gradients.threshold_scaled(clip) and not clip.event.reported_where_written


def _message(clip: Occurrence, scaler_key: Optional[str], model: SemanticModel, advice: Optional[str] = None) -> Message:
    later_unscale: Optional[str] = None
    optimizer = "optimizer"
    scaler = model.scaler_name(scaler_key)
    following = model.following(clip, EventKind.UNSCALE, EventKind.SCALER_STEP)
    if following is not None:
        if following.kind is EventKind.UNSCALE:
            later_unscale = source_text(following.node)
        if following.argument is not None:
            optimizer = following.argument.text
        if following.receiver is not None:
            scaler = following.receiver.text
    info = model.scalers.get(scaler_key) if scaler_key is not None else None
    framework = frameworks.BY_NAME.get(info.framework or "") if info is not None else None
    if advice is not None:  # a framework's hook
        fix = advice
    elif info is not None and framework is not None and framework.clip_advice:
        fix = framework.clip_advice.format(owner=info.name, optimizer=optimizer)
    elif later_unscale is not None:
        fix = f"Move `{later_unscale}` before the clip"
    else:
        fix = f"Call `{scaler}.unscale_({optimizer})` before clipping"
    # A framework whose precision is only one of several configured values scales when it is float16.
    when = info.when_float16 if info is not None else ""
    return Message(
        f"{quote(clip)} clips gradients that still carry the loss scale{when}",
        "The loss scale is 65536 at start, so the threshold is effectively thousands of times too "
        f"small and the update shrinks. {fix}.",
    )


def _fix(clip: Occurrence, scaler_key: Optional[str], model: SemanticModel) -> Optional[Fix]:
    if not isinstance(clip.node, cst.Call):
        return None
    return unscale_before(model, clip, scaler_key, "clipping")
