from __future__ import annotations

from typing import Iterator, Optional

from amplint.analyses.framework_hooks import FrameworkHooks
from amplint.analyses.scaled_gradients import ScaledGradients
from amplint.lint.evidence import CLIP, FRAMEWORK_BACKWARD, GRADIENT, SCALE, STEP, UNSCALE
from amplint.lint.fix import unscale_before
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule, quote
from amplint.semantic import EventKind, Occurrence, SemanticModel
from amplint.semantic.pytorch import frameworks


class ScaledGradientsRead(Rule):
    """Gradients used before `scaler.unscale_()`, while they still carry the loss scale.

    ## What it does
    Flags gradient reads between a scaled backward and `scaler.unscale_(optimizer)` (or
    `scaler.step`) that the scale corrupts: a norm of `p.grad` (logged or used for a
    decision), noise of a fixed size added to `p.grad` (made there or earlier in the function:
    `noise = torch.randn_like(p.grad) * sigma`, then `p.grad.add_(noise)`), and
    `torch.autograd.grad(scaler.scale(loss), ...)` in a function that never divides by
    `scaler.get_scale()` (a gradient penalty). Clipping is AMP003's; reads only compared with
    `None`, linear changes the later unscale divides out (averaging, `all_reduce`, `mul_`),
    and noise sized from the gradients themselves (`* p.grad.std()`, `* grad_norm`), which
    carries the scale too, are not flagged. Reads in a hook the framework calls before it
    unscales (Lightning's `on_after_backward` under 16-mixed) count too.

    ## Why is this bad?
    After `scaler.scale(loss).backward()` every gradient is multiplied by the loss scale
    (65536 at the start) until `unscale_` divides it out. A norm read off them is 65536x too
    large; noise added to them is divided by 65536 together with the gradients, so it all but
    vanishes; a penalty on gradients from `autograd.grad` of a scaled loss is 65536x too
    strong. The PyTorch AMP docs give the recipe for each: unscale first, or divide by
    `scaler.get_scale()`.

    ## What goes wrong at runtime
    Nothing errors. Measured by `amplint verify` (CPU, SGD, a small MLP, float16 and bfloat16
    alike, since the scaler scales either): the logged gradient norm was 57,487 instead of
    0.88, the loss scale times the true norm, while training itself was unchanged; Gaussian
    noise (std 0.05) added before `unscale_` moved the weights ~30,000x less than the same
    noise added after under float16 (1.8e-5 against 0.53 away from a noiseless run in 20
    steps) and ~5,400x less under bfloat16 (9.7e-5, whose coarser rounding of the weights
    moves them more); a gradient-norm penalty on `autograd.grad(scaler.scale(loss), ...)` saw
    the norm times the loss scale, overflowed, and 17 of 20 steps were skipped while the loss
    blew up.

    ## Example
    ```python
    scaler.scale(loss).backward()
    grad_norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    scaler.step(optimizer)
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    grad_norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    scaler.step(optimizer)
    ```
    For a gradient penalty, divide the gradients of the scaled loss by the scale:
    `grads = [g / scaler.get_scale() for g in torch.autograd.grad(scaler.scale(loss), params, create_graph=True)]`.

    ## Fix safety
    Safe. `scaler.unscale_(optimizer)` is inserted before the statement that reads the
    gradients, in the block of the `scaler.step(optimizer)` that follows (so it runs once per
    step when the read sits in a loop over the parameters); an `unscale_` later in that block
    is moved up instead. Offered only where the function writes the read and one
    `scaler.step(...)` of one optimizer after it, with a plain GradScaler. No fix for a
    gradient penalty on `torch.autograd.grad(scaler.scale(loss), ...)`: multiply the
    gradients by `1 / scaler.get_scale()` by hand. `amplint verify --fixes` proves a partial fix:
    the norm and noise scenarios of the fixed `buggy.py` report exactly what `fixed.py` reports;
    the `penalty` one is still flagged and still differs.
    """

    code = "AMP009"
    name = "scaled-gradients-read"
    # A use of the gradients, and a scaler that scaled them (or steps after the use).
    needs = ({GRADIENT, CLIP}, {SCALE, FRAMEWORK_BACKWARD, STEP, UNSCALE})

    PREDICTIONS = (
        Prediction(
            "logged-norm",
            "logged_grad_norm",
            "A gradient norm read before `unscale_` is the true norm times the loss scale, within 1% (by linearity: "
            "the gradients carry the scale), where the scale is above 1.",
            compare="buggy/fixed",
            at_least=0.99,
            at_most=1.01,
            expected="buggy.loss_scale",
            happened="buggy.loss_scale - 1",
            quotes=(("buggy", "57,487"), ("fixed", "0.88")),
        ),
        Prediction(
            "noise",
            "noise_effect",
            "Noise of a fixed size added before `unscale_` all but vanishes: the noisy run ends at least "
            "1000x closer to a noiseless one than with the noise added after.",
            compare="fixed/buggy",
            at_least=1000,
            dtypes=("float16",),
            quotes=(("value", "~30,000x"), ("buggy", "1.8e-5"), ("fixed", "0.53")),
        ),
        Prediction(
            "noise",
            "noise_effect",
            "... and under bfloat16.",
            compare="fixed/buggy",
            at_least=1000,
            dtypes=("bfloat16",),
            quotes=(("value", "~5,400x"), ("buggy", "9.7e-5")),
        ),
        Prediction(
            "penalty",
            "penalty_grad_norm",
            "A penalty on `autograd.grad(scaler.scale(loss), ...)` not divided by the scale sees the "
            "gradient norm times the loss scale, within 1%, where the scale is above 1.",
            compare="buggy/fixed",
            at_least=0.99,
            at_most=1.01,
            expected="buggy.loss_scale",
            happened="buggy.loss_scale - 1",
        ),
        Prediction(
            "penalty",
            "skipped_steps",
            "That penalty overflows: at least 5 of 20 steps are skipped (none with the scale divided out).",
            compare="buggy-fixed",
            at_least=5,
            quotes=(("buggy", "17 of 20"),),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for read, state in model.states_before(EventKind.GRADIENT_READ, EventKind.CLIP):
            how = _corrupting_use(read, model)
            if how is not None and state.gradients.carry_scale:
                # At the call when a helper reads them: the helper may be used rightly elsewhere.
                fix = unscale_before(model, read, state.gradients.scaler, "reading the gradients") if read.kind is EventKind.GRADIENT_READ else None
                yield Report(read.call_site, _message(read, how, model.scaler_name(state.gradients.scaler)), fix=fix, occurrence=read)
        # Gradients a function was called with: a scaler.step() or unscale_() after the read
        # shows they carried the scale.
        for step, state in model.states_before(EventKind.SCALER_STEP, EventKind.UNSCALE):
            if step.receiver is None or not model.is_live(step.receiver.key, state.facts):
                continue
            for read in state.gradients.entry_uses:
                how = _corrupting_use(read, model)
                if how is not None:
                    yield Report(read.call_site, _message(read, how, step.receiver.text), occurrence=read)
        # A hook the framework calls before it unscales (Lightning's `on_after_backward`).
        for read, scaler in model.facts(FrameworkHooks).uses_of_scaled_gradients():
            how = _corrupting_use(read, model)
            if how is not None:
                # A precision that is only one of several configured values scales when it is float16.
                info = model.scalers.get(scaler)
                when = info.when_float16 if info is not None else ""
                yield Report(read.call_site, _message(read, how, model.scaler_name(scaler), _hook_advice(read), when), occurrence=read)
        for grad, state in model.states_before(EventKind.AUTOGRAD_GRAD):
            scaler = grad.event.scaled_inline_by
            if model.is_live(scaler, state.facts) and not model.facts(ScaledGradients).divided_by_loss_scale(grad.event):
                yield Report(grad.node, _penalty_message(grad, model.scaler_name(scaler)))

    VALID = (
        # The AMP docs' order: unscale, then read.
        """
import torch
scaler.scale(loss).backward()
scaler.unscale_(optimizer)
grad_norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
scaler.step(optimizer)
scaler.update()
""",
        # The AMP docs' gradient penalty: divided by the scale.
        """
import torch
scaled_grads = torch.autograd.grad(outputs=scaler.scale(loss), inputs=model.parameters(), create_graph=True)
inv_scale = 1.0 / scaler.get_scale()
grads = [g * inv_scale for g in scaled_grads]
penalty = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
scaler.scale(loss + penalty).backward()
scaler.step(optimizer)
""",
        # Linear changes commute with the later unscale; None checks see no scale.
        """
import torch
scaler.scale(loss).backward()
for p in model.parameters():
    if p.grad is not None:
        torch.distributed.all_reduce(p.grad)
        p.grad.div_(world_size)
scaler.step(optimizer)
scaler.update()
""",
        # No scaler, or a disabled one: nothing to divide out.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
scaler.scale(loss).backward()
grad_norm = sum(p.grad.norm() for p in model.parameters())
scaler.step(optimizer)
""",
        # bfloat16 training without a scaler reads plain gradients.
        """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).mean()
loss.backward()
grad_norm = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()])
optimizer.step()
""",
    )
    INVALID = (
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(loss).backward()
grad_norm = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
scaler.step(optimizer)
scaler.update()
""",
            at=((5, 37),),
        ),
        Flagged(
            """
import torch
def noisy_step(model, optimizer, scaler, loss, sigma):
    scaler.scale(loss).backward()
    for p in model.parameters():
        p.grad += sigma * torch.randn_like(p.grad)
    scaler.step(optimizer)
    scaler.update()
""",
            at=((6, 9),),
        ),
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
grads = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
penalty = sum(g.pow(2).sum() for g in grads).sqrt()
scaler.scale(loss + penalty).backward()
scaler.step(optimizer)
""",
            at=((4, 9),),
        ),
        # A logging helper called between the scaled backward and the scaler's step.
        Flagged(
            """
