from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence

import libcst as cst

from amplint.lint.evidence import AUTOCAST, STEP
from amplint.lint.fix import out_of_region
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule, quote
from amplint.semantic import (
    AutocastRegion,
    CodeUnit,
    EventKind,
    LoopFrame,
    Occurrence,
    SemanticModel,
    WithFrame,
    source_text,
)

STEPS = (EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP)
BACKWARDS = (EventKind.BACKWARD, EventKind.FRAMEWORK_BACKWARD)
# An optimizer whose step() runs an op autocast lowers (`row_var @ col_var`): under float16
# autocast its second-moment estimate underflows. Third-party Adafactors (transformers, timm,
# fairseq) form the same product with an elementwise `mul`, which autocast leaves alone.
LOWERED_STEP = frozenset({"torch.optim.Adafactor", "torch.optim._adafactor.Adafactor"})
CLEARS_CACHE = "torch.clear_autocast_cache"


class StepInsideAutocast(Rule):
    """An optimizer step inside an autocast context that a later forward pass shares (stale cached weights), or Adafactor's step under float16 autocast.

    ## What it does
    Flags an optimizer step (`optimizer.step()`, `scaler.step(optimizer)`) that autocast
    corrupts, in either of two ways:
    - The step runs inside an autocast context (a `with` or an autocast-decorated function)
      that a later forward pass runs in too: the context spans a loop around the step whose
      iterations run a backward under an enabled region, or a backward follows the step
      inside it. Any enclosing context counts, enabled or not, and the step counts wherever it
      sits inside it, a nested `autocast(enabled=False)` included. A context opened with
      `cache_enabled=False`, or a loop that calls `torch.clear_autocast_cache()`, is not
      flagged.
    - The step of a `torch.optim.Adafactor` runs inside an enabled region that may be
      float16 (or whose dtype is not known at lint time).

    Any other step inside a region that ends with the iteration (SGD, Adam, AdamW, ...) is
    not flagged: `amplint verify` measured it training bit-identically to a step after the
    region. Function and class bodies defined inside a region are not executed there.

    ## Why is this bad?
    autocast keeps the low-precision copy it casts of each float32 weight until the outermost
    autocast context exits; a nested region's exit, enabled or not, clears nothing. The step
    updates the float32 weights in place, and every forward after it inside the same context
    reuses the copies cast before it: the model trains on weights it no longer has. Only the
    forward pass and the loss belong under autocast, in a region that ends before the update.

    Adafactor's `step()` estimates the gradients' second moment as a matrix product of the
    row and column means of the squared gradients, and autocast runs matrix products in the
    low-precision dtype: in float16 that product of small numbers underflows to zero, and the
    update divides by it.

    ## What goes wrong at runtime
    Silent, and in eager mode with float32 weights (what autocast caches, and what was
    measured): the logged loss stays at its first value while the true float32 loss follows
    the first step's gradient applied over and over. Measured by `amplint verify` (CPU, a
    32-64-1 MLP, 30 steps, float16 and bfloat16 alike): with one region around the loop the
    logged loss never moved from 0.118, and the true loss rose to 5.7 instead of falling to
    0.015 with SGD, and ended at 0.39 instead of 0.0043 with Adam. Moving the backward and
    the step into a nested `autocast(enabled=False)` changed nothing, to the last digit; nor
    did per-iteration regions inside a loop that an outer `autocast(enabled=False)` spans.
    The same whole-loop region with `cache_enabled=False`, or with
    `torch.clear_autocast_cache()` after each step, trained exactly like the fixed run: the
    cache is the mechanism. A step inside a region that ends with the iteration keeps no
    stale copy: SGD and Adam stepped there trained bit-identically to stepping after it.
    `torch.optim.Adafactor` stepped there ended with a NaN loss under float16, in its
    for-loop implementation (`foreach=False`, the CPU default) and its foreach one (CUDA's),
    and trained like the fixed run under bfloat16 (within 1%). Every claim held with other
    seeds, half and one and a half times the learning rate, and half and one and a half
    times the steps (`amplint verify --perturb`).

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
    directly in a `with` whose only item is the enabled autocast (not a helper that steps). A
    context around the whole loop, or one the step reaches through a nested disabled region,
    gets no fix: narrowing it to the forward pass is a rewrite to make by hand.
    `amplint verify --fixes` proves a partial fix: the per-iteration scenarios of the fixed
    `buggy.py` report exactly what `fixed.py` reports; the ones whose context spans the loop
    (`sgd-whole-loop`, `adam-whole-loop`, `sgd-step-in-disabled-region`,
    `sgd-per-iteration-in-outer-context`) are still flagged and still differ.
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
            "With one region around the whole loop, the true float32 loss after the SGD steps ends at least 10x above the "
            "fixed run's.",
            compare="buggy/fixed",
            at_least=10,
            quotes=(("buggy", "5.7 instead"), ("fixed", "0.015 with")),
        ),
        Prediction(
            "adam-whole-loop",
            "logged_loss_change",
            "The same with Adam: the logged loss never moves.",
            compare="buggy",
            at_least=0,
            at_most=0,
        ),
        Prediction(
            "adam-whole-loop",
            "true_loss",
            "The same with Adam: the true loss ends at least 2x above the fixed run's.",
            compare="buggy/fixed",
            at_least=2,
            quotes=(("buggy", "0.39 instead"), ("fixed", "0.0043 with")),
        ),
        Prediction(
            "sgd-step-in-disabled-region",
            "logged_loss_change",
            "With the backward and the step in a nested `autocast(enabled=False)` inside the whole-loop region, the logged "
            "loss still never moves: the nested region does not clear the cache.",
            compare="buggy",
            at_least=0,
            at_most=0,
        ),
        Prediction(
            "sgd-step-in-disabled-region",
            "true_loss",
            "With the step in a nested disabled region, the true loss still ends at least 10x above the fixed run's.",
            compare="buggy/fixed",
            at_least=10,
        ),
        Prediction(
            "sgd-per-iteration-in-outer-context",
            "logged_loss_change",
            "Per-iteration regions inside a loop that an outer `autocast(enabled=False)` spans keep the cache too: the logged "
            "loss never moves.",
            compare="buggy",
            at_least=0,
            at_most=0,
        ),
        Prediction(
            "sgd-per-iteration-in-outer-context",
            "true_loss",
            "Per-iteration regions inside an outer context: the true loss ends at least 10x above the fixed run's.",
            compare="buggy/fixed",
            at_least=10,
        ),
        Prediction(
            "sgd-whole-loop-no-cache",
            "true_loss",
            "Control: the same whole-loop region with `cache_enabled=False` trains like the fixed run (within 0.1%), so the "
            "stale weight cache is what freezes training.",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
        ),
        Prediction(
            "sgd-whole-loop-cache-cleared",
            "true_loss",
            "Control: the whole-loop region with `torch.clear_autocast_cache()` after each step trains like the fixed run "
            "(within 0.1%).",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
        ),
        Prediction(
            "sgd-per-iteration",
            "true_loss",
            "Control: with one region per iteration, stepping SGD inside it makes no measurable difference (within 0.1%).",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
        ),
        Prediction(
            "adam-per-iteration",
            "true_loss",
            "Control: with one region per iteration, stepping Adam inside it makes no measurable difference (within 0.1%).",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
        ),
        Prediction(
            "adafactor-per-iteration",
            "diverged",
            "Adafactor (`foreach=False`), whose step() runs a matrix product, stepped inside a per-iteration float16 region "
            "ends with a NaN loss.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
        Prediction(
            "adafactor-foreach-per-iteration",
            "diverged",
            "The same with Adafactor's foreach implementation (CUDA's default): a NaN loss under float16.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
        Prediction(
            "adafactor-per-iteration",
            "true_loss",
            "bfloat16 control: the same Adafactor loop inside a bfloat16 region trains like the fixed run (within 1%).",
            compare="buggy/fixed",
            at_least=0.99,
            at_most=1.01,
            dtypes=("bfloat16",),
            kind="control",
            quotes=(("within", "1%"),),
        ),
        Prediction(
            "adafactor-foreach-per-iteration",
            "true_loss",
            "bfloat16 control: the foreach Adafactor inside a bfloat16 region trains like the fixed run (within 1%).",
            compare="buggy/fixed",
            at_least=0.99,
            at_most=1.01,
            dtypes=("bfloat16",),
            kind="control",
            quotes=(("within", "1%"),),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for unit in model.units:
            for step in model.occurrences_in(unit):
                if step.kind not in STEPS:
                    continue
                stale = _stale_cache(model, step)
                if stale is not None:
                    yield Report(step.call_site, _stale_message(step, stale), fix=out_of_region(model, step), occurrence=step)
                    continue
                # Where a helper's own region steps an optimizer handed to it, the caller may be the
                # one that shows it is an Adafactor: the engine keeps the innermost report.
                region = step.region
                if region is None or not _may_be_float16(region):
                    continue
                built = _lowering_optimizer(model, step)
                if built is not None:
                    yield Report(step.call_site, _lowered_message(step, region, built), fix=out_of_region(model, step), occurrence=step)

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
        # A step inside a region that ends with the iteration: measured harmless for SGD and Adam.
        """
