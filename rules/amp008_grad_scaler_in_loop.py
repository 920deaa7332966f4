from __future__ import annotations

from typing import Iterator, List, Optional, Set

import libcst as cst

from amplint.analyses.checkpoints import Checkpoints
from amplint.analyses.repetition import Repetition, Repetitions
from amplint.lint.evidence import GRAD_SCALER
from amplint.lint.fix import UNSAFE, Fix
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import (
    CallRecord,
    Occurrence,
    SemanticModel,
    iter_tree,
    names_bound,
    names_read,
    roots,
    source_text,
)


class GradScalerInLoop(Rule):
    """A `GradScaler` built anew in every iteration of the training loop.

    ## What it does
    Flags `GradScaler(...)` (or timm's `NativeScaler()`, which wraps one) that runs once per
    iteration of a loop whose iterations step an optimizer through that scaler, while the optimizer itself lives on across iterations:
    - built in the loop's body (the innermost loop around it), with `scaler.step(optimizer)`
      in the same iteration (directly, in a nested loop, or in a helper called there);
    - built in a function that a loop of the file calls in every iteration (a per-step
      `train_step`, a per-epoch `train_one_epoch`), with the step in that function;
    - built the same way in a function or method of another linted module (its summary says
      so), reported at the call in the loop;
    - returned by a function of the file or of another linted module that builds it
      (`scaler = build_scaler()`), called in the loop's body with the step in the same
      iteration.

    It is not flagged when the optimizer is built in the same iteration too (a loop over
    folds or experiments, each a fresh training run), when an `if` between the loop and the
    construction tests what the iteration changes (`if scaler is None:`, `if step == 0:`,
    `if not hasattr(self, "scaler"):`), when the loop ends each iteration with a top-level
    `break`/`return`/`raise` (a retry loop), when the function is called once, for
    `enabled=False` scalers and for files whose autocast is only bfloat16.

    ## Why is this bad?
    A GradScaler adapts its scale to the gradients over many steps: it halves the scale on
    each overflow (skipping that step) and doubles it after 2000 clean steps. A new scaler
    starts at 65536 every time. Built per step, it never adapts: when gradients times 65536
    overflow float16, every single step overflows and is skipped, and the model does not
    train at all; where 65536 does not overflow, it never grows the scale either. Built per
    epoch, every epoch starts by overflowing and skipping steps again until the scale is
    back where the previous epoch had it.

    ## What goes wrong at runtime
    Measured by `amplint verify` (CPU, float16, Adam, targets large enough that 65536 x the
    gradients overflows float16): with the scaler built in the step loop, all 20 of 20 steps
    were skipped, the scale at the last step was still 65536 (the fixed run's had fallen to
    512), and the weights and the float32 loss never moved; the fixed run skipped 7 steps and
    the other 13 updated the weights. Built once per epoch (4 epochs of 10 steps), 28 of 40
    steps were skipped instead of 8: each of the 4 epochs skipped again the 7 halvings from
    65536 down to 512, which the fixed run skipped once (and 1 overflow later on).

    ## Example
    ```python
    for x, y in loader:
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    Unsafe (applied with `--unsafe-fixes`): a `scaler = GradScaler(...)` written directly in the
    loop's body moves to just before the loop, when its arguments read nothing the loop binds.
    The scaler then keeps its scale across iterations, which is the point, but code that
    relied on a fresh scaler (a reset after a resume) should be read again. No fix for a
    scaler built in a per-step function: building it once means a new parameter and a change
    at every call site.
    """

    code = "AMP008"
    name = "grad-scaler-in-loop"
    severity = "error"
    # A scaler the file builds is what the rule is about.
    triggers = ("GradScaler", "NativeScaler", "ApexScaler")
    needs = ({GRAD_SCALER},)

    PREDICTIONS = (
        Prediction(
            "per-step",
            "skipped_fraction",
            "With the scaler built in the step loop every step overflows and is skipped (all 20 of 20).",
            compare="buggy",
            at_least=1.0,
            dtypes=("float16",),
        ),
        Prediction(
            "per-step",
            "last_scale",
            "The scale never adapts: at the last step it is still the initial 65536, at least 16x the "
            "fixed run's.",
            compare="buggy/fixed",
            at_least=16,
            dtypes=("float16",),
            quotes=(("buggy", "still 65536"), ("fixed", "to 512")),
        ),
        Prediction(
            "per-step",
            "loss_moved",
            "The model does not train: no step changes the weights, and the float32 loss after 20 steps is "
            "exactly where it started.",
            compare="buggy",
            at_most=0,
            dtypes=("float16",),
        ),
        Prediction(
            "per-epoch",
            "skipped_steps",
            "Built once per epoch, every epoch skips again the steps the first one skipped: the buggy run's "
            "skipped steps are epochs x the first epoch's, within 10%.",
            compare="buggy",
            at_least=0.9,
            at_most=1.1,
            expected="buggy.epochs * fixed.first_epoch_skipped",
            dtypes=("float16",),
            happened="fixed.first_epoch_skipped",
        ),
        Prediction(
            "per-epoch",
            "skipped_steps",
            "That is at least 2x the steps the fixed run skips.",
            compare="buggy/fixed",
            at_least=2,
            dtypes=("float16",),
            happened="fixed.skipped_steps",
            quotes=(("buggy", "28 of 40"), ("fixed", "instead of 8")),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        if not model.float16_possible:
            return
        for scaler, record in model.grad_scalers_built():
            for loop in model.facts(Repetitions).iterations_of(record):
                lasting = _steps_of_lasting_optimizers(model, scaler.key, record, loop)
                if lasting:
                    yield Report(record.node, Message.split(_message(scaler.name, record, loop, lasting[0])), fix=_hoist(record, loop, model))
                    break
        # `scaler = build_scaler()`, a function of the file or of another linted module that
        # returns a new one, called in every iteration of a loop that steps with it.
        for scaler, record, built in model.facts(Checkpoints).scalers_built_by_calls():
            for loop in model.facts(Repetitions).iterations_of(record):
                lasting = _steps_of_lasting_optimizers(model, scaler.key, record, loop)
                if lasting:
                    optimizer = lasting[0].argument.text if lasting[0].argument is not None else "the optimizer"
                    yield Report(record.node, Message.split(_message_for_call(built, record, loop, optimizer, "Call it once, before the loop.")))
                    break
        # A function of another linted module that builds one on every call (its summary says so).
        for record, built, optimizer in model.facts(Checkpoints).scalers_built_by_imported_calls():
            for loop in model.facts(Repetitions).iterations_of(record):
                if model.facts(Repetitions).outlives(optimizer, record.unit, loop):
                    yield Report(record.node, Message.split(_message_for_call(built, record, loop, optimizer.text)))
                    break

    VALID = (
        # Built once, before the loop.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # Built lazily, on the first iteration only.
        """
import torch
scaler = None
for x, y in loader:
    if scaler is None:
        scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    with torch.autocast("cuda", enabled=use_amp):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        """
import torch
for step, (x, y) in enumerate(loader):
    if step == 0:
        scaler = torch.cuda.amp.GradScaler()
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # One training run per fold: model, optimizer and scaler all new each iteration.
        """
import torch
for fold in range(5):
    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(10):
        for x, y in loaders[fold]:
            with torch.autocast("cuda"):
                loss = model(x, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
""",
        # A function called once; another called per experiment, which builds its optimizer too.
        """
import torch
def train(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
def main():
    for config in configs:
        train(build(config), loader, config.epochs)
""",
        """
import torch
def make_scaler(cfg):
    return torch.amp.GradScaler("cuda", init_scale=cfg.init_scale)
def main(cfg):
    scaler = make_scaler(cfg)
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        # Disabled, or serving bfloat16 only: nothing to adapt.
        """
import torch
for x, y in loader:
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        """
import torch
for x, y in loader:
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # A retry loop that breaks once training succeeds.
        """
import torch
for attempt in range(3):
    try:
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        break
    except torch.cuda.OutOfMemoryError:
        batch_size //= 2
""",
        # One scaler per model, built in a loop that only collects them.
        """
import torch
scalers = {}
for name in ("generator", "discriminator"):
    scalers[name] = torch.amp.GradScaler("cuda")
""",
        # accelerate owns the scaler.
        """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    with accelerator.autocast():
        loss = model(x, y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
""",
    )
    INVALID = (
        Flagged(
            """
import torch
for x, y in loader:
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    with torch.autocast("cuda", enabled=use_amp):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            at=((4, 14),),
        ),
        # A per-step function.
        Flagged(
            """
import torch
def train_step(model, optimizer, x, y):
    scaler = torch.cuda.amp.GradScaler()
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
optimizer = torch.optim.AdamW(model.parameters())
for x, y in loader:
    train_step(model, optimizer, x, y)
""",
            at=((4, 14),),
        ),
        # A per-epoch function: the scale restarts every epoch.
        Flagged(
            """
import torch
def train_one_epoch(loader, model, optimizer, mixed_precision=False):
    if mixed_precision:
        scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", enabled=mixed_precision):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
def main(cfg):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    epoch = 0
    while epoch < cfg.epochs:
        epoch += 1
        train_one_epoch(loader, model, optimizer, mixed_precision=cfg.amp)
""",
            at=((5, 18),),
        ),
        # A trainer's per-step method.
        Flagged(
            """
import torch
class Trainer:
    def __init__(self, model):
        self.model = model
        self.optimizer = torch.optim.Adam(model.parameters())
    def step(self, batch):
        self.scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda"):
            loss = self.model(batch)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
    def fit(self, loader):
        for batch in loader:
            self.step(batch)
""",
            at=((8, 23),),
        ),
    )


def _steps_of_lasting_optimizers(model: SemanticModel, scaler: str, record: CallRecord, loop: Repetition) -> List[Occurrence]:
    """The steps through `scaler` in the same iteration as its construction `record`, of an
    optimizer that outlives the iteration."""
    repetitions = model.facts(Repetitions)
    return [step for step in repetitions.scaler_steps_within(scaler, record, loop) if repetitions.outlives(step.argument, record.unit, loop)]


def _message(name: str, record: CallRecord, loop: Repetition, step: Occurrence) -> str:
    built = f"`{source_text(record.node)}`"
    optimizer = step.argument.text if step.argument is not None else "the optimizer"
    if loop.via:
        where = (
            f"{built} builds a new GradScaler on every call of `{record.unit.name}`, and "
            f"`{source_text(loop.via[0].node)}` runs in every iteration of `{loop.header}`"
        )
        fix = (
            f"Build `{name}` once, in `__init__`."
            if name.startswith("self.")
            else f"Build the scaler once, outside the loop, and pass it to `{record.unit.name}`."
        )
    else:
        where = f"{built} builds a new GradScaler in every iteration of `{loop.header}`"
        fix = "Build the scaler once, before the loop."
    return (
        f"{where}: each starts again at the initial scale (65536 by default) while `{optimizer}` carries on, so the "
        f"scale never adapts and, whenever 65536 overflows float16, the same steps are skipped again. {fix}"
    )


def _message_for_call(
    built: str, record: CallRecord, loop: Repetition, optimizer: str, fix: str = "Build the scaler once, outside the loop, and pass it in."
) -> str:
    call = f"`{source_text(record.node)}`"
    where = f"{call} builds a new GradScaler on every call ({built})"
    if loop.via:
        where += f", and `{source_text(loop.via[0].node)}` runs it in every iteration of `{loop.header}`"
    else:
        where += f", and runs in every iteration of `{loop.header}`"
    return (
        f"{where}: each starts again at the initial scale (65536 by default) while `{optimizer}` carries on, so the "
        f"scale never adapts and, whenever 65536 overflows float16, the same steps are skipped again. {fix}"
    )


def _hoist(record: CallRecord, loop: Repetition, model: SemanticModel) -> Optional[Fix]:
    """Unsafe: `scaler = GradScaler(...)`, written directly in the loop's body, moves to just
    before the loop, when its arguments read nothing the loop binds."""
    if loop.via or not isinstance(record.node, cst.Call) or not isinstance(loop.loop.body, cst.IndentedBlock):
        return None
    line = model.statement_of(record.node)
    if not isinstance(line, cst.SimpleStatementLine) or not any(item is line for item in loop.loop.body.body):
        return None
    if set(roots(names_read(record.node))) & _bound_in(loop.loop):
        return None
    return Fix(
        f"Build the scaler once, before `{loop.header}`",
        applicability=UNSAFE,
        insert_before=((loop.loop, (line,)),),
        remove=(line,),
    )


def _bound_in(loop: cst.CSTNode) -> Set[str]:
    """The names a loop (re)binds in its header and body."""
    bound: Set[str] = set()
    for node in iter_tree(loop):
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign, cst.For, cst.NamedExpr)):
            bound.update(roots(names_bound(node.target)))
        elif isinstance(node, cst.WithItem) and node.asname is not None:
            bound.update(roots(names_bound(node.asname.name)))
    return bound
