from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.analyses.adapters import LoadHookAdapters, adapters_added, adapters_recreated_on_load
from amplint.analyses.averages import InPlaceAverage
from amplint.analyses.module_casts import ModuleCast
from amplint.analyses.optimizers import OptimizerBuild
from amplint.analyses.precision import ForeignAverage, Precision
from amplint.lint.evidence import AVERAGE, HALF, OPTIMIZER
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import SemanticModel, dotted_name, source_text


# An EMA class of the file whose copy validation halves every epoch, then decays again in the
# next (yolov5 #9016 in one file): flagged as it is, clean with the copy cast back after.
_VALIDATED_EMA = """
import copy
import torch

class ModelEMA:
    def __init__(self, model, decay=0.9999):
        self.ema = copy.deepcopy(model).eval()
        self.decay = decay
    def update(self, model):
        with torch.no_grad():
            msd = model.state_dict()
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= self.decay
                    v += (1 - self.decay) * msd[k].detach()

def train(model, optimizer, loader):
    ema = ModelEMA(model)
    for epoch in range(10):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
            ema.update(model)
        ema.ema.half()
        evaluate(ema.ema)
"""


# A diffusers LoRA script (#6514 before its fix): the adapters are upcast after they are
# added, but the load-state hook that resuming runs builds them again in the unet's float16.
_RESUMED_LORA = """
import torch
from diffusers.training_utils import cast_training_params

def main(args, unet, lora_config, loader):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    weight_dtype = torch.float16 if accelerator.mixed_precision == "fp16" else torch.float32
    unet.requires_grad_(False)
    unet.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(lora_config)
    cast_training_params(unet, dtype=torch.float32)

    def unwrap_model(model):
        return accelerator.unwrap_model(model)

    def load_model_hook(models, input_dir):
        unet_ = None
        while len(models) > 0:
            model = models.pop()
            if isinstance(model, type(unwrap_model(unet))):
                unet_ = model
        lora_state_dict, network_alphas = LoraLoaderMixin.lora_state_dict(input_dir)
        LoraLoaderMixin.load_lora_into_unet(lora_state_dict, network_alphas=network_alphas, unet=unet_){after}

    accelerator.register_load_state_pre_hook(load_model_hook)
    optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, unet.parameters()), lr=1e-4)
    unet, optimizer = accelerator.prepare(unet, optimizer)
    if args.resume_from_checkpoint:
        accelerator.load_state(args.resume_from_checkpoint)
    for batch in loader:
        accelerator.backward(loss_fn(unet, batch))
        optimizer.step()
"""