import torch
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        # A scheduler or EMA stepping inside the region is not an optimizer update.
        """
import torch
with torch.autocast("cuda"):
    for x in loader:
        out = model(x)
        lr_scheduler.step()
        ema.step()
        pbar.update()
""",
        # The cache is off, or cleared after every update: each forward casts the weights afresh.
        """
import torch
with torch.autocast("cuda", cache_enabled=False):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
""",
        """
import torch
with torch.autocast("cuda"):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        torch.clear_autocast_cache()
""",
        # Adafactor under bfloat16: measured within 0.5% of stepping after the region.
        """
import torch
optimizer = torch.optim.Adafactor(model.parameters())
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
        loss.backward()
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
        # Turned off around the step, the region still keeps its cache for the next forward.
        Flagged(
            """
import torch
with torch.autocast("cuda"):
    for x, y in loader:
        loss = loss_fn(model(x), y)
        with torch.autocast("cuda", enabled=False):
            loss.backward()
            optimizer.step()
""",
            at=((8, 13),),
        ),
        # An outer context, even a disabled one, keeps the per-iteration regions' cache alive.
        Flagged(
            """
import torch
with torch.autocast("cuda", enabled=False):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
""",
            at=((8, 9),),
        ),
        # A decorated function whose loop steps.
        Flagged(
            """
