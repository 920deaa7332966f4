from __future__ import annotations

from typing import Iterator, List, Optional, Sequence, Tuple

import libcst as cst

from amplint.analyses.repetition import Loop, Repetition, Repetitions, drawn_by, loop_header, loop_targets, runs_once
from amplint.lint.evidence import BACKWARD, SCALE, STEP
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule, quote
from amplint.semantic import EventKind, HelperCall, Occurrence, SemanticModel, iter_tree, source_text


# What makes a loop a training loop: it computes gradients in every iteration.
_GRADIENTS = (EventKind.BACKWARD, EventKind.SCALE, EventKind.FRAMEWORK_BACKWARD)


class ScalerUpdateMissing(Rule):
    """A training loop calls `scaler.step(optimizer)` but never `scaler.update()`, or unscales every iteration but updates only on some.

    ## What it does
    Flags `scaler.step(optimizer)` of an enabled GradScaler in a training loop (a loop that
    also runs a backward) when no `scaler.update()` of the same scaler runs inside that loop:
    written there, or in a helper of the file the loop calls. An update under the same
    condition as the step counts; one after the loop does not. Also flags
    `scaler.unscale_(optimizer)` that runs in every iteration while every update in the loop
    sits under an `if` whose test changes from one iteration to the next and the unscale is
    not under (gradient accumulation that clips every micro-batch and steps every few), also
    when the loop writes accumulation as `if accum > 1: ... else: ...` (the update of the other
    branch never runs with it) or a loss-scaler wrapper of the file or of another linted module
    unscales on each call and updates every Nth (`if self.calls % self.accum == 0:`). A
    condition that is the same in every iteration (a configuration flag) is not followed; one
    the file's own values fix is evaluated with them (`if update:` in a `step(self, loss,
    update=False)` that no call passes `update` to never runs; `(i + 1) % self.accum == 0` with
    every construction leaving `accum` at 1 always does).

    Several optimizers, one scaler: flags a step that runs after the iteration's
    `scaler.update()`, which followed another optimizer's step, on gradients scaled before it,
    with no update after it (`scaler.step(opt_a); scaler.update(); scaler.step(opt_b)`); and an
    `unscale_()` of an optimizer already unscaled since the last update: again in the same
    iteration (directly or in a clip helper), or in a loop inside the iteration that does not
    draw the optimizer (`for module in [encoder, decoder]: scaler.unscale_(optimizer)`). A loop
    over the optimizers (`for opt in optimizers: scaler.step(opt)`) is not the training loop:
    an update in it under a test for the last one (`if idx == len(optimizers) - 1:`, as a
    per-optimizer hook writes it) runs once per iteration; under a test for another (`if idx ==
    0:`) it runs before the later optimizers' `unscale_()`, which is flagged.

    ## Why is this bad?
    `update()` is what ends an iteration for a GradScaler: it resets the per-optimizer state
    that `step()` and `unscale_()` record, and it adjusts the loss scale. Without it the
    scale never adapts, and the scaler refuses a second step, or a second unscale. A step after
    the update unscales its optimizer's gradients with the scale the update may have just
    halved or doubled, not the one they were scaled with.

    ## What goes wrong at runtime
    The mistake is loud. Measured by `amplint verify` (CPU, 20 steps, SGD and Adam, float16
    and bfloat16 alike): the second `scaler.step(optimizer)` raises `RuntimeError: step() has
    already been called since the last update().`, after the first step has been applied,
    while the fixed run completes all 20 steps. A run that catches the error, or resumes,
    has trained with a loss scale that never moved. An `unscale_()` on an iteration that
    skips the update makes the next one raise `RuntimeError: unscale_() has already been
    called on this optimizer since the last update()` (checked by hand on torch 2.13, CPU).

    ## Example
    ```python
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    ```

    ## Fix safety
    No fix. Where the update belongs (after the last optimizer's step of the iteration, under
    the same condition as the steps) is for the author to say.
    """

    code = "AMP015"
    name = "scaler-update-missing"
    severity = "warning"
    needs = ({STEP}, {BACKWARD, SCALE})

    PREDICTIONS = (
        Prediction(
            "sgd",
            "raised",
            "The second `scaler.step(optimizer)` raises a RuntimeError; the fixed run does not.",
            compare="buggy-fixed",
            at_least=1,
            at_most=1,
        ),
        Prediction(
            "sgd",
            "steps_completed",
            "The buggy run applies exactly one step before it raises, whatever the length of the run; the fixed run "
            "gets past the first.",
            compare="buggy",
            at_least=1,
            at_most=1,
            happened="fixed.steps_completed - 1",
        ),
        Prediction(
            "adam",
            "steps_completed",
            "With Adam the same: one step applied, then the raise.",
            compare="buggy",
            at_least=1,
            at_most=1,
            happened="fixed.steps_completed - 1",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        reported = set()
        for unit in model.units:
            occurrences = list(model.occurrences_in(unit))
            for call in occurrences:
                scaler = _plain_scaler(call, occurrences, model)
                loop = _training_loop(call, occurrences, model) if scaler is not None else None
                if loop is None or id(call.call_site) in reported:
                    continue
                updates = [other for other in occurrences if _updates(other, scaler, loop, model) and not _exclusive(other, call, loop, model)]
                name = model.scaler_name(scaler, call.receiver.text if call.receiver else "scaler")
                message = _message(call, loop, name, updates, model)
                if message is None and call.kind is EventKind.SCALER_STEP:
                    message = _after_update(call, loop, name, updates, occurrences, model)
                if message is None and call.kind is EventKind.UNSCALE:
                    message = _unscaled_again(call, loop, name, updates, occurrences, model)
                if message is not None:
                    reported.add(id(call.call_site))
                    yield Report(call.call_site, message)

    VALID = (
        # One unscale_ per optimizer, one update after the last optimizer's step (a hook called
        # once per optimizer, as Lightning 1.x's loop does).
        """
import torch
class Loop:
    def __init__(self, optimizers):
        self.optimizers = optimizers
        self.scaler = torch.amp.GradScaler("cuda")
    def optimizer_step(self, optimizer, optimizer_idx):
        self.scaler.unscale_(optimizer)
        self.scaler.step(optimizer)
        if optimizer_idx == len(self.optimizers) - 1:
            self.scaler.update()
    def fit(self, loader, model):
        for batch in loader:
            for optimizer_idx, optimizer in enumerate(self.optimizers):
                self.scaler.scale(model(batch, optimizer_idx)).backward()
                self.optimizer_step(optimizer, optimizer_idx)
""",
        # The protocol: step, then update, every iteration.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # The update in a helper the loop calls.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def finish(scaler, optimizer):
    scaler.step(optimizer)
    scaler.update()
for x in loader:
    scaler.scale(model(x).sum()).backward()
    finish(scaler, optimizer)
""",
        # Step and update under the same condition (gradient accumulation).
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / 4).backward()
    if (i + 1) % 4 == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
        # Two scalers, each updated.
        """
import torch
scaler_g = torch.amp.GradScaler("cuda")
scaler_d = torch.amp.GradScaler("cuda")
for x in loader:
    scaler_d.scale(d_loss(x)).backward()
    scaler_d.step(opt_d)
    scaler_d.update()
    scaler_g.scale(g_loss(x)).backward()
    scaler_g.step(opt_g)
    scaler_g.update()
""",
        # One scaler, several optimizers stepped in an inner loop, one update after it.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for optimizer in optimizers:
        scaler.step(optimizer)
    scaler.update()
""",
        # A step helper with a loop over optimizers; the update is the caller's.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
def step_all(optimizers):
    for optimizer in optimizers:
        scaler.step(optimizer)
for x in loader:
    scaler.scale(model(x).sum()).backward()
    step_all(optimizers)
    scaler.update()
""",
        # A backward and a step per optimizer in a loop over them, one update after it.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    for optimizer, loss_fn in zip(optimizers, losses):
        scaler.scale(loss_fn(x)).backward()
        scaler.step(optimizer)
    scaler.update()
""",
        # Each optimizer unscaled once per update, in a loop over them.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for optimizer in optimizers:
        scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    for optimizer in optimizers:
        scaler.step(optimizer)
    scaler.update()
""",
        # A disabled scaler steps without complaint.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
""",
        # One step, no loop: a single update after it is not the question.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
scaler.scale(model(x).sum()).backward()
scaler.step(optimizer)
""",
        # Accumulation that unscales under the same condition as its step and update.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / 4).backward()
    if (i + 1) % 4 == 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
""",
        # A step skipped by design, the unscale and the update kept every iteration.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for step, x in enumerate(loader):
    scaler.scale(model(x).sum()).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if step >= warmup:
        scaler.step(optimizer)
    scaler.update()
""",
        # Conditions that are the same in every iteration (configuration flags).
        """
import torch
def train(model, loader, optimizer, clip, amp):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        scaler.scale(model(x).sum()).backward()
        if clip:
            scaler.unscale_(optimizer)
        scaler.step(optimizer)
        if amp:
            scaler.update()
""",
        # An object known only by its `.step(optimizer)`: maybe a wrapper that updates inside.
        """
import torch
from .utils import Stepper
def train(model, loader, optimizer):
    stepper = Stepper()
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        loss.backward()
        stepper.step(optimizer)
""",
        # A loop that runs its body once.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    break
""",
    )
    INVALID = (
        # The update after the first optimizer's step: the second's gradients, scaled before
        # it, are unscaled by the new scale.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    scaler.scale(model(batch)).backward()
    for i, opt in enumerate(optimizers):
        scaler.unscale_(opt)
        scaler.step(opt)
        if i == 0:
            scaler.update()
""",
            at=((7, 9),),
        ),
        # Each optimizer unscaled every micro-batch, the update only every fourth.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, batch in enumerate(loader):
    scaler.scale(model(batch)).backward()
    for opt in optimizers:
        scaler.unscale_(opt)
        if (i + 1) % 4 == 0:
            scaler.step(opt)
    if (i + 1) % 4 == 0:
        scaler.update()
""",
            at=((7, 9),),
        ),
        # The decoder's step after the update, on gradients scaled before it.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt_enc)
    scaler.update()
    scaler.step(opt_dec)
""",
            at=((8, 5),),
        ),
        # One optimizer unscaled once per sub-network: the second raises.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    for module in [model.encoder, model.decoder]:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
""",
            at=((7, 9),),
        ),
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x in loader:
    scaler.scale(model(x).sum()).backward()
    scaler.step(optimizer)
    optimizer.zero_grad()
""",
            at=((6, 5),),
        ),
        # The update once per epoch, after the batch loop.
        Flagged(
            """
import torch
def train(model, loader, optimizer, epochs):
    scaler = torch.cuda.amp.GradScaler()
    for epoch in range(epochs):
        for x in loader:
            scaler.scale(model(x).sum()).backward()
            scaler.step(optimizer)
        scaler.update()
""",
            at=((8, 13),),
        ),
        # Two scalers, one of them never updated.
        Flagged(
            """
import torch
scaler_g = torch.amp.GradScaler("cuda")
scaler_d = torch.amp.GradScaler("cuda")
for x in loader:
    scaler_d.scale(d_loss(x)).backward()
    scaler_d.step(opt_d)
    scaler_d.update()
    scaler_g.scale(g_loss(x)).backward()
    scaler_g.step(opt_g)
""",
            at=((10, 5),),
        ),
        # Clipping every micro-batch, stepping every fourth: the second unscale_ raises.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for i, x in enumerate(loader):
    scaler.scale(model(x).sum() / 4).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    if (i + 1) % 4 == 0:
        scaler.step(optimizer)
        scaler.update()
""",
            at=((6, 5),),
        ),
        # The step in a helper the loop calls: reported at the call.
        Flagged(
            """
import torch
class Trainer:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")
    def optimize(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
    def fit(self, loader):
        for x in loader:
            self.optimize(self.model(x).sum())
""",
            at=((11, 13),),
        ),
    )