import torch
def grad_norm(model):
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
class Trainer:
    def step(self, loss):
        self.scaler.scale(loss).backward()
        self.log(grad_norm(self.model))
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            at=((8, 18),),
        ),
    )


def _corrupting_use(read: Occurrence, model: SemanticModel) -> Optional[str]:
    """How a gradient read uses the gradients, if the scale corrupts that use: "norm" (a
    norm computed from them, not divided by the scale after) or "noise" (random noise added
    to them). A clip at an infinite norm is a norm read."""
    if read.event.reported_where_written:
        return None  # its own module reports it
    return model.facts(ScaledGradients).corrupts(read.event)


def _message(read: Occurrence, how: str, scaler: str, advice: Optional[str] = None, when: str = "") -> Message:
    if how == "noise":
        effect = (
            "noise added to it is divided by the scale together with the gradients when they are "
            "unscaled, so it all but vanishes"
        )
    else:
        effect = "a norm computed from it is 65536x too large, whether it is logged or acted on"
    if advice is not None:  # a framework's hook
        return Message(
            f"{quote(read)} reads gradients that still carry the loss scale{when}", f"The loss scale is 65536 at start: {effect}. {advice}."
        )
    return Message(
        f"{quote(read)} reads gradients that still carry `{scaler}`'s loss scale",
        f"The loss scale is 65536 at start: {effect}. Call `{scaler}.unscale_(optimizer)` first.",
    )


def _penalty_message(grad: Occurrence, scaler: str) -> Message:
    return Message(
        f"{quote(grad)} returns gradients of a scaled loss that nothing divides by `{scaler}.get_scale()`",
        "A penalty built on them is 65536x too strong and overflows. Multiply them by "
        f"`1.0 / {scaler}.get_scale()` first (the PyTorch AMP docs' gradient-penalty recipe).",
    )


def _hook_advice(use: Occurrence) -> str:
    """What to do instead, for a use in a hook the framework calls on scaled gradients."""
    return frameworks.LIGHTNING.hook_advice.format(hook=use.unit.name.rsplit(".", 1)[-1])