class HalfPrecisionMasterWeights(Rule):
    """Parameters cast to float16 and trained, or averaged, with no float32 master copy.

    ## What it does
    Flags a cast of a module to float16 (`model.half()`, `model.to(torch.float16)`,
    `unet.to(device, dtype=weight_dtype)` where `weight_dtype` can be float16) when an
    optimizer then updates its parameters, and an EMA copy kept in float16
    (`ema = deepcopy(model).half()`) that a loop then decays in place (`e.mul_(d)`,
    `v *= d`, `e.lerp_(p, w)`, `ema_params[name].mul_(d).add_(p, alpha=1 - d)`). A copy made
    after the model was cast has the model's dtype (`ema = deepcopy(model)` or
    `{n: p.detach().clone() for n, p in model.named_parameters()}` after `model.half()`). A cast
    in a helper the training loop calls counts before the loop's next steps (a diffusers
    `log_validation` that casts the trained `unet`, or a pipeline built from it: a pipeline
    holds the very modules it is handed, so `pipeline.to(dtype=weight_dtype)` casts them, and so
    does `AutoPipelineForImage2Image.from_pipe(pipeline, torch_dtype=weight_dtype)`, which casts
    the modules the new pipeline shares with `pipeline` in place; with accelerate's fp16
    GradScaler the next `unscale_` then raises "Attempting to unscale FP16 gradients", diffusers
    #13124). Adapters added after the cast (`unet.add_adapter(config)`,
    peft's `inject_adapter_in_model`, diffusers' `load_lora_into_unet`, `get_peft_model(...,
    autocast_adapter_dtype=False)`) are built in the dtype of the layers they wrap and are the
    only trainable parameters: a LoRA script that trains them as they are trains float16
    parameters (diffusers #6086, #6119, #6245). So are adapters a load-state hook builds anew
    when the run resumes: `accelerator.load_state(...)` runs the hook registered with
    `accelerator.register_load_state_pre_hook(load_model_hook)`, whose `load_lora_into_unet(sd,
    unet=unet_)` re-creates the adapters of the module it picked from its `models`
    (`isinstance(model, type(unwrap_model(unet)))`) in the dtype the unet was cast to; the
    script's upcast after `add_adapter` ran before and does not reach them (diffusers #6514,
    #7018), so the creating call is reported unless something after it in the hook upcasts
    (`cast_training_params(models)`). An EMA class of another linted module counts where it is
    built: `ema = ModelEMA(model)` after `model.half()`, where `ModelEMA.__init__` (in
    `utils.py`) keeps `deepcopy(model)` and its `update` decays the copy in place (timm's
    `ModelEma`/`ModelEmaV3`, yolov5's `ModelEMA`, a dict of shadow copies), is reported at
    the construction when `ema.update(model)` runs after it; a cast of that copy after the
    construction (`ema.ema.half()` for validation) that an update then follows, at the cast,
    for such a class of another module or of the file itself.

    Not flagged: a model cast for inference, evaluation or export (no optimizer trains it, or
    nothing trains after the cast: `model.half()` after the training loop, in a branch that
    returns, under `if not args.do_train`); an optimizer that something which may keep float32
    master weights takes over (apex's `FP16_Optimizer(optimizer)`, `amp.initialize`,
    `deepspeed.initialize`, an unknown wrapper that rebinds the optimizer; not accelerate's
    `prepare`, which steps the parameters it is given); a frozen part cast on the branch where it
    is not trained (`if not args.train_text_encoder: text_encoder.to(dtype=weight_dtype)`); a
    frozen model (`unet.requires_grad_(False)`) that nothing makes trainable again or gives
    adapters; a model cast back to float32 afterwards, whose trainable parameters are upcast
    (`cast_training_params(unet, dtype=torch.float32)`, `p.data = p.to(torch.float32)` for each
    `p` that requires grad, peft's `get_peft_model`, which upcasts float16 adapters itself), or
    handed to the file's own code that may add float32 ones (`add_lora_layers(model)`); a cast
    of a submodule whose rest trains in float32; a checkpoint copy (`'ema': deepcopy(ema).half()`
    in `torch.save`); an EMA copied before the cast, or cast to float32 (`p.detach().clone().float()`);
    a pipeline built with `from_pretrained(..., unet=unet, torch_dtype=weight_dtype)` (diffusers
    loads what it is not handed in that dtype and keeps the modules it is handed as they are), or
    from a deep copy of the trained model. bfloat16 is not flagged (see below).

    ## Why is this bad?
    An optimizer updates the parameters in their own dtype. float16 numbers near a weight
    are about 1/2000 of it apart, so any update smaller than about 1/4000 of the weight
    rounds away and the weight does not move: small learning rates, small gradients and late
    training lose most of their updates. Adam's default `eps=1e-8` is below float16's
    smallest subnormal (~6e-8), and its second moment `(1 - 0.999) * grad**2` underflows for
    gradients below ~8e-3, so its denominator is exactly zero: the first step divides by
    zero. An EMA with decay 0.9999 changes each value by 1/10000 per step: in float16
    `e * 0.9999` rounds back to `e`, and the EMA never moves. Mixed precision keeps float32
    weights and runs only the forward pass in float16 (`torch.autocast`).

    ## What goes wrong at runtime
    Nothing raises. Measured by `amplint verify` (CPU, a 32-64-1 MLP): with SGD (lr 0.05,
    200 steps) 65% of the gradient-carrying weights did not move at a step in float16
    (0.05% with float32 master weights), and the float32 loss after 200 steps was 1.26x
    higher; with Adam the weights were inf/NaN after the very first step; an EMA with decay
    0.9999 kept in float16 left 99% of its values exactly where they started after 100 steps
    and moved 5% as far as a float32 one. bfloat16 is worse for rounding (91% of SGD updates
    lost, loss 3.5x higher; the EMA left 99.9% of its values where they started and moved
    0.15% as far) but never hits Adam's division by zero: pure bfloat16
    training is a deliberate memory trade-off, often made with Kahan-summation or
    stochastic-rounding optimizers we cannot see, so the rule leaves bfloat16 alone.

    ## Example
    ```python
    model = Net().cuda().half()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for x, y in loader:
        loss = loss_fn(model(x.cuda().half()), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    model = Net().cuda()  # float32 master weights
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x.cuda()), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```
    and keep an EMA in float32 (`ema = deepcopy(model)`), casting a copy to float16 only
    when saving a checkpoint.

    ## Fix safety
    No fix. Keeping float32 master weights means changing how the model is cast (autocast
    instead of `.half()`) or how the optimizer is built; both change the run.
    """

    code = "AMP010"
    name = "half-precision-master-weights"
    severity = "error"
    triggers = (".half(", "float16", "torch.half")
    # An optimizer built in the file (`torch.optim.*`, the classes the semantic layer knows,
    # `optimizer_class`), or an in-place average's update.
    requires = ("optim.", "optimizer", "Optimizer", "Adam", "SGD", "Lion", "LAMB", "Lamb", "LARS", "Adafactor", "Muon", "Shampoo", "Sophia", "AdaBelief", "mul_(", "lerp_(", "copy_(", "*=")
    # A float16 cast, and an optimizer or an in-place average.
    needs = ({HALF}, {OPTIMIZER, AVERAGE})

    PREDICTIONS = (
        Prediction(
            "sgd",
            "lost_update_fraction",
            "With SGD at least 30 points more of the gradient-carrying weights do not move at a step "
            "than with float32 master weights: their updates round away.",
            compare="buggy-fixed",
            at_least=0.3,
            dtypes=("float16",),
            quotes=(("buggy", "65%"), ("fixed", "0.05%")),
        ),
        Prediction(
            "sgd",
            "lost_update_fraction",
            "... and in bfloat16.",
            compare="buggy-fixed",
            at_least=0.3,
            dtypes=("bfloat16",),
            quotes=(("buggy", "91%"),),
        ),
        Prediction(
            "sgd",
            "true_loss",
            "The float32 loss after the SGD steps is at least 1.03x the loss with float32 master weights.",
            compare="buggy/fixed",
            at_least=1.03,
            dtypes=("float16",),
            quotes=(("value", "1.26x"),),
        ),
        Prediction(
            "sgd",
            "true_loss",
            "... and in bfloat16.",
            compare="buggy/fixed",
            at_least=1.1,
            dtypes=("bfloat16",),
            quotes=(("value", "3.5x"),),
        ),
        Prediction(
            "adam",
            "first_nonfinite_step",
            "With Adam's default eps=1e-8 the weights are inf or NaN after the first step.",
            compare="buggy",
            at_most=0,
            dtypes=("float16",),
        ),
        Prediction(
            "ema",
            "ema_frozen_fraction",
            "An EMA with decay 0.9999 kept in the low-precision dtype leaves at least 90 points more of "
            "its values exactly where they started after 100 steps than a float32 EMA.",
            compare="buggy-fixed",
            at_least=0.9,
            dtypes=("float16",),
            quotes=(("buggy", "99% of"),),
        ),
        Prediction(
            "ema",
            "ema_frozen_fraction",
            "... and in bfloat16.",
            compare="buggy-fixed",
            at_least=0.9,
            dtypes=("bfloat16",),
            quotes=(("buggy", "99.9%"),),
        ),
        Prediction(
            "ema",
            "ema_moved",
            "That EMA moves at most a tenth as far as a float32 one.",
            compare="buggy/fixed",
            at_most=0.1,
            dtypes=("float16",),
            quotes=(("value", "5% as far"),),
        ),
        Prediction(
            "ema",
            "ema_moved",
            "... and in bfloat16.",
            compare="buggy/fixed",
            at_most=0.1,
            dtypes=("bfloat16",),
            quotes=(("value", "0.15%"),),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        precision = model.facts(Precision)
        for cast, optimizer in precision.trained_in_low_precision("float16"):
            adapters = adapters_added(precision, cast)
            text = _adapter_message(cast, optimizer, adapters.node) if adapters is not None else _trained_message(cast, optimizer)
            yield Report(cast.node, Message.split(text))
        for recreated in adapters_recreated_on_load(precision, "float16"):
            yield Report(recreated.record.node, Message.split(_recreated_message(recreated)))
        for cast, average in model.facts(Precision).averaged_in_low_precision("float16"):
            yield Report(cast.node, Message.split(_averaged_message(cast, average)))
        for foreign, update in model.facts(Precision).averaged_elsewhere_in_low_precision("float16"):
            yield Report(foreign.cast.node, Message.split(_averaged_elsewhere_message(foreign, update.node)))

    VALID = (
        # Inference only: no optimizer.
        """
import torch
model = Net().cuda().half().eval()
with torch.no_grad():
    out = model(x.cuda().half())
""",
        # apex's FP16_Optimizer keeps float32 master weights.
        """
import torch
model = Net().cuda().half()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
optimizer = FP16_Optimizer(optimizer, static_loss_scale=128.0)
for x in loader:
    optimizer.backward(model(x).sum())
    optimizer.step()
""",
        # apex amp O2: amp.initialize takes the optimizer over.
        """
import torch
from apex import amp
model = Net().cuda().half()
optimizer = torch.optim.Adam(model.parameters())
model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
for x in loader:
    with amp.scale_loss(model(x).sum(), optimizer) as scaled:
        scaled.backward()
    optimizer.step()
""",
        # Cast for export after training.
        """
import torch
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for x in loader:
    model(x).sum().backward()
    optimizer.step()
model.half()
torch.onnx.export(model, x.half(), "model.onnx")
""",
        # Cast only where nothing trains: an evaluation branch that returns, an eval-only flag.
        """
import torch
def main(args):
    model = Net().cuda()
    if args.mode == "benchmark":
        model = model.half()
        benchmark(model)
        return
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
    if args.do_predict and not args.do_train:
        model.half()
        predict(model)
""",
        # A frozen text encoder cast on the branch where it is not trained (diffusers).
        """
import itertools
import torch
weight_dtype = torch.float16 if args.mixed_precision == "fp16" else torch.float32
if not args.train_text_encoder:
    text_encoder.to(accelerator.device, dtype=weight_dtype)
vae.to(accelerator.device, dtype=weight_dtype)
params = itertools.chain(unet.parameters(), text_encoder.parameters()) if args.train_text_encoder else unet.parameters()
optimizer = torch.optim.AdamW(params, lr=args.learning_rate)
for batch in loader:
    accelerator.backward(loss_fn(unet, batch))
    optimizer.step()
""",
        # LoRA: the base is float16, the trainable adapters are upcast to float32.
        """
import torch
unet.to(accelerator.device, dtype=torch.float16)
unet.add_adapter(lora_config)
cast_training_params(unet, dtype=torch.float32)
optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, unet.parameters()), lr=1e-4)
for batch in loader:
    loss_fn(unet, batch).backward()
    optimizer.step()
""",
        # A frozen float16 model with no adapter: nothing trainable is float16.
        """
import torch
unet.requires_grad_(False)
unet.to(accelerator.device, dtype=torch.float16)
optimizer = torch.optim.AdamW(list(filter(lambda p: p.requires_grad, unet.parameters())) + list(controlnet.parameters()))
for batch in loader:
    loss_fn(unet, controlnet, batch).backward()
    optimizer.step()
""",
        # A float32 EMA; a float16 copy only in the checkpoint.
        """
import copy
import torch
class ModelEMA:
    def __init__(self, model, decay=0.9999):
        self.ema = copy.deepcopy(model).eval()
        self.decay = decay
    def update(self, model):
        with torch.no_grad():
            for e, p in zip(self.ema.parameters(), model.parameters()):
                e.mul_(self.decay).add_(p.detach(), alpha=1 - self.decay)
def save(model, ema, path):
    torch.save({"model": copy.deepcopy(model).half(), "ema": copy.deepcopy(ema.ema).half()}, path)
""",
        # bfloat16 training, here with a Kahan-summation optimizer: not flagged.
        """
import torch
import optimi
model = Net().cuda().to(torch.bfloat16)
optimizer = optimi.AdamW(model.parameters(), lr=1e-4, kahan_sum=True)
for x in loader:
    model(x).sum().backward()
    optimizer.step()
""",
        # An EMA of float32 copies of a float16 model's tensors (apex keeps the model's master weights).
        """
import torch
model = Net().cuda().half()
optimizer = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=0.01))
ema = {name: p.detach().clone().float() for name, p in model.named_parameters()}
for x in loader:
    optimizer.backward(model(x).sum())
    optimizer.step()
    with torch.no_grad():
        for name, p in model.named_parameters():
            ema[name].mul_(0.999).add_(p.float(), alpha=0.001)
""",
        # A float16 model copied into a float32 EMA's state, value by value: no decay.
        """
import torch
model = Net().cuda().half()
ema = Net().cuda()
for x in loader:
    train_step(model, x)
    with torch.no_grad():
        for ema_v, model_v in zip(ema.state_dict().values(), model.state_dict().values()):
            ema_v.copy_(model_v.float() * 1.0)
""",
        # Only a frozen backbone is float16; the head trains in float32.
        """
import torch
model.backbone.half().requires_grad_(False)
optimizer = torch.optim.SGD(model.head.parameters(), lr=0.01)
for x in loader:
    model(x).sum().backward()
    optimizer.step()
""",        # The EMA's copy halved for validation and cast back before the next update.
        _VALIDATED_EMA + "        ema.ema.float()\n",
        # The load hook upcasts the adapters it re-creates (diffusers after #6514).
        _RESUMED_LORA.format(after="\n        cast_training_params([unet_], dtype=torch.float32)"),
    )
    INVALID = (
        Flagged(
            """
import torch
model = Net().cuda().half()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for x, y in loader:
    loss = loss_fn(model(x.cuda().half()), y)
    loss.backward()
    optimizer.step()
""",
            at=((3, 9),),
        ),
        # Cast in __init__, trained in another method; param groups built in a loop.
        Flagged(
            """
import torch
class Trainer:
    def __init__(self, model):
        self.model = model.to("cuda", torch.float16)
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            (no_decay if name.endswith("bias") else decay).append(p)
        groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
        self.optimizer = torch.optim.AdamW(groups, lr=1e-4)
    def step(self, x):
        self.model(x).mean().backward()
        self.optimizer.step()
""",
            at=((5, 22),),
        ),
        # The trained model cast to a dtype that is float16 under fp16 mixed precision.
        Flagged(
            """
import torch
weight_dtype = torch.float32
if accelerator.mixed_precision == "fp16":
    weight_dtype = torch.float16
unet.to(accelerator.device, dtype=weight_dtype)
optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-5)
for batch in loader:
    accelerator.backward(loss_fn(unet, batch))
    optimizer.step()
""",
            at=((6, 1),),
        ),
        # LoRA adapters added to a model already cast to float16 are float16 themselves.
        Flagged(
            """
import torch
unet.requires_grad_(False)
unet.to(accelerator.device, dtype=torch.float16)
unet.add_adapter(lora_config)
optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, unet.parameters()), lr=1e-4)
for batch in loader:
    loss_fn(unet, batch).backward()
    optimizer.step()
""",
            at=((4, 1),),
        ),
        # A model cast in main and trained in a helper.
        Flagged(
            """
import torch
def train(model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
def main():
    model = Net()
    model.half()
    train(model, loader)
""",
            at=((10, 5),),
        ),
        # An EMA copied from the model after it was cast: the copy is float16 too.
        Flagged(
            """
import copy
import torch
model = Net().cuda().half()
optimizer = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=0.01))
ema = copy.deepcopy(model)
for x in loader:
    optimizer.backward(model(x).sum())
    optimizer.step()
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters()):
            e.mul_(0.999).add_(p, alpha=0.001)
""",
            at=((6, 7),),
        ),
        # timm's `ModelEma` update: a copy of the decayed product, in float16.
        Flagged(
            """
import copy
import torch
model = Net().cuda().half()
ema = copy.deepcopy(model)
for x in loader:
    train_step(model, x)
    with torch.no_grad():
        msd = model.state_dict()
        for k, ema_v in ema.state_dict().items():
            ema_v.copy_(ema_v * 0.9999 + (1. - 0.9999) * msd[k])
""",
            at=((5, 7),),
        ),
        # An EMA kept in float16 (yolov5's `self.ema.half()` before the fix).
        Flagged(
            """
import copy
import torch
class ModelEMA:
    def __init__(self, model, decay=0.9999):
        self.ema = copy.deepcopy(model).eval().half()
        self.decay = decay
    def update(self, model):
        with torch.no_grad():
            msd = model.state_dict()
            for k, v in self.ema.state_dict().items():
                if v.dtype.is_floating_point:
                    v *= self.decay
                    v += (1 - self.decay) * msd[k].detach()
""",
            at=((6, 20),),
        ),
        # yolov5 #9016 in one file: validation halves the copy an EMA class of the file keeps,
        # and the next epoch decays it in float16.
        Flagged(_VALIDATED_EMA, at=((24, 9),)),
        # diffusers #6514: the load hook re-creates the adapters the script upcast, in float16.
        Flagged(_RESUMED_LORA.format(after=""), at=((23, 9),)),
    )


def _dtype_words(cast: ModuleCast) -> str:
    if cast.dtypes == frozenset({"float16"}):
        return "float16"
    return "float16 (one of the dtypes it can be)"


def _cast_words(cast: ModuleCast, verb: str) -> str:
    """`model.half()` casts `model` to float16; for a copy made after a cast: `copy.deepcopy(model)`
    copies `model` after `model.half()` cast it to float16, so `ema` is float16 too."""
    original = cast.inherits
    if original is None:
        return f"`{source_text(cast.node)}` {verb} `{cast.name}` {'to' if verb == 'casts' else 'in'} {_dtype_words(cast)}"
    return (
        f"`{source_text(cast.node)}` copies `{cast.copy_of}` after `{source_text(original.node)}` cast it to "
        f"{_dtype_words(original)}, so `{cast.name}` {'is' if original.dtypes == frozenset({'float16'}) else 'may be'} float16 too"
    )


def _holding(cast: ModuleCast, optimizer: OptimizerBuild) -> str:
    """` (which holds `unet`, the module being trained)` for a pipeline built from the trained module."""
    for path, component in cast.held.items():
        if any(path[0] == root and (path[1][: len(rest)] == rest or rest[: len(path[1])] == path[1]) for root, rest in optimizer.trains):
            return f" (which holds `{component}`, the module being trained)"
    return ""


def _trained_message(cast: ModuleCast, optimizer: OptimizerBuild) -> str:
    holder = f"`{optimizer.name}`" if optimizer.name else "the optimizer"
    words = _cast_words(cast, "casts")
    holding = _holding(cast, optimizer)
    if holding:
        words = words.replace(f"`{cast.name}`", f"`{cast.name}`{holding}", 1)
        return (
            f"{words}, and {holder} (`{source_text(optimizer.node)}`) then updates its float16 parameters: with "
            "a GradScaler (accelerate's fp16) the next `unscale_` raises 'Attempting to unscale FP16 gradients', "
            "without one updates smaller than ~1/4000 of a weight round away. Move the pipeline to the device "
            f"only (no dtype), or build it from a copy of `{next(iter(cast.held.values()))}`."
        )
    return (
        f"{words}, and {holder} "
        f"(`{source_text(optimizer.node)}`) then updates those float16 parameters with no float32 master "
        f"copy: updates smaller than ~1/4000 of a weight round away{_eps_words(optimizer)}. Keep the "
        "parameters float32 and run the forward pass under `torch.autocast(..., dtype=torch.float16)` with a "
        "GradScaler."
    )


def _adapter_message(cast: ModuleCast, optimizer: OptimizerBuild, adapters: cst.Call) -> str:
    """Adapters added after the cast (`unet.add_adapter(config)`): peft builds them in the dtype
    of the layers they wrap, and they are what the optimizer trains."""
    holder = f"`{optimizer.name}`" if optimizer.name else "the optimizer"
    return (
        f"{_cast_words(cast, 'casts')}, and `{source_text(adapters)}` then creates its adapters in that dtype: "
        f"they are the parameters {holder} (`{source_text(optimizer.node)}`) trains, with no float32 master copy "
        "(peft builds adapters in the dtype of the layers they wrap and freezes the rest). With a GradScaler "
        "(accelerate's fp16) the first `unscale_` raises 'Attempting to unscale FP16 gradients'; without one "
        "updates smaller than ~1/4000 of a weight round away. Upcast the trainable parameters after adding the "
        f"adapters: `cast_training_params({cast.name}, dtype=torch.float32)` (diffusers.training_utils), or "
        "`p.data = p.to(torch.float32)` for each parameter that requires grad."
    )


def _recreated_message(found: LoadHookAdapters) -> str:
    """Adapters a load-state hook builds anew on resuming (diffusers #6514): upcasts made where
    the adapters were first added ran before, and do not reach them."""
    holder = f"`{found.optimizer.name}`" if found.optimizer.name else "the optimizer"
    return (
        f"`{source_text(found.record.node)}` re-creates the adapters of `{found.module}` when "
        f"`{source_text(found.load)}` runs `{found.hook}` to resume, and `{source_text(found.cast.node)}` cast "
        f"`{found.cast.name}` to {_dtype_words(found.cast)} before: the new adapters are in that dtype, and nothing after this call in "
        f"`{found.hook}` upcasts them, so a resumed run trains float16 parameters with {holder}. With a GradScaler "
        "(accelerate's fp16) the first `unscale_` raises 'Attempting to unscale FP16 gradients'; without one updates "
        "smaller than ~1/4000 of a weight round away. Upcast them at the end of the hook: "
        "`cast_training_params(models, dtype=torch.float32)` (diffusers.training_utils)."
    )


# Optimizers whose default eps (1e-8, Adagrad's 1e-10) is 0 in float16: the update divides by it.
_TINY_EPS = ("adam", "rmsprop", "adagrad")


def _eps_words(optimizer: OptimizerBuild) -> str:
    """The eps sentence, for the optimizer the user has: Adam's, not SGD's."""
    last = (dotted_name(optimizer.node.func) or "").rsplit(".", 1)[-1]
    if not any(word in last.lower() for word in _TINY_EPS):
        return ""
    return f", and `{last}`'s default eps is 0 in float16 (the update divides by it: inf/NaN)"


def _averaged_message(cast: ModuleCast, average: InPlaceAverage) -> str:
    return (
        f"{_cast_words(cast, 'keeps')}, and "
        f"`{source_text(average.update)}` then decays it in place: with a decay close to 1 each update is "
        "smaller than float16's spacing, rounds away, and the average stays frozen. Keep the average in "
        "float32 (cast a copy only when saving)."
    )


def _averaged_elsewhere_message(foreign: ForeignAverage, update) -> str:
    """An EMA class (of another module, or of this file) built here from a float16 module, or
    whose copy is cast here: name the class where it is."""
    cast = foreign.cast
    original = cast.inherits
    if original is None:  # the copy the instance keeps, cast after it was made
        return (
            f"`{source_text(cast.node)}`{f' ({cast.via})' if cast.via else ''} casts the copy that `{foreign.class_name}` ({foreign.where}) keeps in "
            f"`{foreign.attribute}` ({foreign.copy}) to {_dtype_words(cast)}, and `{source_text(update)}` then decays it in "
            f"place ({foreign.update}): with a decay close to 1 each update is smaller than float16's spacing, rounds "
            "away, and the average stays frozen. Cast a copy for evaluation or saving, or cast it back to float32 "
            "before the next update."
        )
    verb = "is" if original.dtypes == frozenset({"float16"}) else "may be"
    return (
        f"`{source_text(cast.node)}` copies `{cast.copy_of}` after `{source_text(original.node)}` cast it to "
        f"{_dtype_words(original)} (`{foreign.class_name}`, {foreign.where}, keeps {foreign.copy} in `{foreign.attribute}`), "
        f"so that copy {verb} float16 too, and `{source_text(update)}` then decays it in place ({foreign.update}): with a "
        "decay close to 1 each update is smaller than float16's spacing, rounds away, and the average stays frozen. "
        f"Build `{foreign.class_name}` before the cast, or keep its copy in float32 (cast a copy only when saving)."
    )
