from __future__ import annotations

from typing import Iterator, Set

import libcst as cst

from amplint.analyses.checkpoints import Checkpoints, StateCall
from amplint.lint.evidence import GRAD_SCALER
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import ScalerInfo, SemanticModel, dotted_name, source_text

_SAVING = ("save", "checkpoint", "ckpt", "dump", "snapshot")


class ScalerStateNotCheckpointed(Rule):
    """A checkpoint saves or restores the optimizer's state but not the GradScaler's.

    ## What it does
    Flags the checkpoint of a file that checkpoints an optimizer (`optimizer.state_dict()`
    saved, `optimizer.load_state_dict(...)` on resume, or the optimizer handed to another
    module's `save_checkpoint(...)` / `load_checkpoint(...)`, or to the constructor of another
    linted module's class whose method then saves it: `ckpt = Checkpointer(model, optimizer)`,
    `ckpt.save(path)`) but never saves or restores the
    state of the `GradScaler(...)` it builds (or of timm's `NativeScaler()`, which wraps one;
    or that another linted module's function builds for it: `scaler = build_scaler()`; or
    that an instance of another linted module's class builds and keeps on an attribute:
    `trainer = AMPTrainer(model, optimizer)` with `self.grad_scaler = GradScaler()` in its
    `__init__`, kept when the file uses `trainer` in any other way than calling its methods
    that only run the scaler or reading its other attributes). The finding is on the call that makes the
    checkpoint, where the scaler's state belongs: `torch.save({...})` around the optimizer's
    `state_dict()`, the save of the variable that holds it (`ckpt = {...}` then
    `torch.save(ckpt, path)`), or the call that hands the optimizer to a checkpointing function;
    on the optimizer's `state_dict()` itself when the function shows no such call; a save
    before a restore. Also flags a `GradScaler(...)` built again after `scaler.load_state_dict(...)`
    restored it, and half of the scaler's state kept: saved (`scaler.state_dict()`) but never
    restored while the optimizer's state is (a resume that starts the scale again; the finding
    is on the optimizer's restore), or restored but never saved while the optimizer's state is
    saved (the finding is on that save). A framework's checkpointer handed a dict of objects
    (ignite's `Checkpoint(to_save, ...)`, `Checkpoint.load_objects(to_load=to_save, ...)`)
    checkpoints each of them: without the scaler in the dict, it is flagged.

    A scaler local to a function counts only when a checkpoint is in code connected to that
    function by calls in the file (it calls it, is called by it, or is handed the scaler);
    one kept on an object or in a module global, anywhere in the file. The scaler's state
    counts as kept when the file calls `scaler.state_dict()` or
    `scaler.load_state_dict(...)` anywhere (a checkpoint dict built over several statements,
    a trainer's own `state_dict()`), including through its helpers
    (`save_checkpoint(model, optimizer, scaler, path)` whose body saves it) and the variables
    it is copied into; and when the scaler is handed to code that may checkpoint it: a
    function named like saving, a class (`Checkpointer(model, scaler=scaler)`), a
    collection or another object (`to_save = {"scaler": scaler}`), a return value, an object
    whose whole `state_dict()` is saved. A tuple of training arguments only unpacked into a
    function of the file that saves nothing (`params = (loader, model, optimizer, scaler)`,
    `train_epoch(*params)`) is no such hand-off. Scalers built with `enabled=False`, files whose
    autocast is only bfloat16, and framework-managed precision (accelerate, Lightning,
    DeepSpeed save their own scaler) are not flagged.

    ## Why is this bad?
    The scaler's scale is training state, like the optimizer's moments: the run moved it
    from 65536 to whatever its gradients fit in float16. A resumed run whose scaler is new
    starts again at 65536. If the scale had fallen, it overflows again, skipping each
    overflowing step and halving the scale until it is back where it was; if it had grown,
    it runs at a lower scale, closer to float16 underflow, for 2000 steps per doubling. A
    `GradScaler` built again after `load_state_dict` throws the restored scale away the
    same way.

    ## What goes wrong at runtime
    Measured by `amplint verify` (CPU, float16, Adam, targets large enough that the run's
    scale fell from 65536 to 1024 in 20 steps; then a save, a reload into a new model,
    optimizer and scaler, and 20 more steps): the buggy resume restarted at scale 65536
    instead of 1024 and skipped 7 of its 20 steps where the fixed resume skipped 1. The 6
    extra skipped steps are the 6 halvings from 65536 back down to the saved 1024 (with other
    seeds give or take one: an overflow later on may fall to either run).
    By that mechanism the cost is one skipped step per halving between 65536 and the scale
    the run had reached, at every resume: none for a run whose scale never fell, a handful
    of lost updates for one that did.

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda")
    ...
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
    ...
    checkpoint = torch.load(path)
    optimizer.load_state_dict(checkpoint["optimizer"])
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    ...
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()},
        path,
    )
    ...
    checkpoint = torch.load(path)
    optimizer.load_state_dict(checkpoint["optimizer"])
    scaler.load_state_dict(checkpoint["scaler"])
    ```

    ## Fix safety
    No fix. Where the scaler's state belongs depends on how the checkpoint is built and read
    back (a dict, a trainer's `state_dict()`, separate files); both the save and the load need
    it. Add `"scaler": scaler.state_dict()` and `scaler.load_state_dict(checkpoint["scaler"])`.
    """

    code = "AMP007"
    name = "scaler-state-not-checkpointed"
    severity = "warning"
    # A scaler the file builds is what the rule is about.
    triggers = ("GradScaler", "NativeScaler", "ApexScaler")
    needs = ({GRAD_SCALER},)

    PREDICTIONS = (
        Prediction(
            "overflow",
            "resume_scale",
            "The resumed run starts again at the initial scale: its first scale after the resume is 65536, "
            "at least 16x the scale the fixed run continues with (the one it had reached).",
            compare="buggy/fixed",
            at_least=16,
            dtypes=("float16",),
            quotes=(("buggy", "65536 instead"), ("fixed", "of 1024")),
        ),
        Prediction(
            "overflow",
            "skipped_after_resume",
            "The resumed run skips one step per halving back to the saved scale: buggy minus fixed skipped "
            "steps after the resume is log2(65536 / saved scale), within 20% (give or take one step: an "
            "overflow later on may fall to either run).",
            compare="buggy-fixed",
            at_least=0.8,
            at_most=1.2,
            expected="buggy.halvings_to_saved_scale",
            dtypes=("float16",),
            quotes=(("buggy", "skipped 7 of"), ("fixed", "resume skipped 1")),
            happened="buggy.halvings_to_saved_scale",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        if not model.float16_possible:
            return
        reported: Set[str] = set()
        facts = model.facts(Checkpoints)
        # The GradScalers the file builds, and those a function of the file or of another
        # linted module builds for it (`scaler = build_scaler()`), quoted as built there.
        built = [(scaler, record, f"`{source_text(record.node)}`") for scaler, record in model.grad_scalers_built()]
        built += [(scaler, record, f"`{source_text(record.node)}`, which builds {there}") for scaler, record, there in facts.scalers_built_by_calls()]
        for scaler, record, construction in built:
            restore = facts.restored_before(record, scaler.key)
            if restore is not None:
                yield Report(record.node, Message.split(_built_again(scaler, f"`{source_text(record.node)}`", restore)))
                continue
            # Quote a save where there is one: the optimizer's own state_dict() first, then a
            # call whose summary says it saves it, then one named like checkpointing.
            checkpoints = sorted(facts.optimizer_checkpoints(scaler.key), key=lambda c: (c.restores, not c.direct, c.via is None))
            if checkpoints and scaler.key not in reported and facts.scaler_state_kept(scaler.key) is None:
                reported.add(scaler.key)
                # Where the fix goes: the checkpoint that holds the optimizer's state.
                yield Report(_checkpoint_at(checkpoints[0], model), Message.split(_not_checkpointed(scaler, construction, checkpoints[0])))
            elif checkpoints and scaler.key not in reported:
                # Half of it: saved but never restored on resume, or restored but never saved.
                half = facts.half_kept(scaler.key, checkpoints)
                if half is not None:
                    reported.add(scaler.key)
                    yield Report(_checkpoint_at(half, model), Message.split(_half_kept(scaler, half)))

    VALID = (
        # The canonical checkpoint: the scaler's state beside the optimizer's.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
if args.resume:
    ckpt = torch.load(args.resume)
    optimizer.load_state_dict(ckpt["optimizer"])
    scaler.load_state_dict(ckpt["scaler"])
torch.save({"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, "last.pt")
""",
        # An optional scaler, checkpointed when there is one; the dict built over several statements.
        """
import torch
scaler = torch.cuda.amp.GradScaler() if args.amp else None
def save(epoch):
    ckpt = {"epoch": epoch, "optimizer": optimizer.state_dict()}
    if scaler is not None:
        ckpt["scaler"] = scaler.state_dict()
    torch.save(ckpt, "last.pt")
""",
        # `enabled=use_amp`: the state is saved whatever it is.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
checkpoint = {"optimizer": optimizer.state_dict()}
checkpoint["grad_scaler"] = scaler.state_dict()
torch.save(checkpoint, path)
""",
        # A disabled scaler has no state worth keeping.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
torch.save({"optimizer": optimizer.state_dict()}, path)
""",
        # bfloat16 only: nothing overflows, the scale never falls.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
torch.save({"optimizer": optimizer.state_dict()}, path)
""",
        # A helper of the file that saves its parameter's state.
        """
import torch
def save_checkpoint(model, optimizer, grad_scaler, path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scaler": grad_scaler.state_dict()}, path)
scaler = torch.amp.GradScaler("cuda")
save_checkpoint(model, optimizer, scaler, "last.pt")
""",
        # The training arguments unpacked into another module's function, which may keep them.
        """
import torch
from engine import run_training
scaler = torch.amp.GradScaler("cuda")
params = (loader, model, optimizer, scaler)
run_training(*params)
torch.save({"optimizer": optimizer.state_dict()}, "best.pt")
""",
        # Checkpoint helpers of another module, handed the scaler.
        """
import torch
from utils import load_checkpoint, save_checkpoint
scaler = torch.amp.GradScaler(enabled=use_fp16)
net_g, optim_g, epoch, scaler_state = load_checkpoint(last_path, net_g, optim_g)
if scaler_state:
    scaler.load_state_dict(scaler_state)
save_checkpoint(net_g, optim_g, lr, epoch, last_path, scaler)
""",
        """
import torch
from utils import save_on_master
scaler = torch.amp.GradScaler("cuda")
save_on_master({"optimizer": optimizer.state_dict()}, path, scaler=scaler)
""",
        # A trainer whose own state_dict() holds the scaler's.
        """
import torch
class Trainer:
    def __init__(self, model, optimizer):
        self.optimizer = optimizer
        self.grad_scaler = torch.cuda.amp.GradScaler()
    def state_dict(self):
        state = {"optimizer": self.optimizer.state_dict()}
        state["grad_scaler"] = self.grad_scaler.state_dict()
        return state
    def load_state_dict(self, state):
        self.optimizer.load_state_dict(state["optimizer"])
        self.grad_scaler.load_state_dict(state["grad_scaler"])
""",
        # The whole trainer object is saved; its class (elsewhere) includes the scaler.
        """
import torch
trainer.scaler = torch.amp.GradScaler("cuda")
trainer.optimizer.load_state_dict(torch.load(path)["optimizer"])
torch.save(trainer.state_dict(), path)
""",
        # Objects handed to a framework's checkpointing.
        """
import torch
from ignite.handlers import Checkpoint
scaler = torch.amp.GradScaler("cuda")
to_save = {"model": model, "optimizer": optimizer, "scaler": scaler}
Checkpoint.load_objects(to_load=to_save, checkpoint=torch.load(path))
optimizer.load_state_dict(torch.load(opt_path))
""",
        # accelerate saves its own scaler with save_state.
        """
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model, optimizer = accelerator.prepare(model, optimizer)
accelerator.save_state("ckpt")
torch.save(optimizer.state_dict(), "opt.pt")
""",
        # An in-memory copy of the optimizer is not a checkpoint.
        """
import copy, torch
scaler = torch.amp.GradScaler("cuda")
initial = copy.deepcopy(optimizer.state_dict())
optimizer.load_state_dict(initial)
""",
        # The scaler is built again only on the branch that does not resume.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
if args.resume:
    ckpt = torch.load(args.resume)
    scaler.load_state_dict(ckpt["scaler"])
    optimizer.load_state_dict(ckpt["optimizer"])
else:
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10)
torch.save({"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, path)
""",
        # Built again only when there was nothing to resume.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
if args.resume:
    ckpt = torch.load(args.resume)
    scaler.load_state_dict(ckpt["scaler"])
    optimizer.load_state_dict(ckpt["optimizer"])
if not args.resume:
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**10)
torch.save({"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, path)
""",
        # A scaler local to a function that no checkpoint is connected to (a warm-up, a
        # benchmark): it does not live across a resume.
        """
import torch
def warmup(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
def save(model, optimizer, scaler, path):
    torch.save({"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, path)
""",
        # No checkpoint at all: nothing to resume.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
torch.save(model.state_dict(), "model.pt")
""",
    )
    INVALID = (
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
""",
            at=((10, 1),),
        ),
        # Resume only: the optimizer's state comes back, the scaler's does not.
        Flagged(
            """
import torch
class Trainer:
    def __init__(self, model, optimizer, use_amp):
        self.optimizer = optimizer
        self.scaler = torch.cuda.amp.GradScaler(enabled=use_amp)
    def resume(self, path):
        state = torch.load(path)
        self.optimizer.load_state_dict(state["optimizer"])
""",
            at=((9, 9),),
        ),
        # The training arguments packed in a tuple for a helper that saves nothing are not a
        # checkpoint of the scaler; the finding is on the save of the dict the state was put in.
        Flagged(
            """
import torch
def train_epoch(loader, model, optimizer, scaler):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
scaler = torch.amp.GradScaler("cuda")
params = (loader, model, optimizer, scaler)
for epoch in range(epochs):
    train_epoch(*params)
    ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    torch.save(ckpt, "last.pt")
""",
            at=((15, 5),),
        ),
        # Another module's checkpoint helpers get the optimizer, not the scaler.
        Flagged(
            """
import torch
from utils import load_checkpoint, save_checkpoint
optim_g = torch.optim.AdamW(net_g.parameters(), lr)
net_g, optim_g, epoch = load_checkpoint(last_path, net_g, optim_g)
scaler = torch.amp.GradScaler(enabled=use_fp16)
for epoch in range(epoch, epochs):
    train_and_evaluate(net_g, optim_g, scaler, loader)
    save_checkpoint(net_g, optim_g, lr, epoch, last_path)
""",
            at=((9, 5),),
        ),
        # Handed to a training function only, which does not checkpoint it.
        Flagged(
            """
import torch
from engine import train_one_epoch
scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
for epoch in range(args.epochs):
    train_one_epoch(model, loader, optimizer, scaler)
    torch.save({"optimizer": optimizer.state_dict(), "epoch": epoch}, "last.pt")
""",
            at=((7, 5),),
        ),
        # Saved with the optimizer's, but the resume restores only the optimizer's.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
if args.resume:
    ckpt = torch.load(args.resume)
    optimizer.load_state_dict(ckpt["optimizer"])
torch.save({"optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, "last.pt")
""",
            at=((6, 5),),
        ),
        # ignite's Checkpoint handed the model and the optimizer, not the scaler.
        Flagged(
            """
import torch
from ignite.handlers import Checkpoint
scaler = torch.amp.GradScaler("cuda")
to_save = {"model": model, "optimizer": optimizer}
trainer.add_event_handler(Events.EPOCH_COMPLETED, Checkpoint(to_save, save_dir))
""",
            at=((6, 51),),
        ),
        # Built again after its state was restored.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
ckpt = torch.load(path)
optimizer.load_state_dict(ckpt["optimizer"])
scaler.load_state_dict(ckpt["scaler"])
scaler = torch.amp.GradScaler("cuda")
""",
            at=((7, 10),),
        ),
    )


def _checkpoint_at(optimizer: StateCall, model: SemanticModel) -> cst.CSTNode:
    """The call that makes the checkpoint: `torch.save({...})` around `optimizer.state_dict()`,
    `save_checkpoint(model, optimizer, ...)`, or the save of the variable the state was put in
    (`ckpt = {...}` ... `torch.save(ckpt, path)`); the state call itself when no such call is
    in the same function."""
    if not optimizer.direct and optimizer.via is None:
        return optimizer.node  # the checkpointing call itself: `Checkpoint(to_save, ...)`
    line = model.statement_of(optimizer.node)
    if isinstance(line, cst.SimpleStatementLine):
        small = line.body[0]
        value = small.value if isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)) else None
        if isinstance(value, cst.Call):
            return value
        target = small.targets[0].target if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
        if isinstance(target, cst.Name):
            for record in optimizer.record.unit.calls:
                if _saves(record.node, target.value):
                    return record.node
    return optimizer.node


def _saves(call: cst.Call, variable: str) -> bool:
    """`torch.save(ckpt, path)`, `accelerator.save(ckpt, ...)`, `save_checkpoint(ckpt)`."""
    callee = (dotted_name(call.func) or "").rsplit(".", 1)[-1].lower()
    return any(word in callee for word in _SAVING) and any(
        isinstance(arg.value, cst.Name) and arg.value.value == variable for arg in call.args
    )


def _not_checkpointed(scaler: ScalerInfo, construction: str, optimizer: StateCall) -> str:
    what = "saves" if not optimizer.restores else "restores"
    if optimizer.direct:
        where = f"`{source_text(optimizer.node)}`"
    elif optimizer.via is not None:
        where = f"`{source_text(optimizer.node)}`, which {what} {optimizer.via}"
    else:
        where = f"`{source_text(optimizer.node.func)}(..., {optimizer.receiver}, ...)`"
    return (
        f"This checkpoint {what} the optimizer's state ({where}) but not `{scaler.name}`'s "
        f"({construction}): a resumed run starts again at the initial scale (65536 by default) "
        f"and skips steps until it is back at the scale the run had reached. Save "
        f"`{scaler.name}.state_dict()` in the checkpoint and call `{scaler.name}.load_state_dict(...)` on resume."
    )


def _half_kept(scaler: ScalerInfo, optimizer: StateCall) -> str:
    where = f"`{source_text(optimizer.node)}`" if optimizer.direct or optimizer.via is None else f"`{source_text(optimizer.node)}`, which restores {optimizer.via}"
    if optimizer.restores:
        return (
            f"This resume restores the optimizer's state ({where}) but not `{scaler.name}`'s, which the file saves: "
            f"the resumed run starts again at the initial scale (65536 by default) and skips steps until it is back "
            f"at the scale the run had reached. Call `{scaler.name}.load_state_dict(...)` with the saved state on resume."
        )
    return (
        f"This checkpoint saves the optimizer's state ({where}) but not `{scaler.name}`'s, which the resume restores: "
        f"the checkpoint has no scaler state to restore. Save `{scaler.name}.state_dict()` beside the optimizer's."
    )


def _built_again(scaler: ScalerInfo, construction: str, restore: StateCall) -> str:
    return (
        f"{construction} builds a new GradScaler after `{source_text(restore.node)}` restored "
        f"`{scaler.name}`: the restored scale is thrown away and the run starts again at the initial scale "
        "(65536 by default). Build the "
        "scaler once, before restoring its state."
    )