def _plain_scaler(call: Occurrence, occurrences: Sequence[Occurrence], model: SemanticModel) -> Optional[str]:
    """The key of the GradScaler `call` is a `scaler.step(...)` or `scaler.unscale_(...)` of,
    when it is a plain one whose update the code must call (`SemanticModel.plain_grad_scaler`)."""
    if call.kind not in (EventKind.SCALER_STEP, EventKind.UNSCALE) or call.receiver is None:
        return None
    key = call.receiver.key
    return key if model.plain_grad_scaler(key, occurrences) else None


def _training_loop(step: Occurrence, occurrences: Sequence[Occurrence], model: SemanticModel) -> Optional[Loop]:
    """The innermost loop of the step's unit around it that runs a backward too (not a loop
    over optimizers) and repeats its body. None when a loop in a helper on the way holds the
    step: that helper's unit reports it."""
    repetitions = model.facts(Repetitions)
    inner = step.via[1:] + ((step.event.node,) if step.event.foreign is None else ())  # a foreign event stands at its call
    if step.via and any(repetitions.loops_around(node) for node in inner):
        return None
    for loop in reversed(repetitions.loops_around(step.call_site)):
        if drawn_by(step.argument, loop):
            continue  # a loop over the optimizers: each is stepped once per iteration of the one around it
        inside = [o for o in occurrences if repetitions.inside(o.call_site, loop)]
        if any(o.kind in _GRADIENTS for o in inside):
            return loop if repetitions.repeats(loop) else None
    return None


