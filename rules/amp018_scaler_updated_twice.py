from __future__ import annotations

from typing import FrozenSet, Iterator, List, Optional, Sequence, Tuple

import libcst as cst

from amplint.analyses.repetition import Loop, Repetitions, drawn_by, loop_header, loop_targets, runs_once
from amplint.lint.evidence import SCALE, STEP
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule, quote
from amplint.semantic import CodeUnit, EventKind, Occurrence, SemanticModel, children, iter_tree, source_text


# What makes a loop a training loop: it computes gradients in every iteration.
_GRADIENTS = (EventKind.BACKWARD, EventKind.SCALE, EventKind.FRAMEWORK_BACKWARD)


class ScalerUpdatedTwice(Rule):
    """One GradScaler's `update()` runs twice in every iteration of a training loop (a generator and a discriminator sharing a scaler).

    ## What it does
    Flags the second `scaler.update()` of an enabled GradScaler when another `update()` of
    the same scaler has already run in the same iteration of a training loop (a loop that
    also runs a backward): both written in that loop, or in helpers of the file it calls,
    both running in every iteration and under the same conditions. Typically one scaler
    serves two networks, `scaler.step(opt_d); scaler.update()` and then
    `scaler.step(opt_g); scaler.update()`. Also flags an update in a loop over the optimizers
    (`for opt in optimizers:`, `for i, opt in enumerate(self.optimizers):`, `zip(optimizers,
    losses)`) after the step of the optimizer that iteration draws, written there or in a
    per-optimizer method it calls (`self.optimizer_step(opt, idx)`): with more than one
    optimizer it runs several times per iteration. Not a loop over one optimizer
    (`for opt in [optimizer]:`), one that draws a scaler per optimizer, one that may skip an
    iteration's update (`if step % len(optimizers) != i: continue`, alternating networks), nor
    an update the method holds back until the last optimizer (`if idx is None or idx ==
    len(self.optimizers) - 1:`, whatever the file passes for `idx`). A hook a framework calls
    once per optimizer, with the optimizer's index (`optimizer_step(self, epoch, batch_idx,
    optimizer, optimizer_idx, ...)` of a Lightning 1.x module that manages its own scaler), is
    flagged when it steps its optimizer and updates at every call while its class shows more
    than one optimizer (`if optimizer_idx == 1:`). Updates in exclusive branches (`if train_d:` ...
    `else:`), under a condition that changes from one iteration to the next (accumulation),
    in and after the loop, in an `except` handler, of two different scalers, in a helper
    that may return before it, or in one helper called twice (the rule cannot tell it is
    the same scaler both times) are not flagged.

    ## Why is this bad?
    `update()` ends a GradScaler's iteration: it halves the loss scale when any step since
    the last update found inf/NaN gradients, and grows it after `growth_interval` clean
    updates. Called twice per iteration it counts two "iterations" for one: the scale grows
    twice as often as `growth_interval` says, and each decision to halve or grow sees only
    the steps since the other update, not the whole iteration. The PyTorch AMP examples for
    several optimizers call `scaler.update()` once, after every `scaler.step()` of the
    iteration; or give each network its own GradScaler.

    ## What goes wrong at runtime
    Silent: nothing raises or warns. Measured by `amplint verify` (CPU, two small networks
    sharing one scaler, `growth_interval=4`, 40 iterations): with no overflow (bfloat16) the
    buggy run's loss scale doubles 20 times against the fixed run's 10, with SGD and Adam
    alike; in float16, where the scale climbs to what float16 holds and each growth too many
    ends in an overflow, a halving and a skipped step, the scale still grew 15 times against
    9 with SGD and Adam. A scaler per network, the other fix, grows each scale as often as
    the fixed run's (a test edits buggy.py that way and the claims fail); it also skips more
    steps than one scaler updated once, so the skipped steps alone do not tell the mistake
    apart. With the default `growth_interval=2000` a growth too many comes about once per
    1000 iterations once the scale has reached its ceiling: the harm is small and bounded,
    so this is a warning.

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for real in loader:
        scaler.scale(d_loss(real)).backward()
        scaler.step(opt_d)
        scaler.update()
        scaler.scale(g_loss(real)).backward()
        scaler.step(opt_g)
        scaler.update()
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for real in loader:
        scaler.scale(d_loss(real)).backward()
        scaler.step(opt_d)
        scaler.scale(g_loss(real)).backward()
        scaler.step(opt_g)
        scaler.update()
    ```

    ## Fix safety
    No fix. Whether to keep one update after both steps or to give each network a scaler of
    its own is for the author to say.
    """

    code = "AMP018"
    name = "scaler-updated-twice"
    severity = "warning"
    needs = ({STEP}, {SCALE})

    PREDICTIONS = (
        Prediction(
            "sgd",
            "scale_doublings",
            "With no overflow, the loss scale doubles twice as often when it is updated twice per iteration.",
            compare="buggy/fixed",
            at_least=1.9,
            at_most=2.1,
            dtypes=("bfloat16",),
            quotes=(("buggy", "doubles 20 times"), ("fixed", "fixed run's 10")),
            happened="fixed.scale_doublings",
        ),
        Prediction(
            "adam",
            "scale_doublings",
            "With Adam the same: twice as many doublings of the loss scale.",
            compare="buggy/fixed",
            at_least=1.9,
            at_most=2.1,
            dtypes=("bfloat16",),
            happened="fixed.scale_doublings",
        ),
        Prediction(
            "sgd",
            "scale_growths",
            "In float16, where overflows halve the scale again, it still grows at least 1.5x as often; a scaler per "
            "network, the other fix, does not (each grows as often as the fixed run's).",
            compare="buggy/fixed",
            at_least=1.5,
            dtypes=("float16",),
            happened="fixed.scale_growths",
            quotes=(("buggy", "grew 15 times"), ("fixed", "against 9")),
        ),
        Prediction(
            "adam",
            "scale_growths",
            "With Adam the same: the scale grows at least 1.5x as often.",
            compare="buggy/fixed",
            at_least=1.5,
            dtypes=("float16",),
            happened="fixed.scale_growths",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        reported = set()
        for unit in model.units:
            occurrences = list(model.occurrences_in(unit))
            seen: List[Tuple[Occurrence, str, Loop, FrozenSet[Tuple[str, bool]]]] = []
            for update in occurrences:
                scaler = _plain_scaler(update, occurrences, model)
                loop = _training_loop(update, occurrences, model) if scaler is not None else None
                if loop is None or not model.facts(Repetitions).every_iteration(update.call_site, loop) or _maybe_exclusive(model, update, loop):
                    continue
                info = model.scalers.get(scaler)  # none for a scaler another module's class holds
                if info is not None and any(model.facts(Repetitions).inside(built, loop) for built in info.constructions):
                    continue  # a new scaler every iteration (AMP008's mistake), or each update its own
                conditions = _conditions(model, update, loop)
                first = next(
                    (
                        earlier
                        for earlier, key, other_loop, other_conditions in seen
                        if key == scaler
                        and other_loop is loop
                        and other_conditions == conditions
                        and earlier.event.node is not update.event.node
                    ),
                    None,
                )
                seen.append((update, scaler, loop, conditions))
                if first is None or id(update.call_site) in reported:
                    continue
                reported.add(id(update.call_site))
                yield Report(update.call_site, _message(update, first, loop, model.scaler_name(scaler)))
            # An update in a loop over the optimizers: once per optimizer stepped.
            for update in occurrences:
                scaler = _plain_scaler(update, occurrences, model)
                found = _per_optimizer(update, scaler, occurrences, model) if scaler is not None else None
                if found is None or id(update.call_site) in reported:
                    continue
                reported.add(id(update.call_site))
                yield Report(update.call_site, _per_optimizer_message(update, found[1], found[0], model.scaler_name(scaler)))
            # A hook called once per optimizer (`optimizer_step(self, ..., optimizer, optimizer_idx)`).
            index = _optimizer_index(unit, model)
            for update in occurrences if index is not None else ():
                scaler = _plain_scaler(update, occurrences, model)
                step = _hook_step(update, scaler, unit, occurrences, model) if scaler is not None else None
                if step is None or id(update.call_site) in reported:
                    continue
                reported.add(id(update.call_site))
                yield Report(update.call_site, _hook_message(update, step, unit, index, model.scaler_name(scaler)))

    VALID = (
        # The AMP docs' recipe: several optimizers, one update after the last step.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(d_loss(x)).backward()
    scaler.step(opt_d)
    scaler.scale(g_loss(x)).backward()
    scaler.step(opt_g)
    scaler.update()
""",
        # A scaler per network, each updated once.
        """
import torch
scaler_d = torch.amp.GradScaler("cuda")
scaler_g = torch.amp.GradScaler("cuda")
for x in loader:
    scaler_d.scale(d_loss(x)).backward()
    scaler_d.step(opt_d)
    scaler_d.update()
    scaler_g.scale(g_loss(x)).backward()
    scaler_g.step(opt_g)
    scaler_g.update()
""",
        # Exclusive branches: each iteration trains one network and updates once.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    if train_d:
        scaler.scale(d_loss(x)).backward()
        scaler.step(opt_d)
        scaler.update()
    else:
        scaler.scale(g_loss(x)).backward()
        scaler.step(opt_g)
        scaler.update()
""",
        # Alternating by iteration: the branches change from one iteration to the next.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    scaler.scale(d_loss(x)).backward()
    scaler.step(opt_d)
    scaler.update()
    if i % 5 == 0:
        scaler.scale(g_loss(x)).backward()
        scaler.step(opt_g)
        scaler.update()
""",
        # An update in the loop and another after it.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for epoch in range(epochs):
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
    scaler.update()
""",
        # Gradient accumulation: the update under the step's condition.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / 4).backward()
    if (i + 1) % 4 == 0:
        scaler.step(optimizer)
        scaler.update()
""",
        # One helper that steps and updates, called for each network: amplint does not follow
        # that the scaler is the same both times.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def finish(loss, optimizer):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
for x in loader:
    finish(d_loss(x), opt_d)
    finish(g_loss(x), opt_g)
""",
        # The update in an `except` handler runs instead of the one in the `try`, not after it.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    try:
        scaler.scale(d_loss(x)).backward()
        scaler.step(opt_d)
        scaler.update()
    except RuntimeError:
        scaler.update()
""",
        # A helper that may return before its update: perhaps the two never run together.
        """
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")
    def train_d(self, x):
        if self.phase != "d":
            return
        self.scaler.scale(self.d_loss(x)).backward()
        self.scaler.step(self.opt_d)
        self.scaler.update()
    def train_g(self, x):
        if self.phase != "g":
            return
        self.scaler.scale(self.g_loss(x)).backward()
        self.scaler.step(self.opt_g)
        self.scaler.update()
    def fit(self, loader):
        for x in loader:
            self.train_d(x)
            self.train_g(x)
""",
        # A scaler built anew in every iteration (AMP008's mistake): each one is updated once.
        """
import torch
for x in loader:
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(d_loss(x)).backward()
    scaler.step(opt_d)
    scaler.update()
    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(g_loss(x)).backward()
    scaler.step(opt_g)
    scaler.update()
""",
        # One update after the loop over the optimizers (the AMP docs' recipe), and a loop
        # over one optimizer.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    for optimizer, loss_fn in zip([opt_d, opt_g], [d_loss, g_loss]):
        scaler.scale(loss_fn(x)).backward()
        scaler.step(optimizer)
    scaler.update()
    for optimizer in [opt_main]:
        scaler.scale(main_loss(x)).backward()
        scaler.step(optimizer)
        scaler.update()
""",
        # A disabled scaler: its update does nothing.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
for x in loader:
    scaler.scale(d_loss(x)).backward()
    scaler.step(opt_d)
    scaler.update()
    scaler.scale(g_loss(x)).backward()
    scaler.step(opt_g)
    scaler.update()
""",
        # Different configuration flags: amplint does not know both are ever true.
        """
import torch
def train(loader, use_d, use_g):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        if use_d:
            scaler.scale(d_loss(x)).backward()
            scaler.step(opt_d)
            scaler.update()
        if use_g:
            scaler.scale(g_loss(x)).backward()
            scaler.step(opt_g)
            scaler.update()
""",
    )
    INVALID = (
        # Once per optimizer, in a loop over them.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    for optimizer, loss_fn in zip([opt_d, opt_g], [d_loss, g_loss]):
        scaler.scale(loss_fn(x)).backward()
        scaler.step(optimizer)
        scaler.update()
""",
            at=((8, 9),),
        ),
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(d_loss(x)).backward()
    scaler.step(opt_d)
    scaler.update()
    scaler.scale(g_loss(x)).backward()
    scaler.step(opt_g)
    scaler.update()
""",
            at=((10, 5),),
        ),
        # A trainer's attribute scaler, both updates under the same configuration flag.
        Flagged(
            """
import torch
class GanTrainer:
    def __init__(self, amp):
        self.amp = amp
        self.scaler = torch.amp.GradScaler("cuda", enabled=amp)
    def fit(self, loader):
        for x in loader:
            self.scaler.scale(self.d_loss(x)).backward()
            self.scaler.step(self.opt_d)
            self.scaler.update()
            self.opt_d.zero_grad()
            self.scaler.scale(self.g_loss(x)).backward()
            self.scaler.step(self.opt_g)
            self.scaler.update()
            self.opt_g.zero_grad()
""",
            at=((15, 13),),
        ),
        # Two step helpers, each ending with its own update: reported at the second call.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
def step_d(x):
    scaler.scale(d_loss(x)).backward()
    scaler.step(opt_d)
    scaler.update()
def step_g(x):
    scaler.scale(g_loss(x)).backward()
    scaler.step(opt_g)
    scaler.update()
for x in loader:
    step_d(x)
    step_g(x)
""",
            at=((14, 5),),
        ),
    )