import torch
@torch.autocast("cuda", dtype=torch.bfloat16)
def train(model, loader, optimizer):
    for x in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
""",
            at=((8, 9),),
        ),
        # A forward after the step in the same region: a GAN's generator pass sees the old discriminator.
        Flagged(
            """
import torch
for real, z in loader:
    with torch.autocast("cuda"):
        d_loss = disc(real).mean() - disc(gen(z)).mean()
        d_loss.backward()
        d_optimizer.step()
        g_loss = -disc(gen(z)).mean()
        g_loss.backward()
        g_optimizer.step()
""",
            at=((7, 9),),
        ),
        # Adafactor's step under float16 autocast (the fix moves the step, and what follows it, out of the `with`).
        Flagged(
            """
import torch
from torch.optim import Adafactor
optimizer = Adafactor(model.parameters(), lr=1e-2)
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            at=((9, 9),),
        ),
    )


@dataclass(frozen=True)
class Stale:
    """Why a step's update goes unseen: the context whose cache it outlives, and what shows a later forward."""

    context: AutocastRegion
    disabled_between: bool  # the step sits in a nested disabled region (or the context itself is off)
    looped: bool  # a loop repeats the forward after the step (else a backward follows it)


def _stale_cache(model: SemanticModel, step: Occurrence) -> Optional[Stale]:
    """The autocast context the step runs in whose weight cache a later forward reads, or None.

    Local here until the semantic core offers it: each enclosing autocast context of the call,
    enabled or not (`model.regions` only reports the innermost enabled one), and the loops
    around the call down through the helpers it runs in."""
    unit = step.unit
    record = model.call_record(step.call_site) if isinstance(step.call_site, cst.Call) else None
    if record is None or record.unit is not unit:
        return None
    contexts = [(-1, region) for region in model.regions.unit_regions.get(id(unit), ())]
    for position, frame in enumerate(record.frames):
        if isinstance(frame, WithFrame):
            region = model.regions.region_of(frame, unit)
            if region is not None:
                contexts.append((position, region))
    below = _frames_below(model, step)
    for position, context in contexts:  # outermost first
        inner = record.frames[position + 1 :]
        nested_off = any(
            isinstance(frame, WithFrame) and (region := model.regions.region_of(frame, unit)) is not None and not region.active
            for frame in inner
        )
        if step.region is None and not nested_off and context.active:
            continue  # the context is off where the step runs (`enabled=scaler is not None`, the no-scaler branch)
        disabled = nested_off or not context.active
        for loop in [frame for frame in list(inner) + below if isinstance(frame, LoopFrame)]:
            if _forward_repeats(model, unit, loop, context) and not _clears_cache(model, loop):
                return Stale(context, disabled, looped=True)
        later = model.following(step, *BACKWARDS)
        if later is not None and _inside(model, later, record.frames[position] if position >= 0 else None) and _caches(context):
            return Stale(context, disabled, looped=False)
    return None