def _updates(other: Occurrence, scaler: str, loop: Loop, model: SemanticModel) -> bool:
    """Whether `other` is an update of `scaler` (or of a scaler amplint cannot name) that runs
    inside `loop`."""
    if other.kind is not EventKind.SCALER_UPDATE or not model.facts(Repetitions).inside(other.call_site, loop):
        return False
    return other.receiver is None or other.receiver.key == scaler or other.receiver.key not in model.scalers


def _message(call: Occurrence, loop: Loop, scaler: str, updates: List[Occurrence], model: SemanticModel) -> Optional[Message]:
    """What is wrong with `call` (a step or an unscale_ in `loop`) given the loop's updates of
    its scaler, or None: a step with no update in the loop; an unscale_ that runs in every
    iteration while every update sits under an `if` whose test changes from one iteration to
    the next (`if (i + 1) % 4 == 0:`), which the unscale_ is not under."""
    header = loop_header(loop)
    if call.kind is EventKind.SCALER_STEP and not updates:
        return Message(
            f"{quote(call)} runs every iteration of `{header}` but `{scaler}.update()` never does",
            help=(
                f"The second `{scaler}.step()` raises `RuntimeError: step() has already been called since the last "
                f"update()`, and the loss scale never adapts. Call `{scaler}.update()` once per iteration, after the "
                "last step."
            ),
        )
    if call.kind is not EventKind.UNSCALE or not updates or not _every_iteration(call, loop, model):
        return None
    if any(_every_iteration(update, loop, model) for update in updates):
        return None
    own = {(key, outcome) for key, _, outcome in _branches(call, loop, model)}
    skipping = [(key, text, outcome) for key, text, outcome in _branches(updates[0], loop, model) if (key, outcome) not in own]
    if not skipping:
        return None
    _, text, outcome = skipping[-1]
    condition = text if outcome else f"not ({text})"
    per_optimizer = _per_optimizer(call, updates[0], loop, model)
    if per_optimizer == "last":
        return None  # once per optimizer, and the update after the last one's step
    if per_optimizer == "other":
        return Message(
            f"{quote(call)} runs for each optimizer of an iteration, but `{scaler}.update()` already after one of them (when `{condition}`)",
            help=(
                "The update changes the loss scale the later optimizers' gradients were scaled by: their unscale_ "
                "divides by the new scale, and their step sees gradients off by that factor (or skips on an "
                f"overflow the update already cleared). Call `{scaler}.update()` once, after the last optimizer's step."
            ),
        )
    return Message(
        f"{quote(call)} runs every iteration of `{header}` but `{scaler}.update()` only when `{condition}`",
        help=(
            f"On an iteration that skips the update, the next `{scaler}.unscale_()` raises `RuntimeError: "
            "unscale_() has already been called on this optimizer since the last update()`. Unscale under the "
            "same condition as the step and the update."
        ),
    )