def _plain_scaler(update: Occurrence, occurrences: Sequence[Occurrence], model: SemanticModel) -> Optional[str]:
    """The key of the GradScaler `update` is a `scaler.update()` of, when it is a plain one whose
    update the code calls itself (`SemanticModel.plain_grad_scaler`)."""
    if update.kind is not EventKind.SCALER_UPDATE or update.receiver is None:
        return None
    key = update.receiver.key
    return key if model.plain_grad_scaler(key, occurrences) else None


def _training_loop(update: Occurrence, occurrences: Sequence[Occurrence], model: SemanticModel) -> Optional[Loop]:
    """The innermost loop of the update's unit around it, when it runs a backward too and
    repeats its body. None when a helper on the way holds the update under a loop or an `if`
    of its own (that helper decides how often it runs)."""
    repetitions = model.facts(Repetitions)
    for node in update.via[1:] + ((update.event.node,) if update.via else ()):
        if repetitions.loops_around(node) or repetitions.branches_around(node):
            return None
    loops = repetitions.loops_around(update.call_site)
    if not loops:
        return None
    loop = loops[-1]
    if not any(o.kind in _GRADIENTS and repetitions.inside(o.call_site, loop) for o in occurrences):
        return None
    return loop if repetitions.repeats(loop) else None


