from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from amplint.analyses.framework_hooks import FrameworkHooks
from amplint.analyses.precision import Precision
from amplint.lint.evidence import BACKWARD, STEP
from amplint.lint.fix import Fix, expression
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule, quote
from amplint.semantic import (
    CodeUnit,
    EventKind,
    ForeignHook,
    Occurrence,
    SemanticModel,
    dotted_name,
    iter_tree,
    source_text,
)
from amplint.semantic.pytorch import frameworks



class UnscaledBackward(Rule):
    """Backward on a loss the GradScaler never scaled, while the scaler still steps the optimizer.

    ## What it does
    Flags `loss.backward()` (or `torch.autograd.backward(loss)`) when `loss` is not the result
    of `scaler.scale(...)` and, on the same path through the function, an enabled
    `GradScaler` then runs `scaler.step(optimizer)`.

    Beside a scaled backward on the same path (since the scaler last stepped), a plain one is
    flagged only when its loss is computed from a model whose parameters that very optimizer
    holds, and nothing in between may clear its gradients out of amplint's sight (another
    method of the optimizer, such as SAM's `first_step(zero_grad=True)`, or a write to
    `p.grad`): an auxiliary or deep-supervision loss of the same model (`out, aux = model(x)`,
    `aux_loss.backward()` next to `scaler.scale(main_loss).backward()`), or an accumulation
    loop whose earlier micro-batches run `loss.backward()` and only the last one scales (the
    way round the loop into the scaled step counts). The link must be visible: the optimizer
    built from `model.parameters()` (param groups, aliases such as `DDP(model)` and
    `model.module` followed) and the loss computed from `model(...)` in the same function.
    An fp32 model's own plain backward (an actor-critic's critic with its own optimizer, a
    GAN's discriminator on `G(z).detach()`), a plain backward on a path where the scaler is
    off or `None` (`if not use_amp:`), and an optimizer or loss amplint cannot trace are not
    flagged.

    A Hugging Face `Trainer` subclass whose `training_step` leaves a plain `loss.backward()`
    is flagged when `TrainingArguments(fp16=...)` that may be true train it: the Trainer steps
    through its loss scaler after `training_step` returns. With the subclass in one module
    and the arguments in another, the finding is at the construction
    (`MyTrainer(model, args=training_args)`), naming the backward's file and line.

    ## Why is this bad?
    `scaler.step()` divides every gradient by the current scale (65536 at the start) before
    the update, because it assumes `backward()` ran on `scaler.scale(loss)`. If it did not,
    the gradients are not too large but tiny: each update is shrunk by the scale factor, and
    float16 gradients that underflowed to zero are never rescued.

    ## What goes wrong at runtime
    Silent once the scaler has scaled anything: typically `scaler.scale(loss)` is called
    but its result dropped (it is not in-place) and `loss.backward()` runs on the unscaled
    loss. Measured by `amplint verify` (CPU, float16 and bfloat16 alike): with SGD the first
    update was 65,000x smaller than the correct one (6.7e-7 instead of 0.044), which is the
    loss scale (65536) times 0.996, and after 20 steps the float32 loss had moved by
    0.01% (it stayed at 0.118; the fixed run reached 0.024). With Adam the first update was
    only 1.3x smaller (0.035 instead of 0.047), because Adam divides the gradients' scale
    back out and only its `eps` notices. "Thousands of times too small" is SGD's number
    (and that of any optimizer whose update is proportional to the gradient), not Adam's.
    If the scaler never scaled anything at all, nothing is silent: `scaler.step()` raises
    `AssertionError: Attempted step but _scale is None` on the first iteration. Beside a
    scaled backward, the plain one's gradients add to the scaled ones in the same parameters
    and are divided by the scale with them: its share of the update is ~65,000x too small. In
    an accumulation loop of 4 micro-batches whose first three run `loss.backward()` and the
    last `scaler.scale(loss).backward()`, only the last moved the model: the first SGD update
    was 2.5x smaller than the correct one (0.018 instead of 0.044), and after 20 steps the
    float32 loss was 0.071 instead of 0.024.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).pow(2).mean()
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```
    Framework backward calls (`accelerator.backward(loss)`, `fabric.backward(loss)`,
    DeepSpeed's `engine.backward(loss)`, Lightning's `self.manual_backward(loss)`) scale
    the loss themselves and are not flagged; nor are paths where the scaler is known to be
    `None` or disabled.

    ## Fix safety
    Safe. `loss.backward()` becomes `scaler.scale(loss).backward()` (and
    `torch.autograd.backward(loss)` becomes `scaler.scale(loss).backward()`), with the scaler as
    the function that steps it writes it. Offered only where the backward and the
    `scaler.step(...)` are written in the same function, with a plain `GradScaler` (a framework's
    backward is spelled `accelerator.backward(loss)` or `self.manual_backward(loss)`: fix those
    by hand). `amplint verify --fixes` runs the fixed `buggy.py`: it reports exactly what
    `fixed.py` reports, in every scenario.
    """

    code = "AMP001"
    name = "unscaled-backward"
    # A plain backward, and a scaler's step it feeds.
    needs = ({BACKWARD}, {STEP})

    PREDICTIONS = (
        Prediction(
            "sgd",
            "first_update",
            "With SGD the first update is at least 1000x smaller than the correct one (the scale is 65536).",
            compare="fixed/buggy",
            at_least=1000,
            quotes=(("value", "65,000x"), ("buggy", "6.7e-7"), ("fixed", "0.044")),
        ),
        Prediction(
            "sgd",
            "first_update",
            "The shrinkage is the loss scale that `scaler.step()` divides by: the correct update over the "
            "buggy one equals the scale, within 5%, where the scale is above 1.",
            compare="fixed/buggy",
            at_least=0.95,
            at_most=1.05,
            expected="buggy.loss_scale",
            happened="buggy.loss_scale - 1",
            quotes=(("value", "0.996"),),
        ),
        Prediction(
            "sgd",
            "loss_moved",
            "With SGD the float32 loss is stuck at its first value: after 20 steps it has moved by less than 0.1%.",
            compare="buggy",
            at_most=0.001,
            quotes=(("buggy", "0.01%"),),
        ),
        Prediction(
            "adam",
            "first_update",
            "With Adam most of the shrinkage is normalised away, but not all: the first update is 1.1x to 10x "
            "smaller (Adam's `eps` is no longer negligible next to gradients 65536x too small).",
            compare="fixed/buggy",
            at_least=1.1,
            at_most=10,
            quotes=(("value", "1.3x"), ("buggy", "0.035"), ("fixed", "0.047")),
        ),
        Prediction(
            "accumulation",
            "first_update",
            "Accumulating 4 micro-batches with only the last one scaled, the earlier three reach the "
            "update ~65,000x too small: with SGD the first update is at least 2x smaller than the correct one.",
            compare="fixed/buggy",
            at_least=2,
            quotes=(("value", "2.5x"), ("buggy", "0.018"), ("fixed", "0.044")),
        ),
        Prediction(
            "accumulation",
            "true_loss",
            "... and after the steps the float32 loss is at least 1.5x the correct run's.",
            compare="buggy/fixed",
            at_least=1.5,
            quotes=(("buggy", "0.071"), ("fixed", "0.024")),
        ),
        Prediction(
            "never-scaled",
            "raised",
            "If the scaler never scaled anything, `scaler.step()` raises AssertionError at once: loud, not silent.",
            compare="buggy-fixed",
            at_least=1,
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for step, state in model.states_before(EventKind.SCALER_STEP):
            if step.receiver is None or not model.is_live(step.receiver.key, state.facts):
                continue
            # Beside a scaled backward, a plain one may well be an fp32 model's own (an
            # actor-critic's critic): there it counts only when its loss is computed from a
            # model whose parameters the stepped optimizer holds (an auxiliary loss, an
            # accumulation loop's earlier micro-batches).
            for backward in state.gradients.plain_backwards:
                beside = state.gradients.scaled_since_step
                if beside and not _feeds_stepped_optimizer(backward, step, model):
                    continue
                yield Report(backward.node, _message(backward, step, model, beside), fix=_fix(backward, step, model))
        # A hook after which the framework steps through its scaler (a Hugging Face Trainer
        # subclass's `training_step` under fp16 TrainingArguments).
        for backward, scaler in model.facts(FrameworkHooks).backwards_before_framework_step():
            yield Report(backward.node, _hook_message(backward, scaler, model))
        # The same hook in a class of another module, built here with settings that may be
        # float16 (`DistillTrainer(model, args=TrainingArguments(fp16=True))`).
        for record, hook, surely in model.facts(FrameworkHooks).imported_hook_backwards():
            yield Report(record.node, _imported_hook_message(record.node, hook, surely))

    VALID = (
        # The seed's full training pattern.
        """
import torch
scaler = torch.amp.GradScaler(device, enabled=(amp_dtype == torch.float16))
for step in range(5):
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device, dtype=amp_dtype):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
""",
        # Scaled through a name, and gradient accumulation.
        """
import torch
scaler = torch.cuda.amp.GradScaler()
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda"):
        loss = criterion(model(x), y) / accum
    scaled = scaler.scale(loss)
    scaled.backward()
    if (i + 1) % accum == 0:
        scaler.step(opt)
        scaler.update()
""",
        # An optional scaler.
        """
def train_step(self, batch):
    loss = self.compute_loss(batch)
    if self.scaler is not None:
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
    else:
        loss.backward()
        self.optimizer.step()
""",
        # A use_amp flag tested twice: the unscaled branch never meets scaler.step.
        """
def train(model, opt, scaler, use_amp):
    loss = model(x).sum()
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if use_amp:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
""",
        # The scaler is disabled exactly when the loss is not scaled.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=args.amp)
if args.amp:
    loss = scaler.scale(loss)
loss.backward()
scaler.step(optimizer)
scaler.update()
""",
        # Frameworks scale for you.
        """
for batch in loader:
    loss = model(batch).loss
    accelerator.backward(loss)
    optimizer.step()
""",
        # `if scaler is None` gates the unscaled path.
        """
def step(loss, optimizer, scaler=None):
    if scaler is None:
        loss.backward()
        optimizer.step()
        return
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
        # A GAN whose discriminator trains without AMP: its plain step consumes its gradients.
        """
import torch
scaler = torch.amp.GradScaler("cuda")
for real in loader:
    d_loss = D(real).mean() - D(G(z).detach()).mean()
    d_loss.backward()
    opt_d.step()
    opt_d.zero_grad()
    with torch.autocast("cuda"):
        g_loss = -D(G(z)).mean()
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
""",
        # Scaled by a helper we cannot see; apex-style optimizer.backward(loss).
        """
def step(self, loss):
    loss = self.scale_loss(loss)
    loss.backward()
    self.scaler.step(self.optimizer)
    self.optimizer.backward(loss)
    self.scaler.step(self.optimizer)
""",
        # A scaler that is off.
        """
import torch
scaler = torch.amp.GradScaler("cuda", enabled=False)
loss.backward()
scaler.step(opt)
""",
        # An actor-critic: the critic trains in float32 with its own optimizer, stepped plainly;
        # the scaler steps only the actor's.
        """
import torch
actor, critic = Actor(), Critic()
actor_opt = torch.optim.Adam(actor.parameters(), lr=1e-4)
critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler("cuda")
for state, action, ret in loader:
    value = critic(state)
    critic_loss = (value - ret).pow(2).mean()
    critic_loss.backward()
    with torch.autocast("cuda", dtype=torch.float16):
        actor_loss = -(actor(state).log_prob(action) * (ret - value.detach())).mean()
    scaler.scale(actor_loss).backward()
    scaler.step(actor_opt)
    scaler.update()
    critic_opt.step()
""",
        # A GAN whose discriminator learns in float32 on `G(z).detach()`: its loss feeds
        # no module of the scaler-stepped optimizer.
        """
import torch
G, D = Generator(), Discriminator()
opt_g = torch.optim.Adam(G.parameters())
opt_d = torch.optim.Adam(D.parameters())
scaler = torch.amp.GradScaler("cuda")
for real in loader:
    fake = G(z)
    d_loss = D(real).mean() - D(fake.detach()).mean()
    d_loss.backward()
    with torch.autocast("cuda"):
        g_loss = -D(G(z)).mean()
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
    opt_d.step()
""",
        # Accumulation where only the AMP-off path skips the scaler, which is then disabled.
        """
import torch
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
        loss = loss_fn(model(x), y) / accum
    if use_amp:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if (i + 1) % accum == 0:
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
""",
        # The optimizer is handed in: which parameters it holds is unknown, so is the link.
        """
import torch
def train(model, opt, scaler, loader, accum):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = model(x, y)
        if (i + 1) % accum == 0:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        else:
            loss.backward()
""",
        # SAM: the first, plain backward's gradients only perturb the weights, and
        # `first_step(zero_grad=True)` clears them before the scaled second pass.
        """
import torch
model = Net()
optimizer = SAMOptimizer(model.parameters(), torch.optim.SGD, lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    crit(model(x), y).backward()
    optimizer.first_step(zero_grad=True)
    with torch.autocast("cuda"):
        loss = crit(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
""",
    )
    INVALID = (
        Flagged(
            """
import torch
scaler = torch.amp.GradScaler("cuda")
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    loss.backward()
    scaler.step(opt)
    scaler.update()
""",
            at=((7, 5),),
        ),
        Flagged(
            """
class Trainer:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()

    def step(self, loss):
        self.scaler.scale(loss)  # discarded: scales nothing
        torch.autograd.backward(loss)
        self.scaler.step(self.optimizer)
        self.scaler.update()
""",
            at=((8, 9),),
        ),
        Flagged(
            """
def train(model, opt, scaler, use_amp):
    loss = model(x).sum()
    if use_amp:
        loss.backward()
    scaler.step(opt)
""",
            at=((5, 9),),
        ),
        # Accumulation: the earlier micro-batches' gradients reach the optimizer the scaler
        # unscales, unscaled.
        Flagged(
            """
import torch
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y) / accum
    if (i + 1) % accum == 0:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    else:
        loss.backward()
""",
            at=((15, 9),),
        ),
        # Deep supervision: the auxiliary head's loss is the same model's.
        Flagged(
            """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

class Trainer:
    def __init__(self, net):
        self.model = DDP(net)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.scaler = torch.cuda.amp.GradScaler()

    def fit(self, loader):
        for batch in loader:
            with torch.autocast("cuda"):
                logits, aux_logits = self.model(batch["x"])
                loss = self.criterion(logits, batch["y"])
                aux = 0.3 * self.criterion(aux_logits, batch["y"])
            aux.backward(retain_graph=True)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()
""",
            at=((17, 13),),
        ),
        # accelerate in float16: its backward scales, a plain one beside it into the same
        # prepared optimizer does not.
        Flagged(
            """
import torch
from accelerate import Accelerator
accelerator = Accelerator(mixed_precision="fp16")
model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    out, aux = model(batch["x"])
    aux_loss = crit(aux, batch["y"])
    aux_loss.backward(retain_graph=True)
    accelerator.backward(crit(out, batch["y"]) + reg_loss(model))
    optimizer.step()
    optimizer.zero_grad()
""",
            at=((11, 5),),
        ),
    )


def _feeds_stepped_optimizer(backward: Occurrence, step: Occurrence, model: SemanticModel) -> bool:
    """Whether the plain backward's loss is computed from a model the optimizer that
    `scaler.step()` unscales holds: both the optimizer's construction and the model's call
    must be known (an unknown link is no finding), and nothing the flow does not model may
    take the gradients away in between (see `_gradients_handled_otherwise`)."""
    tensor = backward.event.tensor
    if tensor is None or step.argument is None or step.argument.key is None or backward.under_no_grad:
        return False
    if not model.facts(Precision).trained_module_feeds(tensor, backward.event.unit, step.argument.key):
        return False
    units = {id(u): u for u in (backward.event.unit, step.unit, step.event.unit)}
    return not any(_gradients_handled_otherwise(model, unit, step.argument.key) for unit in units.values())


# What an optimizer is known to do with the gradients it holds.
_OPTIMIZER_METHODS = frozenset({"step", "zero_grad", "state_dict", "load_state_dict", "add_param_group"})


def _gradients_handled_otherwise(model: SemanticModel, unit: CodeUnit, optimizer: str) -> bool:
    """Whether `unit` may consume or clear gradients in a way the flow does not model: another
    method of the optimizer (SAM's `optimizer.first_step(zero_grad=True)` uses the first
    backward's gradients and zeroes them), or a write to `.grad` (`p.grad = None`,
    `p.grad.zero_()`)."""
    for record in unit.calls:
        func = record.node.func
        if not isinstance(func, cst.Attribute):
            continue
        owner = dotted_name(func.value)
        if owner is not None and func.attr.value not in _OPTIMIZER_METHODS and model.identity(unit, owner) == optimizer:
            return True
        if func.attr.value.endswith("_") and _reads_grad(func.value):
            return True
    for node in iter_tree(unit.node):
        targets = []
        if isinstance(node, cst.Assign):
            targets = [t.target for t in node.targets]
        elif isinstance(node, (cst.AugAssign, cst.AnnAssign)):
            targets = [node.target]
        if any(_reads_grad(target) for target in targets):
            return True
    return False


def _reads_grad(node: cst.CSTNode) -> bool:
    """`p.grad`, `p.grad.data`, `params[i].grad`: an expression that is a tensor's gradient."""
    while isinstance(node, (cst.Attribute, cst.Subscript, cst.Call)):
        if isinstance(node, cst.Attribute):
            if node.attr.value == "grad":
                return True
            node = node.value
        elif isinstance(node, cst.Subscript):
            node = node.value
        else:
            node = node.func
    return False


def _message(backward: Occurrence, step: Occurrence, model: SemanticModel, beside: bool = False) -> Message:
    tensor = source_text(backward.event.tensor) if backward.event.tensor is not None else "loss"
    scaler = step.receiver.text if step.receiver is not None else "scaler"
    optimizer = step.argument.text if step.argument is not None else "optimizer"
    info = model.scalers.get(step.receiver.key) if step.receiver is not None else None
    framework = frameworks.BY_NAME.get(info.framework or "") if info is not None else None
    if framework is not None:
        fix = framework.backward_advice.format(owner=scaler, loss=tensor, optimizer=optimizer)
    else:
        fix = f"Use `{scaler}.scale({tensor}).backward()` before stepping `{optimizer}`"
    # A class a framework trains (`self`): the scaler is its Trainer's.
    who = "the Trainer's scaler" if framework is not None and framework in frameworks.CLASS_FRAMEWORKS else f"`{scaler}`"
    when = info.when_float16 if info is not None else ""
    if beside:
        return Message(
            f"{quote(backward)} runs on a loss {who} never scaled, beside a scaled backward into the same optimizer{when}",
            f"its gradients add to the scaled ones in the parameters `{optimizer}` updates, and {quote(step)} "
            f"divides them all by the loss scale (65536 at start): this loss's share of the update comes out "
            f"~65,000x too small. {fix}.",
        )
    return Message(
        f"{quote(backward)} runs on a loss {who} never scaled{when}",
        f"{quote(step)} still divides the gradients by the loss scale (65536 at start): "
        f"SGD-like updates come out ~65,000x too small (Adam's only slightly). {fix}.",
    )


def _hook_message(backward: Occurrence, scaler: str, model: SemanticModel) -> Message:
    tensor = source_text(backward.event.tensor) if backward.event.tensor is not None else "loss"
    info = model.scalers.get(scaler)
    framework = frameworks.BY_NAME[info.framework or ""] if info is not None else frameworks.HF_TRAINER
    hook = backward.unit.name.rsplit(".", 1)[-1]
    when = info.when_float16 if info is not None else ""
    return Message(
        f"{quote(backward)} runs on a loss the Trainer's scaler never scaled{when}",
        f"After `{hook}` returns, the Trainer steps through its loss scaler, which divides the gradients by "
        f"the loss scale (65536 at start): SGD-like updates come out ~65,000x too small (Adam's only slightly). "
        f"{framework.backward_advice.format(owner='self', loss=tensor, optimizer='optimizer')}.",
    )


def _imported_hook_message(call: cst.Call, hook: "ForeignHook", surely: bool) -> Message:
    framework = frameworks.BY_NAME.get(hook.framework, frameworks.HF_TRAINER)
    where = f"{hook.origin}:{hook.line}" if hook.line else hook.origin
    when = "" if surely else " when float16 mixed precision is chosen"
    built = dotted_name(call.func) or hook.owner
    advice = framework.backward_advice.format(owner="self", loss=hook.tensor, optimizer="optimizer")
    return Message(
        f"`{built}(...)` trains `{hook.owner}.{hook.hook}`, whose {hook.text} ({where}) runs on a loss the "
        f"Trainer's scaler never scaled{when}",
        f"After `{hook.hook}` returns, the Trainer steps through its loss scaler, which divides the gradients by "
        f"the loss scale (65536 at start): SGD-like updates come out ~65,000x too small (Adam's only slightly). "
        f"In `{hook.owner}.{hook.hook}` ({where}), {advice[:1].lower()}{advice[1:]}.",
    )


def _fix(backward: Occurrence, step: Occurrence, model: SemanticModel) -> Optional[Fix]:
    """`loss.backward()` -> `scaler.scale(loss).backward()`, with the scaler as the function
    that steps it writes it; only where both are written in that function, with a plain
    GradScaler (a framework's backward is spelled its own way)."""
    if backward.via or step.via or backward.event.unit is not step.event.unit or step.receiver is None:
        return None
    info = model.scalers.get(step.receiver.key)
    if info is not None and info.framework is not None:
        return None
    call = backward.node
    if not isinstance(call, cst.Call):
        return None
    if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward":
        tensor = call.func.value
        scaled = cst.Call(expression(f"{step.receiver.text}.scale"), [cst.Arg(tensor)])
        new = call.with_changes(func=call.func.with_changes(value=scaled))
    elif len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star:
        tensor = call.args[0].value  # torch.autograd.backward(loss)
        new = cst.Call(cst.Attribute(cst.Call(expression(f"{step.receiver.text}.scale"), [cst.Arg(tensor)]), cst.Name("backward")))
    else:
        return None
    return Fix(f"Scale the loss: `{step.receiver.text}.scale(...).backward()`", replace=((call, new),))