def _per_optimizer(unscale: Occurrence, update: Occurrence, loop: Loop, model: SemanticModel) -> Optional[str]:
    """When the unscale_ is of an optimizer a loop inside `loop` draws, and the update's test
    reads what that loop draws (`for idx, opt in enumerate(optimizers):`, also through a
    helper's parameters): "last" when the test picks the last one (`if idx == len(optimizers)
    - 1: scaler.update()`: each optimizer unscaled once and one update per iteration of
    `loop`), "other" when it picks another (`if idx == 0:`). None otherwise."""
    repetitions = model.facts(Repetitions)
    loops = repetitions.loops_around(unscale.call_site)
    inner = loops[loops.index(loop) + 1 :] if loop in loops else []
    drawing = [l for l in inner if drawn_by(unscale.argument, l)]
    if not drawing:
        return None
    tests = [g.test for g in repetitions.branches_around(update.call_site, loop)]
    tests += [g.test for node in update.via[1:] + (update.event.node,) for g in repetitions.branches_around(node)] if update.via and update.event.foreign is None else []
    names = {node.value for test in tests for node in iter_tree(test) if isinstance(node, cst.Name)}
    for node in update.via:  # a helper's parameter: the name the call passes for it
        record = repetitions.record(node)
        item = model.classify(record) if record is not None else None
        if isinstance(item, HelperCall):
            names |= {passed.value for passed in map(item.argument_for, list(names)) if isinstance(passed, cst.Name)}
    if not any(names & loop_targets(l) for l in drawing):
        return None
    return "last" if any(_picks_the_last(test) for test in tests) else "other"


