from __future__ import annotations

from typing import Iterator

from amplint.lint.evidence import AUTOCAST, STEP
from amplint.lint.fix import out_of_region
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule, quote
from amplint.semantic import EventKind, Occurrence, SemanticModel, source_text


class StepInsideAutocast(Rule):
    """`optimizer.step()` or `scaler.step(optimizer)` runs inside an autocast region.

    ## What it does
    Flags an optimizer step executed inside an enabled `torch.autocast` region: lexically
    inside the `with` (through nested blocks and loops) or in an autocast-decorated
    function. Function and class bodies defined inside the region are not executed there
    and are not flagged.

    ## Why is this bad?
    Only the forward pass and the loss belong under autocast. The update must run in the
    weights' own precision. Worse, autocast caches the low-precision copy of each weight
    for the whole region: when the region spans the training loop, `step()` updates the
    float32 weights in place but every later forward in the region keeps using the stale
    cached copies.

    ## What goes wrong at runtime
    When the region spans the loop, training silently goes wrong (in eager mode with float32
    weights, which is what autocast caches and what was measured): the logged loss stays at
    its first value while the true float32 loss follows the first step's gradient applied
    over and over. Measured by `amplint verify` (CPU, 30 steps, float16 and bfloat16 alike):
    the logged loss never moved from 0.118; the true loss ended at 5.7 instead of 0.015 with
    SGD and 0.39 instead of 0.0043 with Adam. The same loop in a region opened with
    `cache_enabled=False` trained exactly like the fixed run, so the stale cache is the
    mechanism. One region per iteration also avoids it: stepping SGD or Adam inside a
    per-iteration region gave bit-identical results to stepping after it. Optimizers whose
    `step()` runs a matrix product are the exception, Adafactor-like ones:
    `torch.optim.Adafactor` (its `row_var @ col_var`) stepped inside a per-iteration float16
    region ended with a NaN loss, while under bfloat16 it trained like the fixed run (within
    0.01%, in its for-loop implementation, `foreach=False`, which the fixture pins so that
    CPU and CUDA run the same code).

    ## Example
    ```python
    with torch.autocast("cuda"):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    Unsafe (applied with `--unsafe-fixes`). The step and every statement after it in the `with`
    block move after the block: code that followed the step (logging, an EMA update, the next
    forward) then runs outside autocast too, in float32. Offered only where the step is written
    directly in a `with` whose only item is the autocast (not a helper that steps). A region
    around the whole loop gets no fix: narrowing it to the forward pass is a rewrite to make
    by hand. `amplint verify --fixes` proves a partial fix: the per-iteration scenarios of the
    fixed `buggy.py` report exactly what `fixed.py` reports; the whole-loop ones
    (`sgd-whole-loop`, `adam-whole-loop`) are still flagged and still differ.
    """

    code = "AMP004"
    name = "step-inside-autocast"
    needs = ({AUTOCAST}, {STEP})

    PREDICTIONS = (
        Prediction(
            "sgd-whole-loop",
            "logged_loss_change",
            "With one region around the whole loop, the logged loss never moves from its first value.",
            compare="buggy",
            at_least=0,
            at_most=0,
        ),
        Prediction(
            "sgd-whole-loop",
            "true_loss",
            "With one region around the whole loop, the true float32 loss after 30 SGD steps ends at least 10x above the fixed run's.",
            compare="buggy/fixed",
            at_least=10,
            quotes=(("buggy", "5.7 instead"), ("fixed", "0.015 with")),
        ),
        Prediction(
            "adam-whole-loop",
            "true_loss",
            "The same with Adam: the true loss after 30 steps ends at least 10x above the fixed run's.",
            compare="buggy/fixed",
            at_least=10,
            quotes=(("buggy", "0.39 instead"), ("fixed", "0.0043 with")),
        ),
        Prediction(
            "sgd-whole-loop-no-cache",
            "true_loss",
            "Control: the same whole-loop region with `cache_enabled=False` trains like the fixed run (within "
            "0.1%), so the stale weight cache is what freezes training.",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
        ),
        Prediction(
            "sgd-per-iteration",
            "true_loss",
            "With one region per iteration, stepping SGD inside it makes no measurable difference (within 0.1%).",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
        ),
        Prediction(
            "adam-per-iteration",
            "true_loss",
            "With one region per iteration, stepping Adam inside it makes no measurable difference (within 0.1%).",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
        ),
        Prediction(
            "adafactor-per-iteration",
            "diverged",
            "Adafactor, whose step() runs a matrix product, stepped inside a per-iteration float16 region "
            "ends with a NaN loss.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
        Prediction(
            "adafactor-per-iteration",
            "true_loss",
            "bfloat16 control: the same Adafactor loop (its for-loop implementation, `foreach=False`) inside a "
            "bfloat16 region trains like the fixed run (within 0.1%).",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            dtypes=("bfloat16",),
            kind="control",
            quotes=(("within", "0.01%"),),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for step in model.events_in_regions(EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP):
            yield Report(step.call_site, _message(step), fix=out_of_region(model, step), occurrence=step)

    VALID = (
        """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    scheduler.step()
""",
        # A scheduler or EMA stepping inside the region is not an optimizer update.
        """
import torch
with torch.autocast("cuda"):
    out = model(x)
    lr_scheduler.step()
    ema.step()
    pbar.update()
""",
        # A nested autocast(enabled=False) turns the region off.
        """
import torch
with torch.autocast("cuda"):
    loss = model(x).sum()
    with torch.autocast("cuda", enabled=False):
        optimizer.step()
""",
        # A function defined inside the region does not run there.
        """
import torch
with torch.autocast("cuda"):
    def closure():
        optimizer.step()
    out = model(x)
""",
    )
    INVALID = (
        Flagged(
            """
import torch
with torch.autocast(device_type=device, dtype=amp_dtype):
    for step in range(5):
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
""",
            at=((7, 9),),
        ),
        Flagged(
            """
import torch
@torch.autocast("cuda", dtype=torch.bfloat16)
def train_step(model, x, optimizer):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
""",
            at=((7, 5),),
        ),
        Flagged(
            """
from torch.cuda.amp import autocast
for x in loader:
    with autocast():
        loss = model(x)
        if ok:
            self.optimizer.step()
""",
            at=((7, 13),),
        ),
        # The per-iteration shape (the fix moves the step, and what follows it, out of the `with`).
        Flagged(
            """
import torch
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            at=((7, 9),),
        ),
    )


def _message(step: Occurrence) -> Message:
    region = step.region
    assert region is not None
    title = f"{quote(step)} runs inside `{source_text(region.anchor)}`"
    help = (
        "Only the forward pass and loss belong under autocast; the optimizer update should run in "
        "the weights' own precision."
    )
    if step.loop_inside_region and region.cache_enabled is not False:
        title += ", which spans the training loop"
        help += (
            " Worse, autocast caches low-precision copies of the weights for the whole region, so "
            "forwards after this step keep using stale weights and training silently freezes. Enter "
            "autocast inside the loop, around the forward pass only."
        )
    else:
        help += " Move it after the `with` block."
    return Message(title, help)
