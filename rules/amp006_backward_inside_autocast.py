from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.lint.evidence import AUTOCAST, BACKWARD, FRAMEWORK_BACKWARD
from amplint.lint.fix import out_of_region
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule, quote
from amplint.semantic import EventKind, Occurrence, SemanticModel, dotted_name, source_text
from amplint.semantic.pytorch import frameworks


class BackwardInsideAutocast(Rule):
    """`.backward()` runs inside an autocast region.

    ## What it does
    Flags `loss.backward()`, `scaler.scale(loss).backward()`, `torch.autograd.backward` and
    a framework's backward (`accelerator.backward(loss)`, `fabric.backward(loss)`,
    `self.manual_backward(loss)`) executed inside an enabled autocast region (lexically
    inside the `with`, `with accelerator.autocast():` included, or in an autocast-decorated
    function), and a loss-scaler object called there (timm's `loss_scaler(loss, optimizer)`,
    stepping or holding its step back with `need_update=(i + 1) % accum == 0`): it runs its
    backward there. A framework's backward scales the loss and calls `backward()` on it: it
    leaves the autocast state as it finds it. (The autocast Lightning opens around
    `training_step` is not such a region: a manual-optimization step there is its design.)

    ## Why is this bad?
    "Backward passes under autocast are not recommended" (PyTorch AMP docs). Built-in ops
    run their backward in the dtype their forward used, whatever the autocast state, but a
    custom `torch.autograd.Function` without `@torch.amp.custom_bwd` runs its backward under
    the autocast state active when `backward()` is called: inside the region, the matmuls of
    a function kept in float32 on purpose (under `autocast(enabled=False)`) are recast to
    float16 or bfloat16. Running backward inside the region also keeps the region (and its
    weight cache) alive across the update, which is how the whole-loop-in-autocast mistake
    starts.

    ## What goes wrong at runtime
    With built-in modules, nothing measurable: `amplint verify` found the loss after 20
    steps of a Linear/LayerNorm/GELU model bit-identical with the backward inside or after
    the region (CPU, float16 and bfloat16). With a custom `autograd.Function` computed in
    float32 under `autocast(enabled=False)` and no `custom_bwd`, the backward inside the
    region ran its matmuls in low precision: the gradients' median relative error against
    float32 was 3.8e-4 (float16) and 3.0e-3 (bfloat16) instead of 0, and with small
    gradients (loss weighted 1e-5, no scaler) 79% of them were exactly zero instead of none.

    ## Example
    ```python
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    ```
    A custom `autograd.Function` whose backward must match its forward's precision should
    also decorate `forward` with `@torch.amp.custom_fwd(device_type=...)` and `backward` with
    `@torch.amp.custom_bwd(device_type=...)`.

    ## Fix safety
    Unsafe (applied with `--unsafe-fixes`): the backward and every statement after it in the
    `with` block move after the block, so code after the backward runs in float32 too. Offered
    only where the backward is written directly in a `with` whose only item is the autocast,
    on a loss already computed (`loss.backward()`, `scaler.scale(loss / accum).backward()`):
    not `criterion(out, y).backward()`, whose loss would leave autocast with it, nor a helper
    call that may run a forward pass too.
    `amplint verify --fixes`: the fixed `buggy.py` reports exactly what `fixed.py` reports.
    """

    code = "AMP006"
    name = "backward-inside-autocast"
    needs = ({AUTOCAST}, {BACKWARD, FRAMEWORK_BACKWARD})

    PREDICTIONS = (
        Prediction(
            "sgd",
            "true_loss",
            "With built-in modules, no measurable difference: the float32 loss after 20 steps is within 0.1% "
            "of the fixed run's.",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
        ),
        Prediction(
            "fp32-function",
            "grad_rel_error",
            "A custom `autograd.Function` run in float32 (under `autocast(enabled=False)`, no `custom_bwd`) "
            "gets low-precision gradients: their median relative error against float32 is at least 1e-4 "
            "above the fixed run's (which is exactly 0) in float16.",
            compare="buggy-fixed",
            at_least=1e-4,
            dtypes=("float16",),
            quotes=(("buggy", "3.8e-4"),),
        ),
        Prediction(
            "fp32-function",
            "grad_rel_error",
            "... and at least 1e-3 above it in bfloat16.",
            compare="buggy-fixed",
            at_least=1e-3,
            dtypes=("bfloat16",),
            quotes=(("buggy", "3.0e-3"),),
        ),
        Prediction(
            "fp32-function-small-grad",
            "zero_grad_fraction",
            "With small gradients (loss weighted 1e-5) over half of that function's gradient elements are "
            "exactly zero, against none with the backward outside the region.",
            compare="buggy-fixed",
            at_least=0.5,
            dtypes=("float16",),
            quotes=(("value", "79%"),),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for backward in _in_regions(model, EventKind.BACKWARD, EventKind.FRAMEWORK_BACKWARD, EventKind.SCALER_STEP):
            assert backward.region is not None
            if backward.kind is not EventKind.BACKWARD and not _runs_a_backward(backward):
                continue
            yield Report(backward.call_site, _message(backward), fix=out_of_region(model, backward), occurrence=backward)

    VALID = (
        """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).sum()
loss.backward()
""",
        # Gradient penalty per the PyTorch AMP examples: autocast around the penalty's forward only.
        """
import torch
scaled_grads = torch.autograd.grad(outputs=scaler.scale(loss), inputs=model.parameters(), create_graph=True)
inv_scale = 1.0 / scaler.get_scale()
grads = [g * inv_scale for g in scaled_grads]
with torch.autocast("cuda", dtype=torch.float16):
    penalty = sum(g.pow(2).sum() for g in grads).sqrt()
    loss = loss + penalty
scaler.scale(loss).backward()
""",
        # accelerate's backward after accelerate's autocast.
        """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
with accelerator.autocast():
    loss = model(x)
accelerator.backward(loss)
""",
        # An accelerator in full precision: its autocast() is off.
        """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="no")
with accelerator.autocast():
    loss = model(x)
    accelerator.backward(loss)
""",
        # Explicitly disabled inner region.
        """
import torch
with torch.autocast("cuda"):
    loss = model(x).sum()
    with torch.autocast("cuda", enabled=False):
        loss.backward()
""",
    )
    INVALID = (
        Flagged(
            """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).sum()
    loss.backward()
""",
            at=((5, 5),),
        ),
        Flagged(
            """
import torch.cuda.amp as amp
def train_step(self, x):
    with amp.autocast():
        loss = self.model(x)
        self.scaler.scale(loss).backward()
""",
            at=((6, 9),),
        ),
        # A loss-scaler object (timm's NativeScaler, the project's own) runs its backward where it is called.
        Flagged(
            """
import torch
from timm.utils import NativeScaler
loss_scaler = NativeScaler()
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
        loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
""",
            at=((8, 9),),
        ),
        # accelerate's backward scales the loss and runs its backward where it is called.
        Flagged(
            """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
with accelerator.autocast():
    loss = model(x)
    accelerator.backward(loss)
""",
            at=((6, 5),),
        ),
    )


def _message(backward: Occurrence) -> Message:
    assert backward.region is not None
    return Message(
        f"{quote(backward)} runs inside `{source_text(backward.region.anchor)}`",
        "Only the forward pass and loss belong under autocast, and a custom autograd.Function "
        "without `@torch.amp.custom_bwd` would run its backward in low precision here. Dedent the "
        "backward out of the `with` block.",
    )


def _runs_a_backward(occurrence: Occurrence) -> bool:
    """A framework's backward method (`accelerator.backward(loss)`), or a call of a loss-scaler
    object (timm's `loss_scaler(loss, optimizer)`, stepping or holding its step back with
    `need_update=(i + 1) % accum == 0`): it scales the loss and runs its backward there. (A
    scaler's own `scaler.step(optimizer)` runs none.)"""
    call = occurrence.event.node
    if not isinstance(call, cst.Call):
        return False
    receiver = occurrence.event.receiver
    if receiver is not None and dotted_name(call.func) == receiver.text:
        return True  # the scaler object called itself
    return occurrence.kind is EventKind.FRAMEWORK_BACKWARD and isinstance(call.func, cst.Attribute) and call.func.attr.value in frameworks.BACKWARD_METHODS


def _in_regions(model: SemanticModel, *kinds: EventKind) -> Iterator[Occurrence]:
    """Events of these kinds that run inside an enabled autocast region: written inside it,
    or inside a helper called from inside it (reported at that call)."""
    for unit in model.units:
        for occurrence in model.occurrences_in(unit):
            if occurrence.kind not in kinds or occurrence.region is None:
                continue
            if occurrence.via and occurrence.region.unit is not unit:
                continue  # the helper's own region: reported where the helper is analysed
            yield occurrence
