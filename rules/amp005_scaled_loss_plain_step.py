from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amplint.lint.evidence import FRAMEWORK_BACKWARD, SCALE, STEP
from amplint.lint.fix import Fix, block_of, expression, statement
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule, quote
from amplint.semantic import EventKind, Occurrence, SemanticModel
from amplint.semantic.pytorch import frameworks


class ScaledLossPlainStep(Rule):
    """A scaled backward followed by a plain `optimizer.step()` instead of `scaler.step(optimizer)`.

    ## What it does
    Flags `optimizer.step()` reached after `scaler.scale(loss).backward()` without
    `scaler.step(optimizer)`, including after `scaler.unscale_(optimizer)` for that same
    optimizer (the usual unscale-clip-step sequence with the last call replaced).

    ## Why is this bad?
    The gradients still carry the loss scale (65536 at the start). A plain `step()` applies
    them as they are, and never skips the steps whose gradients overflowed to inf/NaN, which
    is the other half of what `scaler.step()` does.

    ## What goes wrong at runtime
    With SGD (and any optimizer whose update is proportional to the gradient) each update is
    65,000x too large: measured by `amplint verify` (CPU, float16 and bfloat16), the first
    update was 2,874 instead of 0.044 and the loss was NaN after 20 steps. Adam's update
    does not depend on the gradients' scale: its float32 loss after 20 steps was the fixed
    run's to within 0.002%, which is why this can hide for a long time. Two things still
    break. Adam's L2 `weight_decay` is added to gradients 65536x too large, so it barely
    acts: with `weight_decay=0.1` the weights' norm after 20 steps was 4.76 instead of 4.04;
    AdamW, which decays the weights directly, came out the same as the fixed run (norm 4.664
    both, with `weight_decay=1.0`). And
    overflow: with targets 100x larger, `scaler.step()` skipped 4 of 20 float16 steps and
    lowered the scale, but `optimizer.step()` applied all 20 updates computed from overflowing
    gradients (the weights were NaN after the first) and the loss became NaN (under
    bfloat16 nothing overflowed and Adam was unaffected). If the loop still calls
    `scaler.update()` with no `scaler.unscale_()`, nothing is silent: it raises
    `AssertionError: No inf checks were recorded prior to update` on the first iteration.
    After `scaler.unscale_(optimizer)` (the unscale-clip-step sequence with a plain step at
    the end) nothing raises: the gradients are unscaled, but the plain step applied the
    overflowing gradients and the loss became NaN.

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

    ## Fix safety
    Safe. `optimizer.step()` becomes `scaler.step(optimizer)`, followed by `scaler.update()` when
    the function never updates the scaler. No fix where an update comes before the step or only
    in some branches after it (stepping through the scaler would then raise, or update twice),
    where the step takes arguments (a closure), or where the scaler is a framework's (prepare the
    optimizer instead). The fixture's `buggy.py` updates the scaler only in some scenarios, so
    `amplint verify --fixes` lists it as having no fix.
    """

    code = "AMP005"
    name = "scaled-loss-plain-step"
    # An optimizer step, and a scaled loss's gradients.
    needs = ({STEP}, {SCALE, FRAMEWORK_BACKWARD})

    PREDICTIONS = (
        Prediction(
            "sgd",
            "first_update",
            "With SGD the first update is at least 1000x larger than the correct one (the scale is 65536).",
            compare="buggy/fixed",
            at_least=1000,
            quotes=(("value", "65,000x"), ("buggy", "2,874"), ("fixed", "0.044")),
        ),
        Prediction(
            "sgd",
            "diverged",
            "With SGD the loss is NaN or infinite after 20 steps.",
            compare="buggy-fixed",
            at_least=1,
        ),
        Prediction(
            "adam",
            "true_loss",
            "Adam's update barely depends on the gradients' scale: the float32 loss after 20 steps is within "
            "0.1% of the fixed run's.",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
            quotes=(("within", "0.002%"),),
        ),
        Prediction(
            "adam-l2",
            "weight_norm",
            "Adam's L2 `weight_decay` (0.1) is added to gradients 65536x too large, so it barely acts: after "
            "20 steps the weights' norm is at least 4% larger than the fixed run's.",
            compare="buggy/fixed",
            at_least=1.04,
            quotes=(("buggy", "4.76"), ("fixed", "4.04")),
        ),
        Prediction(
            "adamw",
            "weight_norm",
            "AdamW decays the weights directly, not through the gradients: with `weight_decay=1.0` (which "
            "shrinks the weights ~2% in 20 steps) its weights' norm is within 0.1% of the fixed run's.",
            compare="buggy/fixed",
            at_least=0.999,
            at_most=1.001,
            kind="control",
            quotes=(("buggy", "4.664"), ("fixed", "4.664")),
        ),
        Prediction(
            "adam-overflow",
            "diverged",
            "Adam too, once a scaled gradient overflows float16 (targets 100x larger): the inf is applied "
            "instead of the step being skipped, and the loss is NaN.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
        Prediction(
            "adam-overflow",
            "applied_overflows",
            "The plain step applies updates computed from overflowing gradients, at least one more than "
            "`scaler.step()`, which skips them (given that it skipped any).",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
            happened="fixed.skipped_steps",
            quotes=(("buggy", "applied all 20"),),
        ),
        Prediction(
            "adam-overflow",
            "true_loss",
            "bfloat16 control: nothing overflows, and Adam's loss is within 1% of the fixed run's.",
            compare="buggy/fixed",
            at_least=0.99,
            at_most=1.01,
            dtypes=("bfloat16",),
            kind="control",
        ),
        Prediction(
            "scaler-update-kept",
            "raised",
            "If the loop still calls `scaler.update()` (and no `scaler.unscale_()`), it raises AssertionError at "
            "once: loud, not silent.",
            compare="buggy-fixed",
            at_least=1,
        ),
        Prediction(
            "unscale-then-plain-step",
            "raised",
            "After `scaler.unscale_(optimizer)` nothing raises: `scaler.update()` has the inf checks it needs.",
            compare="buggy",
            at_least=0,
            at_most=0,
            kind="control",
        ),
        Prediction(
            "unscale-then-plain-step",
            "diverged",
            "And the plain step applies the overflowing gradients instead of skipping them: the loss is NaN.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for step, state in model.states_before(EventKind.OPTIMIZER_STEP):
            if _takes_a_closure(step):
                continue  # `opt.step(closure)` computes its own gradients (LBFGS)
            if step.receiver is not None and step.receiver.key in model.scaler_facts.prepared:
                continue  # a helper's `optimizer.step()` on one the framework prepared: its scaler's step
            gradients = state.gradients
            if gradients.scaled_by is None or gradients.last_backward is not gradients.scaled_by:
                # Nothing scaled, or a plain backward came last (an fp32 critic beside an AMP
                # actor): the plain step most likely belongs to it.
                continue
            optimizer = step.receiver.key if step.receiver is not None else None
            if gradients.stepped:
                # The scaler stepped another optimizer on these gradients; this one applies
                # them still scaled, unless a plain backward may have produced its own.
                if optimizer not in gradients.stepped and not gradients.unscaled and not gradients.mixed:
                    yield Report(step.node, _message(step, gradients.scaled_by, gradients.scaler, model), fix=_fix(step, gradients.scaler, model))
            elif not gradients.unscaled:
                yield Report(step.node, _message(step, gradients.scaled_by, gradients.scaler, model), fix=_fix(step, gradients.scaler, model))
            elif optimizer in gradients.unscaled and gradients.unscale is not None:
                # Unscaled for this very optimizer, then stepped past the scaler.
                yield Report(step.node, _unscaled_message(step, gradients.unscale), fix=_fix(step, gradients.scaler, model))

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
        # A sparse embedding optimizer stepped by hand after the dense one is unscaled (DLRM).
        """
import torch
scaler.scale(loss).backward()
scaler.unscale_(dense_optimizer)
embedding_optimizer.step()
scaler.step(dense_optimizer)
scaler.update()
""",
        # An fp32 critic stepped plainly between the AMP actor's backward and its scaler.step.
        """
import torch
def update(actor, critic, opt_actor, opt_critic, obs, ret, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        policy_loss = actor.loss(obs, ret)
    scaler.scale(policy_loss).backward()
    value_loss = (critic(obs).squeeze(-1) - ret).pow(2).mean()
    value_loss.backward()
    opt_critic.step()
    scaler.step(opt_actor)
    scaler.update()
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
        # unscale_ and clip done right, then the step bypasses the scaler.
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad()
""",
            at=((10, 5),),
        ),
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


def _takes_a_closure(step: Occurrence) -> bool:
    node = step.event.node
    if not isinstance(node, cst.Call) or step.event.foreign is not None:
        return False
    return any(arg.keyword is None or arg.keyword.value == "closure" for arg in node.args if not arg.star)


def _message(step: Occurrence, backward: Occurrence, scaler_key: Optional[str], model: SemanticModel) -> Message:
    optimizer = step.receiver.text if step.receiver is not None else "optimizer"
    info = model.scalers.get(scaler_key) if scaler_key is not None else None
    scaler = model.scaler_name(scaler_key)
    title = f"{quote(step)} applies gradients that still carry `{scaler}`'s loss scale"
    if info is not None and info.framework is not None:
        title += info.when_float16  # the framework's precision is one of several configured values
        advice = frameworks.BY_NAME[info.framework].step_advice.format(owner=scaler, optimizer=optimizer)
        return Message(
            title,
            f"The gradients come from {quote(backward)}, scaled by 65536 at start, and a plain step never "
            f"skips inf/NaN steps: `{optimizer}` is not one the framework prepared, so its step does not "
            f"unscale. {advice}.",
        )
    return Message(
        title,
        f"The gradients come from {quote(backward)}, scaled by 65536 at start, and a plain step never "
        f"skips inf/NaN steps: SGD-like updates come out ~65,000x too large and Adam's L2 weight decay "
        f"~65,000x too weak. Use `{scaler}.step({optimizer})` and `{scaler}.update()`.",
    )


def _unscaled_message(step: Occurrence, unscale: Occurrence) -> Message:
    scaler = unscale.receiver.text if unscale.receiver is not None else "scaler"
    optimizer = step.receiver.text if step.receiver is not None else "optimizer"
    return Message(
        f"{quote(step)} steps past the scaler after {quote(unscale)}",
        "The gradients are unscaled, but a plain step applies inf/NaN gradients instead of skipping "
        f"them, and nothing raises. Use `{scaler}.step({optimizer})`.",
    )


def _fix(step: Occurrence, scaler_key: Optional[str], model: SemanticModel) -> Optional[Fix]:
    """`optimizer.step()` -> `scaler.step(optimizer)`, and `scaler.update()` after it when the
    function never updates the scaler; with the names the function itself writes, a plain
    GradScaler, and only where an update would not come before the new step."""
    info = model.scalers.get(scaler_key) if scaler_key is not None else None
    if step.via or step.receiver is None or info is None or info.framework is not None:
        return None
    call = step.node
    if not isinstance(call, cst.Call) or call.args:
        return None
    scaler = model.spelling_in(step.unit, scaler_key)
    if scaler is None:
        return None
    new = cst.Call(expression(f"{scaler}.step"), [cst.Arg(call.func.value if isinstance(call.func, cst.Attribute) else expression(step.receiver.text))])
    updates = [
        o for o in model.occurrences_in(step.unit)
        if o.kind is EventKind.SCALER_UPDATE and not o.via and o.receiver is not None and o.receiver.key == scaler_key
    ]
    line = model.statement_of(call)
    if not isinstance(line, cst.SimpleStatementLine):
        return None
    if not updates:
        return Fix(
            f"Step through the scaler: `{scaler}.step({step.receiver.text})`, then `{scaler}.update()`",
            replace=((call, new),),
            insert_after=((line, (statement(f"{scaler}.update()"),)),),
        )
    # An update that follows in the same block runs after every such step; one in a branch
    # or before it would leave steps without one (or update twice): no fix.
    block = block_of(model.index, line)
    following = model.following(step, EventKind.SCALER_UPDATE)
    if block is None or following is None or following.receiver is None or following.receiver.key != scaler_key:
        return None
    later = model.statement_of(following.node) if isinstance(following.node, cst.Call) else None
    position = next((i for i, item in enumerate(block) if item is line), None)
    if later is None or position is None or not any(item is later for item in block[position + 1 :]):
        return None
    return Fix(f"Step through the scaler: `{scaler}.step({step.receiver.text})`", replace=((call, new),))