def _picks_the_last(test: cst.BaseExpression) -> bool:
    """A test for the last iteration of a loop over a collection: `idx == len(opts) - 1`,
    `idx + 1 == len(opts)`, `opt is opts[-1]`."""
    text = source_text(test).replace(" ", "")
    return ("len(" in text and ("-1" in text or "+1" in text)) or "[-1]" in text


def _exclusive(update: Occurrence, call: Occurrence, loop: Loop, model: SemanticModel) -> bool:
    """Whether `update` and `call` sit in opposite branches of one `if` in the loop
    (`if accum > 1: ... else: ...`): they never run in the same iteration."""
    own = {(key, outcome) for key, _, outcome in _branches(call, loop, model)}
    return any((key, not outcome) in own for key, _, outcome in _branches(update, loop, model))


def _together(first: Occurrence, second: Occurrence, loop: Loop, model: SemanticModel) -> bool:
    """Whether both run in every iteration of `loop`, under the same `if` branches."""
    if not (_every_iteration(first, loop, model) and _every_iteration(second, loop, model)):
        return False
    return {(text, outcome) for _, text, outcome in _branches(first, loop, model)} == {
        (text, outcome) for _, text, outcome in _branches(second, loop, model)
    }


def _between(occurrences: Sequence[Occurrence], first: Occurrence, second: Occurrence, loop: Loop, model: SemanticModel) -> List[Occurrence]:
    """The occurrences of the loop after `first` and before `second`, in source order."""
    start, end = occurrences.index(first), occurrences.index(second)
    repetitions = model.facts(Repetitions)
    return [o for o in occurrences[start + 1 : end] if repetitions.inside(o.call_site, loop)]


def _after_update(
    step: Occurrence, loop: Loop, scaler: str, updates: List[Occurrence], occurrences: Sequence[Occurrence], model: SemanticModel
) -> Optional[Message]:
    """A step of one optimizer after the iteration's update, which followed another optimizer's
    step, on gradients scaled before that update, and no update after it: it unscales them
    with the scale the update changed (`scaler.step(opt_a); scaler.update(); scaler.step(opt_b)`)."""
    if step.argument is None or step.receiver is None or any(occurrences.index(u) > occurrences.index(step) for u in updates):
        return None
    for update in updates:
        if occurrences.index(update) > occurrences.index(step) or not _together(update, step, loop, model):
            continue
        if any(o.kind in _GRADIENTS for o in _between(occurrences, update, step, loop, model)):
            continue  # gradients scaled anew after the update
        earlier = [
            o
            for o in occurrences[: occurrences.index(update)]
            if o.kind is EventKind.SCALER_STEP
            and o.receiver is not None
            and o.receiver.key == step.receiver.key
            and o.argument is not None
            and o.argument.key != step.argument.key
            and model.facts(Repetitions).inside(o.call_site, loop)
        ]
        if earlier:
            return Message(
                f"{quote(step)} runs after {quote(update)} in every iteration of `{loop_header(loop)}`, and no "
                f"`{scaler}.update()` follows it",
                help=(
                    f"`{scaler}.update()` may have halved or doubled the scale since `{step.argument.text}`'s gradients "
                    f"were scaled: this step unscales them with the new one, and its overflow check counts for the next "
                    f"iteration. Call `{scaler}.update()` once, after the last `{scaler}.step()` of the iteration."
                ),
            )
    return None