def _per_optimizer(update: Occurrence, scaler: str, occurrences: Sequence[Occurrence], model: SemanticModel) -> Optional[Tuple[Loop, Occurrence]]:
    """The loop over optimizers that runs `update` once for each: a `for` whose every
    iteration steps the optimizer it draws through the scaler (`for opt in optimizers:
    scaler.step(opt)`, `self.optimizer_step(opt, idx)`) and then updates, with nothing on the
    way that holds the update back (`if idx == len(optimizers) - 1:`). Not a loop over one
    optimizer, nor one that draws the scaler too (a scaler per optimizer)."""
    repetitions = model.facts(Repetitions)
    for node in update.via[1:] + ((update.event.node,) if update.via else ()):
        if repetitions.loops_around(node) or _guarded(repetitions, node, model):
            return None
    receiver = update.receiver.text if update.receiver is not None else ""
    for loop in reversed(repetitions.loops_around(update.call_site)):
        if not repetitions.repeats(loop) or runs_once(loop) or receiver.split(".")[0] in loop_targets(loop):
            continue
        info = model.scalers.get(scaler)
        if info is not None and any(model.facts(Repetitions).inside(built, loop) for built in info.constructions):
            continue
        if not repetitions.every_iteration(update.call_site, loop) or _maybe_exclusive(model, update, loop) or _skips(loop):
            return None
        step = next(
            (
                o
                for o in occurrences
                if o.kind is EventKind.SCALER_STEP
                and o.receiver is not None
                and o.receiver.key == scaler
                and repetitions.inside(o.call_site, loop)
                and drawn_by(o.argument, loop)
                and occurrences.index(o) < occurrences.index(update)
            ),
            None,
        )
        if step is not None:
            return loop, step
    return None


