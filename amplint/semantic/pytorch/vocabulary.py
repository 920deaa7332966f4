"""The naming conventions amplint relies on where the code does not say what a thing is.

Training code rarely spells out that `opt_g` is an optimizer or that `accelerator.backward`
scales the loss. These lists are amplint's guesses from names, kept in one place with their
tests (tests/test_vocabulary.py). They only ever decide what a call on an unknown object
is; a construction the file shows (`torch.optim.AdamW(...)`, `GradScaler()`) always wins.
"""

from __future__ import annotations

import re

# Receivers whose `.backward(loss)` is a framework's, which scales (or manages) the loss itself.
FRAMEWORK_RECEIVERS = frozenset(
    {
        "self",
        "accelerator",
        "accel",
        "fabric",
        "engine",
        "model_engine",
        "ds_engine",
        "deepspeed",
        "deepspeed_engine",
        "trainer",
        "runner",
        "strategy",
        "booster",
        "learner",
        "model",
    }
)
_FRAMEWORK_FRAGMENTS = ("accelerator", "engine", "fabric", "booster")
# Receivers whose `.clip_grad_norm_()` unscales first (accelerate, Fabric, trainers); FSDP's
# `model.clip_grad_norm_()` does not.
_SELF_UNSCALING_CLIP_FRAGMENTS = ("accelerator", "accel", "fabric", "trainer", "strategy", "engine", "booster")

# `x.step()` on these is a schedule, an EMA or a progress bar, never an optimizer update.
_NOT_OPTIMIZER_FRAGMENTS = ("sched", "scaler", "ema", "swa", "bar", "warmup", "progress", "option", "env")
_OPTIMIZER_NAME = re.compile(r"(^|_)opt($|_|\d|[a-z]$)")
OPTIMIZER_CLASSES = frozenset(
    {
        "SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "RMSprop", "Rprop", "NAdam",
        "RAdam", "LBFGS", "SparseAdam", "ASGD", "Adafactor", "Lion", "LAMB", "Lamb", "LARS",
        "AdamW8bit", "Adam8bit", "PagedAdamW", "PagedAdamW8bit", "FusedAdam", "FusedLAMB",
        "FusedSGD", "ZeroRedundancyOptimizer", "Muon", "Shampoo", "Sophia", "AdaBelief",
    }
)
OPTIMIZER_FACTORIES = frozenset({"create_optimizer", "create_optimizer_v2", "build_optimizer"})


def _last(name: str) -> str:
    return name.rsplit(".", 1)[-1].lower()


def looks_like_optimizer(name: str) -> bool:
    """`optimizer`, `self.opt_g`, `optD`, `d_optim`; not `scheduler`, `ema`, `pbar`, `env`."""
    if named_like_a_non_optimizer(name):
        return False
    last = _last(name)
    return "optim" in last or _OPTIMIZER_NAME.search(last) is not None


def named_like_a_non_optimizer(name: str) -> bool:
    return any(fragment in _last(name) for fragment in _NOT_OPTIMIZER_FRAGMENTS)


def is_framework_receiver(name: str) -> bool:
    last = _last(name)
    return last in FRAMEWORK_RECEIVERS or any(f in last for f in _FRAMEWORK_FRAGMENTS)


def clip_unscales_itself(receiver: str) -> bool:
    """`accelerator.clip_grad_norm_(...)` unscales before clipping; FSDP's `model.clip_grad_norm_` does not."""
    return any(fragment in _last(receiver) for fragment in _SELF_UNSCALING_CLIP_FRAGMENTS)


def named_like_a_scaler(name: str) -> bool:
    """`scaler`, `self.grad_scaler`, `loss_scaler`; sklearn's `standard_scaler` too, which is
    why a name alone only ever says "may scale", never "is a GradScaler"."""
    return "scaler" in _last(name)


# Functions whose job may be to write or read a checkpoint: `save_checkpoint`, `save_on_master`,
# `torch.save`, `save_model`, `dump_state`, `snapshot`, `resume_from`, `load_ckpt`.
_CHECKPOINTING = re.compile(r"save|checkpoint|ckpt|snapshot|state|dump|persist|serial|resume|restore|load|store")


def named_like_checkpointing(name: str) -> bool:
    """A function or method named like something that may save or restore state
    (`save_checkpoint`, `snapshot`, `load_state_dict`, `persist`)."""
    return _CHECKPOINTING.search(name.lower()) is not None


# The words of a name whose True/False chooses a precision (`catalogue.constant_names` reads
# the same ones from text).
PRECISION_NAME_WORDS = frozenset({"fp16", "bf16", "amp", "half", "precision", "mixed", "autocast"})


def named_like_a_precision(name: str) -> bool:
    """A flag or setting named like a precision choice: `fp16`, `USE_AMP`, `mixed_precision`
    (whole words between underscores: not `sample`, `clamp`)."""
    return not PRECISION_NAME_WORDS.isdisjoint(name.lower().split("_"))


def named_like_scaling(name: str) -> bool:
    """A helper that may scale a loss: `self.scale_loss(loss)`, apex's `amp.scale_loss(...)`."""
    return "scale" in _last(name)


def named_like_a_loss(name: str) -> bool:
    return "loss" in _last(name)


# Precision outside autocast (`amplint.analyses.precision`).
# A call that takes an optimizer and returns a schedule for it keeps no weights.
_SCHEDULE_FRAGMENTS = ("sched", "lr", "warmup", "swa", "plateau")
# Wrappers that keep float32 master weights of a low-precision model: apex's FP16_Optimizer
# and amp.initialize, fairseq's FP16Optimizer, DeepSpeed's initialize, MixedPrecision...
_MASTER_WEIGHT_FRAGMENTS = ("fp16", "fp32", "master", "mixedprecision", "mixed_precision", "initialize")
# Calls after which a module's trainable parameters may no longer have the dtype it was cast
# to: adapters added (LoRA layers are often built or upcast in float32), training params
# upcast (diffusers' `cast_training_params(unet, dtype=torch.float32)`), k-bit preparation.
_PRECISION_CHANGING_FRAGMENTS = ("adapter", "lora", "peft", "inject", "cast", "float", "fp32", "precision", "kbit")


def named_like_a_schedule(callee: str) -> bool:
    """`LambdaLR`, `get_cosine_schedule_with_warmup`, `ReduceLROnPlateau`, `SWALR`."""
    return any(fragment in _last(callee) for fragment in _SCHEDULE_FRAGMENTS)


def named_like_master_weights(callee: str) -> bool:
    """`FP16_Optimizer`, `amp.initialize`, `deepspeed.initialize`, `optim.FP16Optimizer.build_optimizer`:
    anywhere in the dotted name."""
    lowered = callee.lower()
    return any(fragment in lowered for fragment in _MASTER_WEIGHT_FRAGMENTS)


def may_change_parameter_precision(callee: str) -> bool:
    """`unet.add_adapter(...)`, `get_peft_model(model, cfg)`, `cast_training_params(unet, ...)`,
    `prepare_model_for_kbit_training(model)`."""
    return any(fragment in _last(callee) for fragment in _PRECISION_CHANGING_FRAGMENTS)