def _frames_below(model: SemanticModel, occurrence: Occurrence) -> List[object]:
    """The frames around the event inside the helpers `occurrence` runs it through (its own
    unit's frames aside): a loop in a helper repeats it too."""
    frames: List[object] = []
    for call in occurrence.via[1:] + ((occurrence.event.node,) if occurrence.via else ()):
        record = model.call_record(call) if isinstance(call, cst.Call) else None
        if record is None:  # a helper of another module: its code is not here
            break
        frames.extend(record.frames)
    return frames


def _chain_frames(model: SemanticModel, occurrence: Occurrence) -> List[object]:
    record = model.call_record(occurrence.call_site) if isinstance(occurrence.call_site, cst.Call) else None
    return (list(record.frames) if record is not None else []) + _frames_below(model, occurrence)


def _in_loop(frames: Sequence[object], loop: LoopFrame) -> bool:
    return any(isinstance(frame, LoopFrame) and frame.node is loop.node for frame in frames)


def _caches(region: AutocastRegion) -> bool:
    """Whether forwards in the region cast (and so cache) weights: enabled, low precision, the cache on."""
    return region.active and region.cache_enabled is not False


def _forward_repeats(model: SemanticModel, unit: CodeUnit, loop: LoopFrame, context: AutocastRegion) -> bool:
    """Whether each pass of `loop` runs a forward under a caching region: a backward (which a
    forward feeds) in the loop, and the loop's calls running in a region whose cache is on."""
    if not any(o.kind in BACKWARDS and _in_loop(_chain_frames(model, o), loop) for o in model.occurrences_in(unit)):
        return False
    contexts = [model.regions.context(record) for record in model.index.calls if _in_loop(record.frames, loop)]
    if any(found.region is not None and found.region.cache_enabled is not False for found in contexts):
        return True
    # a loop inside a helper: its calls see only the helper's regions, so the caller's counts
    return not any(record.unit is unit for record in model.index.calls if _in_loop(record.frames, loop)) and _caches(context)


def _clears_cache(model: SemanticModel, loop: LoopFrame) -> bool:
    return any(
        _in_loop(record.frames, loop) and model.qualified(record.node.func) == CLEARS_CACHE for record in model.index.calls
    )


def _inside(model: SemanticModel, occurrence: Occurrence, frame: Optional[object]) -> bool:
    """Whether `occurrence` runs inside the `with` of `frame` (None: a decorated function, the whole unit)."""
    if frame is None:
        return True
    assert isinstance(frame, WithFrame)
    return any(isinstance(each, WithFrame) and each.statement is frame.statement for each in _chain_frames(model, occurrence))


def _may_be_float16(region: AutocastRegion) -> bool:
    """float16 is one of the region's dtypes, or they are unknown (`dtype=amp_dtype`, a parameter)."""
    return region.may_be_float16 or not region.possible_dtypes


def _lowering_optimizer(model: SemanticModel, step: Occurrence) -> Optional[str]:
    """The construction of an optimizer whose step() runs an op autocast lowers, that the stepped
    optimizer may be (`torch.optim.Adafactor(...)`), or None."""
    ref = step.receiver if step.kind is EventKind.OPTIMIZER_STEP else step.argument
    if ref is None:
        return None
    for value, _ in model.values(step.unit, ref.text):
        if isinstance(value, cst.Call) and model.qualified(value.func) in LOWERED_STEP:
            return source_text(value.func)
    return None


def _stale_message(step: Occurrence, stale: Stale) -> Message:
    title = f"{quote(step)} runs inside `{source_text(stale.context.anchor)}`"
    if stale.looped:
        title += ", which spans the training loop"
    else:
        title += ", and a forward pass follows it there"
    if not stale.context.active:
        title += " and keeps the cache of the autocast regions inside it"
    elif stale.disabled_between:
        title += " (the nested region that turns autocast off keeps its cache)"
    help = (
        "autocast keeps the low-precision copies of the weights it casts until the outermost autocast context exits "
        "(a nested region, enabled or not, clears nothing), so the forwards after this step keep using the weights from "
        "before it: the logged loss freezes while the true loss drifts. Enter autocast inside the loop, around the "
        "forward pass only, and step after the `with` block."
    )
    return Message(title, help)


def _lowered_message(step: Occurrence, region: AutocastRegion, built: str) -> Message:
    title = (
        f"{quote(step)} runs inside `{source_text(region.anchor)}`, and the optimizer may be `{built}`, whose step "
        "runs a matrix product that autocast lowers to float16"
    )
    help = (
        "Adafactor estimates the gradients' second moment as `row_var @ col_var`; under float16 autocast that product of "
        "small numbers underflows to zero and the weights become NaN. Move the step after the `with` block."
    )
    return Message(title, help)