# The parameter through which a framework tells a hook which optimizer it is called for
# (Lightning's `optimizer_step(..., optimizer, optimizer_idx, ...)` before 2.0).
_INDEX_PARAMETERS = ("optimizer_idx", "opt_idx", "optimizer_index")


def _optimizer_index(unit: CodeUnit, model: SemanticModel) -> Optional[str]:
    """The optimizer-index parameter of a method called once per optimizer, when its class
    shows more than one: it tests the index against another number than 0
    (`if optimizer_idx == 1:`) in any of its methods."""
    name = next((p for p in unit.parameters if p in _INDEX_PARAMETERS), None)
    if name is None or unit.class_name is None:
        return None
    for other in model.units:
        if other.class_name != unit.class_name:
            continue
        for node in iter_tree(other.node):
            if isinstance(node, cst.Comparison) and isinstance(node.left, cst.Name) and node.left.value in _INDEX_PARAMETERS:
                compared = node.comparisons[0].comparator
                if isinstance(compared, cst.Integer) and compared.evaluated_value != 0:
                    return name
    return None


def _hook_step(update: Occurrence, scaler: str, unit: CodeUnit, occurrences: Sequence[Occurrence], model: SemanticModel) -> Optional[Occurrence]:
    """The step of the hook's optimizer parameter before an update that runs at every call of
    the hook: no loop and no `if` the file does not fix on the way to it."""
    repetitions = model.facts(Repetitions)
    for node in (update.call_site,) + update.via[1:] + ((update.event.node,) if update.via else ()):
        if repetitions.loops_around(node) or _guarded(repetitions, node, model):
            return None
    if _maybe_exclusive_in(model, update, unit):
        return None
    return next(
        (
            o
            for o in occurrences[: occurrences.index(update)]
            if o.kind is EventKind.SCALER_STEP
            and o.receiver is not None
            and o.receiver.key == scaler
            and o.argument is not None
            and o.argument.text in unit.parameters
        ),
        None,
    )


