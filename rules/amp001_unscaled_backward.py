from __future__ import annotations

from typing import Iterator, List

from amplint.facts import AmpCall, CallKind, ModuleFacts
from amplint.rule import Flagged, Prediction, Report, Rule
from amplint.names import source_text


class UnscaledBackward(Rule):
    """Backward on a loss the GradScaler never scaled, while the scaler still steps the optimizer.

    ## What it does
    Flags `loss.backward()` (or `torch.autograd.backward(loss)`) when `loss` is not the result
    of `scaler.scale(...)` and, on the same path through the function, an enabled
    `GradScaler` then runs `scaler.step(optimizer)`.

    ## Why is this bad?
    `scaler.step()` divides every gradient by the current scale (65536 at the start) before
    the update, because it assumes `backward()` ran on `scaler.scale(loss)`. If it did not,
    the gradients are not too large but tiny: each update is shrunk by the scale factor, and
    float16 gradients that underflowed to zero are never rescued.

    ## What goes wrong at runtime
    Nothing errors. With SGD the update is ~65,000x too small and the loss barely moves;
    with Adam most of the effect is normalised away (its `eps` decides how much survives),
    so the damage depends on the optimizer.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).pow(2).mean()
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```
    Framework backward calls (`accelerator.backward(loss)`, `fabric.backward(loss)`,
    DeepSpeed's `engine.backward(loss)`, Lightning's `self.manual_backward(loss)`) scale
    the loss themselves and are not flagged; nor are paths where the scaler is known to be
    `None` or disabled.
    """

    code = "AMP001"
    name = "unscaled-backward"

    def check(self, module: ModuleFacts) -> Iterator[Report]:
        for unit in module.units:
            for path in unit.paths or ():
                unscaled: List[AmpCall] = []
                for step in path:
                    call = step.call
                    if call.kind is CallKind.TENSOR_BACKWARD and not step.scaled:
                        unscaled.append(call)
                    elif call.kind is CallKind.ZERO_GRAD:
                        unscaled = []
                    elif call.kind is CallKind.SCALER_STEP and step.scaler_live:
                        for backward in unscaled:
                            yield Report(backward.node, _message(backward, call))
                        unscaled = []

    VALID = (
        # The seed's full training pattern.
        """
import torch
scaler = torch.amp.GradScaler(device, enabled=(amp_dtype == torch.float16))
for step in range(5):
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device, dtype=amp_dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
""",
        # Scaled through a name, and gradient accumulation.
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda"):
        loss = criterion(model(x), y) / accum
    scaled = scaler.scale(loss)
    scaled.backward()
    if (i + 1) % accum == 0:
        scaler.step(opt)
        scaler.update()
""",
        # An optional scaler.
        """
def train_step(self, batch):
    loss = self.compute_loss(batch)
    if self.scaler is not None:
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
    else:
        loss.backward()
        self.optimizer.step()
""",
        # A use_amp flag tested twice: the unscaled branch never meets scaler.step.
        """
def train(model, opt, scaler, use_amp):
    loss = model(x).sum()
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if use_amp:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
""",
        # The scaler is disabled exactly when the loss is not scaled.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
if args.amp:
    loss = scaler.scale(loss)
loss.backward()
scaler.step(optimizer)
scaler.update()
""",
        # Frameworks scale for you.
        """
for batch in loader:
    loss = model(batch).loss
    accelerator.backward(loss)
    optimizer.step()
""",
        # `if scaler is None` gates the unscaled path.
        """
def step(loss, optimizer, scaler=None):
    if scaler is None:
        loss.backward()
        optimizer.step()
        return
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # A scaler that is off.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
loss.backward()
scaler.step(opt)
""",
    )
    INVALID = (
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    loss.backward()
    scaler.step(opt)
    scaler.update()
""",
            at=((7, 5),),
        ),
        Flagged(
            """
class Trainer:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()

    def step(self, loss):
        self.scaler.scale(loss)  # discarded: scales nothing
        torch.autograd.backward(loss)
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            at=((8, 9),),
        ),
        Flagged(
            """
def train(model, opt, scaler, use_amp):
    loss = model(x).sum()
    if use_amp:
        loss.backward()
    scaler.step(opt)
""",
            at=((5, 9),),
        ),
    )


def _message(backward: AmpCall, step: AmpCall) -> str:
    tensor = source_text(backward.tensor) if backward.tensor is not None else "loss"
    optimizer = step.argument or "optimizer"
    return (
        f"`{source_text(backward.node)}` runs on a loss `{step.receiver}` never scaled, yet "
        f"`{source_text(step.node)}` divides the gradients by the loss scale (65536 at start): "
        f"updates come out thousands of times too small. Use `{step.receiver}.scale({tensor}).backward()` "
        f"before stepping `{optimizer}`."
    )