def _unscaled_again(
    unscale: Occurrence, loop: Loop, scaler: str, updates: List[Occurrence], occurrences: Sequence[Occurrence], model: SemanticModel
) -> Optional[Message]:
    """An `unscale_()` of an optimizer that an earlier one in the same iteration unscaled with
    no update between them, or one in a loop inside the iteration (over models, parameter
    groups) that does not draw the optimizer: the second raises."""
    argument = unscale.argument
    if argument is None or argument.key.startswith(("unknown:", "expr:")):
        return None
    repetitions = model.facts(Repetitions)
    inner = [
        other
        for other in repetitions.loops_around(unscale.call_site)
        if repetitions.inside(other, loop) and repetitions.repeats(other) and not runs_once(other)
    ]
    for other in inner:
        own = [o for o in occurrences if repetitions.inside(o.call_site, other)]
        if drawn_by(argument, other) or any(o.kind in _GRADIENTS or o.kind is EventKind.SCALER_UPDATE for o in own):
            continue
        if argument.text.split(".")[0].split("[")[0] in loop_targets(other):
            continue  # `pair.optimizer`: whatever the loop draws
        return _twice_message(unscale, f"in every iteration of `{loop_header(other)}`, inside `{loop_header(loop)}`", scaler)
    for earlier in occurrences[: occurrences.index(unscale)]:
        if earlier.kind is not EventKind.UNSCALE or earlier.argument is None or earlier.argument.key != argument.key:
            continue
        if earlier.receiver is None or unscale.receiver is None or earlier.receiver.key != unscale.receiver.key:
            continue
        if not repetitions.inside(earlier.call_site, loop) or earlier.call_site is unscale.call_site:
            continue
        if any(o.kind is EventKind.SCALER_UPDATE for o in _between(occurrences, earlier, unscale, loop, model)):
            continue
        if _together(earlier, unscale, loop, model):
            return _twice_message(unscale, f"after {quote(earlier)} in the same iteration of `{loop_header(loop)}`", scaler)
    return None


def _twice_message(unscale: Occurrence, where: str, scaler: str) -> Message:
    optimizer = unscale.argument.text if unscale.argument is not None else "optimizer"
    return Message(
        f"{quote(unscale)} unscales `{optimizer}` again {where}, with no `{scaler}.update()` between",
        help=(
            f"A second `{scaler}.unscale_({optimizer})` before `{scaler}.update()` raises `RuntimeError: unscale_() "
            "has already been called on this optimizer since the last update()`. Unscale each optimizer once per "
            "update, before its clip and its step."
        ),
    )


def _every_iteration(call: Occurrence, loop: Loop, model: SemanticModel) -> bool:
    """Whether `call` runs in every iteration of `loop`: no `if` between them tests what an
    iteration changes, neither in the loop nor in the helpers on the way (a scaler wrapper's
    `__call__` that updates only `if need_update:`, called with `need_update=(i + 1) % 4 ==
    0`); in a function of another module, no condition its ways to the event assume."""
    repetitions = model.facts(Repetitions)
    if call.via and call.event.foreign is not None:
        guards = repetitions.foreign_guards(call, loop) or []
        return repetitions.every_iteration(call.call_site, loop) and not any(changes for _, _, changes in guards)
    records = [repetitions.record(node) for node in call.via + (call.event.node,)] if call.via else []
    if not records or any(record is None for record in records):
        return repetitions.every_iteration(call.call_site, loop)
    return repetitions.runs_every_iteration(records[-1], Repetition(loop, records[0].unit, tuple(records[:-1])))  # type: ignore[arg-type]


def _branches(call: Occurrence, loop: Loop, model: SemanticModel) -> List[Tuple[object, str, bool]]:
    """The `if` branches between `loop` and `call`, as (key, test, outcome): in the loop, then
    in each helper of this file on the way down to it, or the conditions a function of
    another module assumed on its ways to it."""
    repetitions = model.facts(Repetitions)
    found: List[Tuple[object, str, bool]] = [(id(g.test), source_text(g.test), g.outcome) for g in repetitions.branches_around(call.call_site, loop)]
    if not call.via:
        return found
    if call.event.foreign is not None:
        guards = repetitions.foreign_guards(call, loop) or []
        return found + [((id(call.call_site), text), text, outcome) for text, outcome, _ in guards]
    for node in call.via[1:] + (call.event.node,):
        found += [(id(g.test), source_text(g.test), g.outcome) for g in repetitions.branches_around(node)]
    return found
