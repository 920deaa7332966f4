from __future__ import annotations

from typing import Iterator, Optional

from amplint.facts import AmpCall, CallKind, ModuleFacts, PathStep
from amplint.names import source_text
from amplint.rule import Flagged, Report, Rule


class ScaledLossPlainStep(Rule):
    """A scaled backward followed by a plain `optimizer.step()` instead of `scaler.step(optimizer)`.

    ## What it does
    Flags `optimizer.step()` reached after `scaler.scale(loss).backward()` with neither
    `scaler.step(optimizer)` nor `scaler.unscale_(optimizer)` in between.

    ## Why is this bad?
    The gradients still carry the loss scale (65536 at the start). A plain `step()` applies
    them as they are, and never skips the steps whose gradients overflowed to inf/NaN, which
    is the other half of what `scaler.step()` does.

    ## What goes wrong at runtime
    With SGD (and any optimizer whose update is proportional to the gradient) each update is
    ~65,000x too large and the loss goes to NaN within a few steps. Scale-invariant
    optimizers such as Adam are barely affected, unless weight decay or an overflowed step
    leaks in, which is why this can hide for a long time.

    ## Example
    ```python
    scaler.scale(loss).backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```
    """

    code = "AMP005"
    name = "scaled-loss-plain-step"

    def check(self, module: ModuleFacts) -> Iterator[Report]:
        for unit in module.units:
            for path in unit.paths or ():
                scaled_by: Optional[PathStep] = None
                for step in path:
                    kind = step.call.kind
                    if kind is CallKind.TENSOR_BACKWARD and step.scaled:
                        scaled_by = step
                    elif kind in (CallKind.UNSCALE, CallKind.SCALER_STEP, CallKind.ZERO_GRAD):
                        scaled_by = None
                    elif kind is CallKind.OPTIMIZER_STEP and scaled_by is not None:
                        yield Report(step.call.node, _message(step.call, scaled_by))

    VALID = (
        """
import torch
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
scheduler.step()
""",
        # GAN: two optimizers, one scaler.
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for real in loader:
    with torch.autocast("cuda"):
        d_loss = disc_loss(D, G, real)
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)
    with torch.autocast("cuda"):
        g_loss = gen_loss(D, G)
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
""",
        # use_amp gates both halves.
        """
def train(loss, optimizer, scaler, use_amp):
    if use_amp:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
""",
        # A disabled scaler's scale() is the identity.
        """
import torch
scaler = torch.amp.GradScaler(enabled=False)
scaler.scale(loss).backward()
optimizer.step()
""",
    )
    INVALID = (
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    optimizer.step()
    scaler.update()
""",
            at=((8, 5),),
        ),
        Flagged(
            """
def fit(self, loss):
    scaled = self.scaler.scale(loss)
    scaled.backward()
    self.optimizer.step()
""",
            at=((5, 5),),
        ),
    )


def _message(step: AmpCall, backward: PathStep) -> str:
    scaler = backward.scaler or "scaler"
    optimizer = step.receiver or "optimizer"
    return (
        f"`{source_text(step.node)}` applies gradients from `{source_text(backward.call.node)}` that still carry "
        f"`{scaler}`'s loss scale (65536 at start), and never skips inf/NaN steps: SGD-like updates come out "
        f"~65,000x too large. Use `{scaler}.step({optimizer})` and `{scaler}.update()`."
    )
