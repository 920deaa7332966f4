from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Set

import libcst as cst

from amplint.analyses.sharding import Sharding
from amplint.lint.evidence import GRAD_SCALER
from amplint.lint.rule import Flagged, Message, Report, Rule
from amplint.semantic import CallRecord, CodeUnit, EventKind, GuardFrame, SemanticModel, dotted_name, source_text

_SHARDED_SCALER = frozenset(
    {
        "torch.distributed.fsdp.ShardedGradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    }
)
# The scaler's own calls that tie it to a training function.
_SCALER_EVENTS = (EventKind.SCALE, EventKind.UNSCALE, EventKind.SCALER_STEP, EventKind.SCALER_UPDATE)


class FsdpPlainGradScaler(Rule):
    """A plain `GradScaler` for a `FullyShardedDataParallel` model: each rank checks only its own shard for inf/NaN.

    ## What it does
    Flags `torch.amp.GradScaler(...)` / `torch.cuda.amp.GradScaler(...)` (however imported)
    that the file trains with (`scaler.scale`, `unscale_`, `step` or `update`) when it also
    wraps a model in `torch.distributed.fsdp.FullyShardedDataParallel` (any import spelling)
    in code tied to the scaler: the function that builds the scaler or uses it, another
    method of the same class, a function of the file one of those calls
    (`model = wrap_fsdp(model)`), or one that calls them (`model = FSDP(model)`, then
    `train(model)`). A function of another linted module that returns such a wrap counts
    as one where it is called (`model = shard_model(model)`, with `def shard_model(m):
    return FSDP(m, ...)` in `dist_utils.py`).

    Not flagged: `ShardedGradScaler`; a file that builds a `ShardedGradScaler` too (one scaler
    per path: `ShardedGradScaler() if fsdp else GradScaler()`); a scaler built on the other
    branch of the `if` that wraps the model (`if fsdp: ... else: scaler = GradScaler()`);
    DDP; FSDP with `ShardingStrategy.NO_SHARD` (every rank has all the gradients) or with
    `MixedPrecision(param_dtype=torch.bfloat16)`; a scaler built with `enabled=False`, serving
    only bfloat16 autocast, or built and handed on without the file training with it (a
    `State(scaler=GradScaler())` in a checkpoint test); FSDP named only in a comment,
    a string or an `isinstance` check; an FSDP wrap in a function unrelated to the scaler's.
    `fully_shard` (FSDP2) is not flagged either: its gradients are DTensors, and a plain
    GradScaler's inf check on them is reduced across the ranks (see below).

    ## Why is this bad?
    Under FSDP each rank holds a shard of every gradient. `GradScaler.unscale_()` looks for
    inf/NaN in the gradients it is given, the local shard, and decides alone whether to skip
    the step and halve the scale. When an overflow lands in one rank's shard, that rank skips
    its step and halves its scale while the others step and keep theirs: from then on the
    ranks scale their losses differently, and the gradients FSDP's reduce-scatter averages
    mix different scales, so every rank unscales a wrong gradient. `ShardedGradScaler`
    (`torch.distributed.fsdp.sharded_grad_scaler`) all-reduces the found-inf flag first, so
    every rank skips together.

    ## What goes wrong at runtime
    No `amplint verify` fixture: a two-process FSDP run needs a process group and, for a
    measurement worth the name, overflows placed in one rank's shard; the claim rests on the
    torch source, read on torch 2.13. `GradScaler.unscale_` computes `found_inf` from
    `torch._amp_foreach_non_finite_check_and_unscale_` over the optimizer's local gradient
    tensors and never communicates; `ShardedGradScaler.unscale_` does the same and then
    `dist.all_reduce(found_inf)` over its process group ("Synchronize the detected inf
    across the ranks"), so `step()` and `update()` see the same flag on every rank. Under
    FSDP2 (`fully_shard`) the gradients are DTensors, and DTensor's dispatcher runs that op
    through `found_inf_reduce_handler`, which reduces the flag across the mesh: there a plain
    GradScaler is correct, as torchtitan and accelerate use it. `tests/test_amp016_amp017_claims.py`
    holds the installed torch to each of these facts. The damage is silent (wrong gradients
    after the first disagreement), but unmeasured here, so the rule is a warning.

    ## Example
    ```python
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    model = FSDP(model)
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Use instead
    ```python
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    model = FSDP(model)
    scaler = ShardedGradScaler()
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    No fix. `ShardedGradScaler` takes a `process_group` where the model's is not the default
    one, which is for the author to say.
    """

    code = "AMP017"
    name = "fsdp-plain-grad-scaler"
    severity = "warning"
    triggers = ("FullyShardedDataParallel",)
    requires = ("GradScaler",)
    needs = ({GRAD_SCALER},)

    def check(self, model: SemanticModel) -> Iterator[Report]:
        if not model.float16_possible or _builds_sharded_scaler(model):
            return
        sharding = model.facts(Sharding)
        wraps = [record for record in model.index.calls if sharding.wraps(record)]
        if not wraps:
            return
        callees = _callees(model)
        for scaler, record in model.grad_scalers_built():
            if _is_sharded_scaler(record.node, model):
                continue
            related = _related_units(scaler.key, record, model)
            if len(related) == 1 and not _uses_scaler(record.unit, scaler.key, model):
                continue  # built and handed on (a state object, a checkpoint test): not trained with here
            reach = _reachable(related, callees)
            for wrap in wraps:
                if _tied(wrap.unit, related, reach, callees) and not _exclusive(wrap, record, model):
                    yield Report(record.node, _message(record, wrap, sharding.foreign_wrap(wrap)))
                    break

    VALID = (
        # The sharded scaler.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
model = FSDP(model)
scaler = ShardedGradScaler()
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # One scaler per path.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
def train(model, args):
    if args.fsdp:
        model = FSDP(model)
    scaler = ShardedGradScaler() if args.fsdp else torch.amp.GradScaler("cuda")
    return model, scaler
""",
        # The plain scaler only on the branch that does not wrap.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.nn.parallel import DistributedDataParallel as DDP
def setup(model, use_fsdp):
    if use_fsdp:
        model = FullyShardedDataParallel(model)
        scaler = None
    else:
        model = DDP(model)
        scaler = torch.amp.GradScaler("cuda")
    return model, scaler
""",
        # DDP with a plain scaler; FSDP only in an isinstance check and a comment.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.nn.parallel import DistributedDataParallel as DDP
# With FSDP(model), use ShardedGradScaler instead.
model = DDP(model)
scaler = torch.amp.GradScaler("cuda")
if isinstance(model, FSDP):
    raise ValueError("FullyShardedDataParallel needs ShardedGradScaler")
""",
        # FSDP with bfloat16 and no scaler; a bfloat16-only scaler.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
for x in loader:
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
""",
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, MixedPrecision
model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(model)
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # FSDP2: the DTensor gradients' inf check is reduced across ranks.
        """
import torch
from torch.distributed.fsdp import fully_shard
for layer in model.layers:
    fully_shard(layer)
fully_shard(model)
scaler = torch.amp.GradScaler("cuda")
""",
        # An FSDP helper and a scaler in unrelated functions.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
def shard(model):
    return FSDP(model)
def train_single_gpu(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        # NO_SHARD: every rank holds every gradient.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, ShardingStrategy
model = FSDP(model, sharding_strategy=ShardingStrategy.NO_SHARD)
scaler = torch.amp.GradScaler("cuda")
""",
        # Built and handed on to a state object: not trained with here.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
def init_state(model, use_fsdp, use_grad_scaler):
    if use_fsdp:
        model = FSDP(model)
    kwargs = {}
    if use_grad_scaler:
        kwargs["scaler"] = torch.amp.GradScaler()
    return State(model=model, **kwargs)
""",
        # A disabled scaler.
        """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(model)
scaler = torch.amp.GradScaler("cuda", enabled=False)
""",
    )
    INVALID = (
        Flagged(
            """
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
model = FSDP(model)
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
            at=((5, 10),),
        ),
        # A trainer: FSDP in one method, the scaler in another.
        Flagged(
            """
import torch
import torch.distributed.fsdp as fsdp
from torch.cuda.amp import GradScaler
class Trainer:
    def __init__(self, model, use_fsdp):
        if use_fsdp:
            model = fsdp.FullyShardedDataParallel(model, device_id=torch.cuda.current_device())
        self.model = model
    def fit(self, loader, optimizer):
        scaler = GradScaler()
        for x in loader:
            with torch.autocast("cuda"):
                loss = self.model(x).sum()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
""",
            at=((11, 18),),
        ),
        # The wrap in a helper the training function calls.
        Flagged(
            """
import torch
from torch.distributed.fsdp.fully_sharded_data_parallel import FullyShardedDataParallel
def wrap(model):
    return FullyShardedDataParallel(model)
def main(model, loader, optimizer):
    model = wrap(model)
    scaler = torch.amp.GradScaler()
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            at=((8, 14),),
        ),
        # The wrap in the caller of the training function.
        Flagged(
            """
import torch
from torch.distributed import fsdp
def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
if __name__ == "__main__":
    model = fsdp.FullyShardedDataParallel(build_model())
    train(model, loader, torch.optim.AdamW(model.parameters()))
""",
            at=((5, 14),),
        ),
    )


def _is_sharded_scaler(call: cst.Call, model: SemanticModel) -> bool:
    """torch's `ShardedGradScaler`, or any class of that name (fairscale's, a project's own)."""
    name = model.qualified(call.func) or dotted_name(call.func) or ""
    return name in _SHARDED_SCALER or name.rsplit(".", 1)[-1] == "ShardedGradScaler"


def _builds_sharded_scaler(model: SemanticModel) -> bool:
    return any(_is_sharded_scaler(record.node, model) for record in model.index.calls)


def _related_units(key: str, record: CallRecord, model: SemanticModel) -> List[CodeUnit]:
    """The unit that builds the scaler and the others that scale, unscale, step or update with it."""
    return [record.unit] + [unit for unit in model.units if unit is not record.unit and _uses_scaler(unit, key, model)]


def _uses_scaler(unit: CodeUnit, key: str, model: SemanticModel) -> bool:
    return any(
        o.kind in _SCALER_EVENTS and o.receiver is not None and o.receiver.key == key for o in model.occurrences_in(unit)
    )


def _callees(model: SemanticModel) -> Dict[int, List[CodeUnit]]:
    """For each unit (by id), the functions of the file it calls by name: `f(...)` a module
    function, `self.f(...)` a method of its class."""
    by_name: Dict[str, CodeUnit] = {unit.name: unit for unit in model.units if not unit.is_module}
    found: Dict[int, List[CodeUnit]] = {}
    for unit in model.units:
        targets = found.setdefault(id(unit), [])
        for call in unit.calls:
            name = dotted_name(call.node.func)
            if name is None:
                continue
            if name.startswith("self.") and unit.class_name is not None:
                name = f"{unit.class_name}.{name[len('self.'):]}"
            callee = by_name.get(name)
            if callee is not None and callee is not unit:
                targets.append(callee)
    return found


def _reachable(units: List[CodeUnit], callees: Dict[int, List[CodeUnit]]) -> Set[int]:
    """The units (ids) `units` run, themselves and the functions they call, transitively."""
    seen: Set[int] = set()
    pending = list(units)
    while pending:
        unit = pending.pop()
        if id(unit) in seen:
            continue
        seen.add(id(unit))
        pending.extend(callees.get(id(unit), ()))
    return seen


def _tied(wrap: CodeUnit, related: List[CodeUnit], reach: Set[int], callees: Dict[int, List[CodeUnit]]) -> bool:
    """Whether the FSDP wrap runs in code tied to the scaler: a unit that builds or uses it,
    one those call, one that calls them (`model = FSDP(model); train(model)`), or another
    method of the same class."""
    if id(wrap) in reach or _reachable([wrap], callees) & {id(unit) for unit in related}:
        return True
    return wrap.class_name is not None and any(unit.class_name == wrap.class_name for unit in related)


def _exclusive(wrap: CallRecord, scaler: CallRecord, model: SemanticModel) -> bool:
    """Whether the wrap and the scaler's construction sit on opposite branches of one test."""
    if wrap.unit is not scaler.unit:
        return False
    taken = set()
    for frame in wrap.frames:
        if isinstance(frame, GuardFrame):
            taken.update(model.assumptions(frame.test, frame.outcome))
    for frame in scaler.frames:
        if isinstance(frame, GuardFrame):
            if any((cond, not value) in taken for cond, value in model.assumptions(frame.test, frame.outcome)):
                return True
    return False


def _message(scaler: CallRecord, wrap: CallRecord, helper_file: Optional[str] = None) -> Message:
    built = source_text(scaler.node)
    wrapped = source_text(wrap.node.func)
    where = f" (which wraps it in FullyShardedDataParallel in {helper_file})" if helper_file else ""
    return Message(
        f"`{built}` is a plain GradScaler, but the model is sharded by `{wrapped}(...)`{where}",
        help=(
            "Under FullyShardedDataParallel each rank checks only its own shard of the gradients for inf/NaN, so "
            "ranks disagree about skipping a step and their loss scales drift apart. Use "
            "`ShardedGradScaler()` from `torch.distributed.fsdp.sharded_grad_scaler`, which agrees across ranks."
        ),
    )