def _maybe_exclusive_in(model: SemanticModel, update: Occurrence, unit: CodeUnit) -> bool:
    """A `return` or `raise` before the update in the hook itself or a helper on the way."""
    for earlier in iter_tree(unit.node):
        if earlier is update.call_site:
            break
        if isinstance(earlier, (cst.Return, cst.Raise)):
            return True
    return bool(update.via) and _maybe_exclusive(model, update, None)


def _hook_message(update: Occurrence, step: Occurrence, unit: CodeUnit, index: str, scaler: str) -> Message:
    method = unit.name.rsplit(".", 1)[-1]
    return Message(
        f"{quote(update)} updates `{scaler}` at every call of `{method}`, which runs once per optimizer (its "
        f"`{index}`), after {quote(step)}: several times in one iteration",
        help=(
            f"Each `{scaler}.update()` counts one iteration: the loss scale grows as many times faster as there are "
            f"optimizers. Update only for the last optimizer (`if {index} == len(optimizers) - 1:`), or give each "
            "optimizer its own GradScaler."
        ),
    )


def _skips(loop: Loop) -> bool:
    """A `continue` or `break` of the loop itself: an iteration may end before the update
    (`if step % len(optimizers) != i: continue` trains one optimizer per step)."""
    pending = list(loop.body.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.Continue, cst.Break)):
            return True
        if not isinstance(node, (cst.For, cst.While, cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            pending.extend(children(node))
    return False


def _guarded(repetitions: Repetitions, node: cst.CSTNode, model: SemanticModel) -> bool:
    """An `if` around a call in its unit whose outcome the file does not fix."""
    record = repetitions.record(node) if isinstance(node, cst.Call) else None
    return any(model.branches.truth(frame.test, record.unit) is None for frame in repetitions.branches_around(node)) if record else False


def _maybe_exclusive(model: SemanticModel, update: Occurrence, loop: Optional[Loop]) -> bool:
    """Whether the update may run instead of another rather than after it, in ways `if`
    branches do not show: in an `except` handler in the loop (the update of the failed
    `try`'s fallback), or in a helper that may `return` before it (`if not self.train_d:
    return`)."""
    handlers = [node for node in iter_tree(loop.body) if isinstance(node, cst.ExceptHandler)] if loop is not None else []
    if any(node is update.call_site for handler in handlers for node in iter_tree(handler)):
        return True
    for node in update.via[1:] + ((update.event.node,) if update.via else ()):
        record = model.call_record(node) if isinstance(node, cst.Call) else None
        if record is None:
            return True
        for earlier in iter_tree(record.unit.node):
            if earlier is node:
                break
            if isinstance(earlier, (cst.Return, cst.Raise, cst.Continue, cst.Break)):
                return True
    return False


def _conditions(model: SemanticModel, occurrence: Occurrence, loop: Loop) -> FrozenSet[Tuple[str, bool]]:
    """The `if` branches between `loop` and the call, by the text of the test and the branch:
    two updates under the same ones run together; under different ones, perhaps never."""
    branches = model.facts(Repetitions).branches_around(occurrence.call_site, loop)
    return frozenset((source_text(frame.test), frame.outcome) for frame in branches)


def _per_optimizer_message(update: Occurrence, step: Occurrence, loop: Loop, scaler: str) -> Message:
    header = loop_header(loop)
    optimizer = step.argument.text if step.argument is not None else "optimizer"
    return Message(
        f"{quote(update)} updates `{scaler}` once per optimizer of `{header}`, after {quote(step)}: with more "
        "than one optimizer, several times in one iteration",
        help=(
            f"Each `{scaler}.update()` counts one iteration: the loss scale grows as many times faster as there are "
            f"optimizers, each decision sees one optimizer's overflow only, and `{scaler}.step()` of the next "
            f"`{optimizer}` unscales with a scale changed since its backward. Call `{scaler}.update()` once, after "
            "the loop, or give each optimizer its own GradScaler."
        ),
    )


def _message(update: Occurrence, first: Occurrence, loop: Loop, scaler: str) -> Message:
    header = loop_header(loop)
    return Message(
        f"{quote(update)} updates `{scaler}` a second time in every iteration of `{header}`, after {quote(first)} earlier in the iteration",
        help=(
            f"Each `{scaler}.update()` counts one iteration: called twice per iteration, the loss scale grows twice "
            "as often as `growth_interval` says. Call `"
            f"{scaler}.update()` once, after the last `{scaler}.step()` of the iteration, or give each network "
            "its own GradScaler."
        ),
    )
