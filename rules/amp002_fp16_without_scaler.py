from __future__ import annotations

from typing import Iterator

from amplint.analyses.training import Training
from amplint.lint.evidence import AUTOCAST, BACKWARD
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import AutocastRegion, SemanticModel, source_text
from amplint.semantic.pytorch import frameworks


class Fp16WithoutScaler(Rule):
    """float16 autocast in a training step that no GradScaler serves.

    ## What it does
    Flags an enabled `torch.autocast` whose dtype is float16 (explicitly, or by the CUDA
    default) around a forward pass whose loss is backpropagated in the same function, when
    no enabled `GradScaler` serves that step: none is used in the function, the function
    it is nested in, its class, or the module's top-level code. Also flags a training loop a
    framework builds and runs itself in float16 autocast with no scaler: ignite's
    `create_supervised_trainer(..., amp_mode="amp")` without `scaler=True` (not on the CPU,
    whose autocast is bfloat16).

    ## Why is this bad?
    float16 cannot represent magnitudes below ~6e-8 (its smallest subnormal). Without loss
    scaling, small gradients flush to exactly zero in the backward pass and those weights
    stop learning. `GradScaler` multiplies the loss up before backward so they survive.

    ## What goes wrong at runtime
    Nothing errors. How much is lost depends on how close the gradients sit to float16's
    smallest subnormal (~6e-8). Measured by `amplint verify` (CPU, 5 steps of a small MLP):
    at ordinary magnitudes (median |grad| 2e-3) no gradient element was zero, with or
    without a scaler; with the loss weighted 1e-4 (median |grad| 3e-7) 17% of gradient
    elements were exactly zero and the ones that survived were coarse: their median
    relative error against float32 gradients was 17%, against 0.045% with a GradScaler.
    Weighted 1e-5 (median 3e-8), 97% were zero, against 0% with a GradScaler. Small
    gradients come with small loss weights, late training and deep or large models; those
    weights quietly stop learning. bfloat16 has float32's range: the same 1e-5 run without
    a scaler had no zero gradients.

    ## Example
    ```python
    with torch.autocast("cuda"):  # float16 by default on CUDA
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```
    or `torch.autocast("cuda", dtype=torch.bfloat16)`, which needs no scaler. A dtype
    chosen at run time between literal dtypes (`torch.float16 if device == "cuda" else
    torch.bfloat16`) is flagged: on CUDA it is float16. Not flagged: bfloat16, a dtype
    unknown at lint time (a parameter, a config lookup), `enabled=False`, inference (no backward,
    `torch.no_grad()`, `torch.inference_mode()`), and framework-managed loops
    (`accelerator.backward`, Lightning, DeepSpeed) that scale the loss themselves.

    ## Fix safety
    No fix. The two corrections change the run in different ways, and which one is right is
    the user's call: add a `GradScaler` (scale the loss, step and update through it) or switch
    the region to `dtype=torch.bfloat16` (which needs hardware that has it).
    """

    code = "AMP002"
    name = "fp16-without-scaler"
    # A region, and a plain backward of what it computed.
    needs = ({AUTOCAST}, {BACKWARD})

    PREDICTIONS = (
        Prediction(
            "ordinary",
            "zero_grad_fraction",
            "At ordinary gradient magnitudes nothing visible happens: the share of exactly-zero "
            "gradient elements is within 1 point of a run with a scaler.",
            compare="buggy-fixed",
            at_least=-0.01,
            at_most=0.01,
            dtypes=("float16",),
            kind="control",
        ),
        Prediction(
            "small-grad",
            "zero_grad_fraction",
            "With small gradients (loss weighted 1e-4) at least 5% more gradient elements are exactly zero "
            "than with a scaler.",
            compare="buggy-fixed",
            at_least=0.05,
            dtypes=("float16",),
            quotes=(("value", "17% of gradient"),),
        ),
        Prediction(
            "small-grad",
            "grad_rel_error",
            "And the gradients that survive are coarse: their median relative error against float32 "
            "gradients is at least 10x a scaled run's.",
            compare="buggy/fixed",
            at_least=10,
            dtypes=("float16",),
            quotes=(("buggy", "17%, against"), ("fixed", "0.045%")),
        ),
        Prediction(
            "tiny-grad",
            "zero_grad_fraction",
            "With gradients below float16's smallest subnormal (loss weighted 1e-5) most gradient elements "
            "(over half) are exactly zero, against none with a scaler.",
            compare="buggy-fixed",
            at_least=0.5,
            dtypes=("float16",),
            quotes=(("value", "97%"), ("fixed", "0% with a GradScaler")),
        ),
        Prediction(
            "tiny-grad",
            "zero_grad_fraction",
            "bfloat16 control: the same tiny gradients survive without a scaler (within 1 point of a run with one).",
            compare="buggy-fixed",
            at_least=-0.01,
            at_most=0.01,
            dtypes=("bfloat16",),
            kind="control",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        training = model.facts(Training)
        for region in model.autocast_regions:
            if not region.active or not region.may_be_float16 or region.under_no_grad:
                continue
            if training.scaling_serves(region.unit):
                continue
            if any(training.reaches_optimizer(backward) for backward in training.backwards_fed_by(region)):
                yield Report(region.anchor, _message(region))
        # A training loop the framework runs itself, in float16 autocast with no scaler.
        for call, framework, surely in model.scaler_facts.unscaled_loops:
            yield Report(call, _loop_message(call, framework, surely))

    VALID = (
        # bfloat16 needs no scaler.
        """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = model(x).sum()
loss.backward()
opt.step()
""",
        # Inference only.
        """
import torch
@torch.no_grad()
def evaluate(model, loader):
    for x, _ in loader:
        with torch.autocast("cuda"):
            out = model(x)
""",
        # CPU autocast defaults to bfloat16.
        """
import torch
with torch.autocast("cpu"):
    loss = model(x).sum()
loss.backward()
""",
        # A scaler serves the step.
        """
import torch
scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
with torch.cuda.amp.autocast(enabled=args.amp):
    loss = model(x).sum()
scaler.scale(loss).backward()
""",
        # The scaler is handed to the code that steps.
        """
import torch
scaler = torch.cuda.amp.GradScaler()
def train(model, x):
    with torch.autocast("cuda"):
        loss = model(x).sum()
    loss.backward()
train_one_epoch(model, loader, scaler)
""",
        # dtype unknown at lint time: don't guess.
        """
import torch
def train_step(model, x, amp_dtype):
    with torch.autocast(device_type="cuda", dtype=amp_dtype):
        loss = model(x).sum()
    loss.backward()
""",
        """
import torch
PTDTYPE = getattr(torch, cfg.dtype)
with torch.autocast(device_type="cuda", dtype=PTDTYPE):
    loss = model(x).sum()
loss.backward()
""",
        # accelerate handles scaling.
        """
import torch
with torch.autocast("cuda"):
    loss = model(x).sum()
accelerator.backward(loss)
""",
        # Disabled autocast.
        """
import torch
with torch.autocast("cuda", enabled=False):
    loss = model(x).sum()
loss.backward()
""",
        # The fp16 region is a frozen teacher; the loss comes from the fp32 student.
        """
import torch
def step(student, teacher, x):
    with torch.no_grad(), torch.autocast("cuda"):
        target = teacher(x)
    loss = (student(x) - target).pow(2).mean()
    loss.backward()
""",
    )
    INVALID = (
        Flagged(
            """
import torch
for x, y in loader:
    with torch.autocast(device_type="cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
""",
            at=((4, 10),),
        ),
        Flagged(
            """
import torch
from torch.cuda.amp import autocast
def train_step(model, x, y, opt):
    with autocast():
        out = model(x)
    loss = criterion(out, y)
    loss.backward()
    opt.step()
""",
            at=((5, 10),),
        ),
        Flagged(
            """
import torch
HALF = torch.half
ctx = torch.autocast("cuda", dtype=HALF)
scaler = torch.amp.GradScaler("cuda", enabled=False)
def train_step(x):
    with ctx:
        loss = model(x).mean()
    loss.backward()
    optimizer.step()
""",
            at=((4, 7),),
        ),
        # float16 whenever it runs on CUDA: the seed's dtype choice with its scaler removed.
        Flagged(
            """
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
for x, y in loader:
    with torch.autocast(device_type=device, dtype=amp_dtype):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
""",
            at=((6, 10),),
        ),
        # The dtype comes from the command line and reaches autocast as a parameter.
        Flagged(
            """
import torch
def train(model, loader, opt, amp_dtype):
    for x, y in loader:
        with torch.autocast(device_type="cuda", dtype=amp_dtype):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
def main(args):
    amp_dtype = torch.float16 if args.dtype == "float16" else torch.bfloat16
    train(model, loader, opt, amp_dtype=amp_dtype)
""",
            at=((5, 14),),
        ),
        # A GradScaler that is built but never used serves no step.
        Flagged(
            """
import torch
scaler = torch.cuda.amp.GradScaler()
for x, y in loader:
    with torch.autocast("cuda", torch.float16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
""",
            at=((5, 10),),
        ),
    )


def _loop_message(call, framework: str, surely: bool) -> Message:
    table = frameworks.BY_NAME[framework]
    when = "" if surely else " when its amp mode is chosen"
    return Message(
        f"`{source_text(call.func)}(...)` builds a loop that runs the forward in float16 autocast on CUDA but scales no loss{when}",
        f"With `{table.precision_keyword}=\"amp\"` and without `{table.loop_scaler_keyword}=True`, {framework}'s update calls "
        "`loss.backward()` unscaled: gradients below ~6e-8 flush to zero in backward and those weights silently "
        f"stop learning. {table.backward_advice}.",
    )


def _message(region: AutocastRegion) -> Message:
    if region.dtype_is_default and len(region.possible_devices) > 1:
        how = "float16 whenever it runs on CUDA (the default dtype there)"
    elif region.dtype_is_default:
        how = "float16 (the CUDA default)"
    elif region.dtype == "float16":
        how = "float16"
    else:
        how = "float16 on some runs (its dtype can be torch.float16)"
    return Message(
        f"`{source_text(region.anchor)}` runs the forward in {how} but no enabled GradScaler scales the loss",
        "Gradients below ~6e-8 flush to zero in backward and those weights silently stop "
        "learning. Add `scaler = torch.amp.GradScaler(\"cuda\")` with `scaler.scale(loss).backward()`, "
        "or use dtype=torch.bfloat16.",
    )
