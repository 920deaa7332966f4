"""The training frameworks amplint models, as data: how each is built, which argument owns its
precision and which values of it mean float16 mixed precision (a loss scaler), and what its
methods do to the loss, the gradients and the autocast state.

The semantic layer reads this table (`amplint.semantic.scalers` for the precision and the
scaler, `amplint.semantic.calls` for the methods, `amplint.semantic.regions` for the autocast
context); docs/frameworks.md lists what is modelled. A framework's precision may be any value
the layer can resolve (a literal, a conditional expression, a dict lookup, an argparse option's
`choices` and `default`, a config class's default): where one of them is float16, the framework
*may* scale the loss, and its methods are read as a scaler's. Where none can be resolved, it is
unknown, and the framework is not taken to scale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Optional, Tuple

# Precision values, lower-cased, as `str()` of the argument would write them.
FP16_PRECISIONS = frozenset({"fp16", "16", "16-mixed", "16_mixed"})
BF16_PRECISIONS = frozenset({"bf16", "bf16-mixed", "bf16_mixed"})
# Settings that choose a half precision somewhere: a framework's (`"fp16"`, `"bf16-mixed"`)
# or a dtype's name (`getattr(torch, "float16")`). `catalogue.constant_names` looks for them in text.
HALF_SETTINGS = FP16_PRECISIONS | BF16_PRECISIONS | frozenset({"float16", "bfloat16", "half"})
# No autocast at all: full precision.
FULL_PRECISIONS = frozenset({"no", "32", "32-true", "64", "64-true", "fp32"})


@dataclass(frozen=True)
class Framework:
    """One framework object that may own a loss scaler."""

    name: str  # "accelerate", "fabric", "lightning", "timm", "deepspeed": `ScalerInfo.framework`
    # Qualified names of its constructor, and the bare names trusted without a visible import.
    constructors: FrozenSet[str]
    bare_constructors: FrozenSet[str]
    # The argument that chooses its precision: keyword ("" for none), and position (-1: keyword only).
    precision_keyword: str
    precision_position: int = -1
    # A deprecated boolean keyword that means float16 when true (`Accelerator(fp16=True)`).
    fp16_flag: Optional[str] = None
    # Methods of the object: a backward that scales the loss, clips that unscale first, what
    # hands back optimizers that step through its scaler, and a context that opens an
    # autocast region in the object's precision.
    backward_methods: FrozenSet[str] = frozenset()
    unscaling_methods: FrozenSet[str] = frozenset()
    prepare_methods: FrozenSet[str] = frozenset()
    autocast_methods: FrozenSet[str] = frozenset()
    # What a variable holding the object is named, where the file does not show it built
    # (`self.accelerator` set by a base class): its autocast() is still the framework's.
    receiver_fragment: str = ""
    # Whether the scaler is the object's own (accelerate, Fabric) or belongs to the classes
    # of the file that the framework trains (Lightning's Trainer trains the LightningModule
    # classes, Hugging Face's TrainingArguments configure the Trainer subclasses): those
    # whose base is one of `module_bases`. Their methods call the framework on `self`:
    # `self.<m>(...)` for each `m` below (`"accelerator.backward"`: `self.accelerator.backward`).
    scales_module_classes: bool = False
    module_bases: FrozenSet[str] = frozenset()
    self_backward_methods: FrozenSet[str] = frozenset()
    self_unscaling_methods: FrozenSet[str] = frozenset()
    self_optimizer_methods: FrozenSet[str] = frozenset()
    # Hooks after which the framework steps through its scaler (Hugging Face's Trainer runs
    # `training_step`, then unscales, clips and steps): a backward they run must be scaled.
    stepped_after_hooks: FrozenSet[str] = frozenset()
    # The argument of a trained class's constructor that takes the settings built by
    # `constructors` (Hugging Face's `Trainer(model, args, ...)`: `args=`, or the second
    # positional argument of a subclass without an `__init__` of its own): a module that
    # imports the class and builds both decides its precision.
    settings_keyword: str = ""
    settings_position: int = -1
    # The framework object's methods that train the module handed to them (`trainer.fit(
    # LitModel())`), wherever its class is defined: a script that builds the object in float16
    # and fits an instance of another module's class gives that class the object's scaler there.
    training_methods: FrozenSet[str] = frozenset()
    # Class names matched whatever module defines them: projects copy timm's scaler into
    # their own utils (`from util.misc import NativeScalerWithGradNormCount as NativeScaler`).
    class_names: FrozenSet[str] = frozenset()
    # Precision from a config dict instead of a setting (DeepSpeed): the keywords that pass
    # it, and its sections whose `"enabled"` turns a precision on (`"fp16": {"enabled": True}`).
    # A config the file does not show as a dict literal (a JSON path) is unknown.
    config_keywords: Tuple[str, ...] = ()
    config_sections: Tuple[Tuple[str, str], ...] = ()
    # No precision setting at all: the object is a float16 loss scaler whenever it is built.
    always_float16: bool = False
    # The constructor returns a tuple: the object is this element, and this one an
    # optimizer that steps through its scaler (`engine, optimizer, _, _ = deepspeed.initialize(...)`).
    returned_position: int = -1
    returned_optimizer_position: int = -1
    # Methods that step the optimizer through the object's scaler (`engine.step()`).
    step_methods: FrozenSet[str] = frozenset()
    # Calling the object itself (`loss_scaler(loss, optimizer, clip_grad=...)`) scales the loss,
    # runs its backward, unscales before its own clip, steps the optimizer and updates the
    # scale; unless one of these keywords, given and not literally True, holds the step back
    # (an accumulation micro-batch: a scaled backward only).
    called_steps: bool = False
    hold_step_keywords: FrozenSet[str] = frozenset()
    # Hooks the framework calls on the user's classes while the gradients are still scaled
    # (Lightning's `on_after_backward`, called between the scaled backward and the unscale):
    # reading or clipping them there sees the loss scale. The advice names the hooks called
    # after the unscale (`on_before_optimizer_step`, `configure_gradient_clipping`).
    scaled_gradient_hooks: FrozenSet[str] = frozenset()
    hook_advice: str = ""  # `{hook}`: the scaled hook
    # Hooks of the classes it trains that it runs inside its own autocast, in its precision
    # (Lightning's strategy calls `training_step` inside `precision_plugin.train_step_context()`,
    # a `torch.autocast` at "16-mixed"/"bf16-mixed"): the ops written there, and in the
    # functions of the file they call, run under autocast (`amplint.semantic.regions`).
    autocast_hooks: FrozenSet[str] = frozenset()
    # Its constructor's keywords that may run those hooks without that autocast, each with a
    # word: given, the keyword leaves the region unknown (no region) unless every value it may
    # take is known and none holds the word ("" : any value). Lightning's DeepSpeed strategy
    # casts the model instead of autocasting, `plugins=` may replace the precision plugin,
    # `amp_backend="apex"` (Lightning 1.x) is apex's.
    autocast_hooks_unless: Tuple[Tuple[str, str], ...] = ()
    # Its constructor's keywords that put another loss scaler in charge instead of its
    # GradScaler when their value names the word: Lightning's DeepSpeed strategy (the engine
    # scales the loss and clips), apex. A value that only may name it leaves the GradScaler one
    # of the possibilities; one that cannot be read (`strategy=MyStrategy()`) leaves it.
    scaler_replaced_by: Tuple[Tuple[str, str], ...] = ()
    # A training loop the framework builds and runs itself (ignite's
    # `create_supervised_trainer(..., amp_mode="amp", scaler=False)`): the precision values
    # at which its loop autocasts (float16 on CUDA), the keyword that gives it a scaler (true
    # or a GradScaler), and its device argument (keyword, position).
    loop_autocast_values: FrozenSet[str] = frozenset()
    loop_scaler_keyword: str = ""
    loop_device_keyword: str = ""
    loop_device_position: int = -1
    # A wrapper of a GradScaler the user's code builds and owns (timm's NativeScaler): its
    # state belongs in the checkpoint beside the optimizer's, and building it again resets
    # the scale, as for a `GradScaler(...)` (AMP007, AMP008).
    user_owns_state: bool = False
    # What a message advises, spelled for the framework (`{owner}`: the object as written,
    # `{loss}`, `{optimizer}`): the backward that scales, the clip that unscales first,
    # and the step through its scaler.
    backward_advice: str = "Use `{owner}.backward({loss})`, which scales the loss"
    clip_advice: str = ""
    step_advice: str = ""


ACCELERATE = Framework(
    name="accelerate",
    constructors=frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"}),
    bare_constructors=frozenset({"Accelerator"}),
    precision_keyword="mixed_precision",
    fp16_flag="fp16",
    backward_methods=frozenset({"backward"}),
    unscaling_methods=frozenset({"clip_grad_norm_", "clip_grad_value_", "unscale_gradients"}),
    prepare_methods=frozenset({"prepare", "prepare_optimizer"}),
    autocast_methods=frozenset({"autocast"}),
    receiver_fragment="accelerator",
    clip_advice="Clip with `{owner}.clip_grad_norm_(...)`, which unscales first",
    step_advice="Use `{optimizer} = {owner}.prepare({optimizer})`",
)

FABRIC = Framework(
    name="fabric",
    constructors=frozenset({"lightning.Fabric", "lightning.fabric.Fabric", "lightning_fabric.Fabric"}),
    bare_constructors=frozenset({"Fabric"}),
    precision_keyword="precision",
    backward_methods=frozenset({"backward"}),
    unscaling_methods=frozenset({"clip_gradients"}),
    prepare_methods=frozenset({"setup", "setup_optimizers"}),
    autocast_methods=frozenset({"autocast"}),
    receiver_fragment="fabric",
    clip_advice="Clip with `{owner}.clip_gradients(...)`, which unscales first",
    step_advice="Use `{optimizer} = {owner}.setup_optimizers({optimizer})`",
)

LIGHTNING = Framework(
    name="lightning",
    constructors=frozenset(
        {"pytorch_lightning.Trainer", "lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.trainer.Trainer"}
    ),
    bare_constructors=frozenset({"Trainer", "pl.Trainer", "L.Trainer"}),
    precision_keyword="precision",
    scales_module_classes=True,
    module_bases=frozenset({"LightningModule"}),
    training_methods=frozenset({"fit"}),
    self_backward_methods=frozenset({"manual_backward"}),
    self_unscaling_methods=frozenset({"clip_gradients"}),
    self_optimizer_methods=frozenset({"optimizers"}),
    scaled_gradient_hooks=frozenset({"on_after_backward"}),
    autocast_hooks=frozenset({"training_step", "validation_step", "test_step", "predict_step"}),
    autocast_hooks_unless=(("strategy", "deepspeed"), ("plugins", ""), ("amp_backend", "apex")),
    scaler_replaced_by=(("strategy", "deepspeed"), ("amp_backend", "apex")),
    hook_advice=(
        "Lightning calls `{hook}` before it unscales them; do this in `on_before_optimizer_step` "
        "(or clip in `configure_gradient_clipping`), which it calls after"
    ),
    backward_advice="Use `self.manual_backward({loss})`, which scales the loss",
    clip_advice="Clip with `self.clip_gradients({optimizer}, ...)`, which unscales first",
    step_advice="Use `{optimizer} = self.optimizers()`",
)

TIMM = Framework(
    name="timm",
    constructors=frozenset(
        {"timm.utils.NativeScaler", "timm.utils.cuda.NativeScaler", "timm.utils.ApexScaler", "timm.utils.cuda.ApexScaler"}
    ),
    bare_constructors=frozenset({"NativeScaler", "ApexScaler"}),
    class_names=frozenset({"NativeScaler", "NativeScalerWithGradNormCount"}),
    precision_keyword="",
    always_float16=True,
    user_owns_state=True,
    called_steps=True,
    hold_step_keywords=frozenset({"need_update", "update_grad"}),
    backward_advice="Call `{owner}({loss}, {optimizer})`, which scales the loss, unscales and steps",
    clip_advice="Pass the threshold to `{owner}(loss, {optimizer}, clip_grad=...)`, which unscales before it clips",
    step_advice="Step with `{owner}(loss, {optimizer})`",
)

DEEPSPEED = Framework(
    name="deepspeed",
    constructors=frozenset({"deepspeed.initialize"}),
    bare_constructors=frozenset(),
    precision_keyword="",
    config_keywords=("config", "config_params"),
    config_sections=(("fp16", "fp16"), ("bf16", "bf16"), ("bfloat16", "bf16")),
    returned_position=0,
    returned_optimizer_position=1,
    backward_methods=frozenset({"backward"}),
    step_methods=frozenset({"step"}),
    clip_advice='Clip with `"gradient_clipping"` in the DeepSpeed config, which unscales first',
    step_advice="Step with `{owner}.step()`",
)

HF_TRAINER = Framework(
    name="transformers",
    constructors=frozenset(
        {
            "transformers.TrainingArguments",
            "transformers.Seq2SeqTrainingArguments",
            "transformers.training_args.TrainingArguments",
            "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
        }
    ),
    bare_constructors=frozenset({"TrainingArguments", "Seq2SeqTrainingArguments"}),
    precision_keyword="",
    fp16_flag="fp16",
    scales_module_classes=True,
    module_bases=frozenset({"Trainer", "Seq2SeqTrainer"}),
    self_backward_methods=frozenset({"accelerator.backward"}),
    self_unscaling_methods=frozenset({"accelerator.clip_grad_norm_", "accelerator.unscale_gradients"}),
    stepped_after_hooks=frozenset({"training_step"}),
    settings_keyword="args",
    settings_position=1,
    # No `autocast_hooks`: since transformers 4.30 the Trainer autocasts through accelerate,
    # which wraps the model's `forward` in autocast and converts its outputs to float32;
    # `compute_loss`, `training_step` and `prediction_step` run their own ops outside it
    # (`autocast_smart_context_manager` is a null context unless `use_cpu_amp`).
    backward_advice="Use `self.accelerator.backward({loss})`, which scales the loss",
    clip_advice="Leave clipping to the Trainer (`max_grad_norm=`), which unscales first",
    step_advice="Leave the step to the Trainer, which steps through its scaler",
)

IGNITE = Framework(
    name="ignite",
    constructors=frozenset({"ignite.engine.create_supervised_trainer"}),
    bare_constructors=frozenset({"create_supervised_trainer"}),
    precision_keyword="amp_mode",
    loop_autocast_values=frozenset({"amp"}),
    loop_scaler_keyword="scaler",
    loop_device_keyword="device",
    loop_device_position=3,
    backward_advice="Pass `scaler=True` and ignite scales the loss",
    clip_advice="Clip in an `Events.ITERATION_COMPLETED` handler only after unscaling",
    step_advice="Pass `scaler=True` and ignite steps through it",
)

# The frameworks whose objects the file builds into a variable (accelerate, Fabric,
# timm's scaler, DeepSpeed's engine), those that train the file's classes, and those that
# build a training loop of their own.
OBJECT_FRAMEWORKS = (ACCELERATE, FABRIC, TIMM, DEEPSPEED)
CLASS_FRAMEWORKS = (LIGHTNING, HF_TRAINER)
LOOP_FRAMEWORKS = (IGNITE,)
BY_NAME: Dict[str, Framework] = {f.name: f for f in (*OBJECT_FRAMEWORKS, *CLASS_FRAMEWORKS, *LOOP_FRAMEWORKS)}
# The hooks frameworks call with gradients that still carry their loss scale, and those
# after which they step through it.
SCALED_GRADIENT_HOOKS = frozenset(hook for f in BY_NAME.values() for hook in f.scaled_gradient_hooks)
STEPPED_AFTER_HOOKS = frozenset(hook for f in BY_NAME.values() for hook in f.stepped_after_hooks)
# The names of the frameworks' backward methods (`accelerator.backward`, `fabric.backward`,
# `self.manual_backward`): each runs a backward pass, wherever it is called.
BACKWARD_METHODS = frozenset(
    name.rsplit(".", 1)[-1] for f in BY_NAME.values() for name in f.backward_methods | f.self_backward_methods
)
# The hooks frameworks run under their own autocast, the bases of the classes that have
# them, and the calls that build those frameworks: what the pre-check sees.
AUTOCAST_HOOKS = frozenset(hook for f in CLASS_FRAMEWORKS for hook in f.autocast_hooks)
AUTOCAST_HOOK_BASES = frozenset(base for f in CLASS_FRAMEWORKS if f.autocast_hooks for base in f.module_bases)
# Each builder's last name -> the keyword that sets its precision (`Trainer` -> "precision").
AUTOCAST_HOOK_BUILDERS: Dict[str, str] = {
    name.rsplit(".", 1)[-1]: f.precision_keyword
    for f in CLASS_FRAMEWORKS
    if f.autocast_hooks
    for name in f.constructors | f.bare_constructors
}
# The words of a file that may open an autocast region: `autocast`, or the precision keyword of
# a framework whose hooks run under its own autocast (`Trainer(precision="16-mixed")`). The
# triggers of the rules that look inside regions.
REGION_TRIGGERS = ("autocast", *sorted({f"{keyword}=" for keyword in AUTOCAST_HOOK_BUILDERS.values()}))
# The functions that build a training loop which may autocast: what the pre-check sees.
LOOP_BUILDERS = frozenset(name.rsplit(".", 1)[-1] for f in LOOP_FRAMEWORKS for name in f.constructors | f.bare_constructors)
# The constructors of the framework objects a function may build and return for its callers
# (`def build_accelerator(cfg): return Accelerator(...)`), by name: what the pre-check sees of a
# module that exports one. Lightning's `Trainer`, a name too common to tell, is left out.
FACTORY_CONSTRUCTORS = frozenset(
    name.rsplit(".", 1)[-1] for f in (*OBJECT_FRAMEWORKS, *CLASS_FRAMEWORKS) if f is not LIGHTNING for name in f.bare_constructors
)
# The class names of the GradScaler wrappers the user's code owns: a GradScaler as the
# pre-check and AMP007/AMP008's trigger words see them.
OWNED_SCALER_CLASSES = frozenset(
    name.rsplit(".", 1)[-1]
    for f in BY_NAME.values()
    if f.user_owns_state
    for name in f.constructors | f.bare_constructors | f.class_names
)


def autocast_dtype(precision: str) -> Optional[str]:
    """The dtype a framework's autocast runs in at this precision; None for none at all."""
    if precision in FP16_PRECISIONS:
        return "float16"
    if precision in BF16_PRECISIONS:
        return "bfloat16"
    return None


# --------------------------------------------------------------------------- adapters


@dataclass(frozen=True)
class AdapterCall:
    """A library call that adds trainable adapter parameters to a module, or upcasts its
    trainable parameters (`amplint.analyses.adapters`, AMP010).

    peft's `inject_adapter_in_model` (and what calls it: diffusers' and transformers'
    `model.add_adapter(config)`, diffusers' LoRA loaders) creates each adapter in the dtype of
    the layer it wraps and marks only the adapters trainable: after a cast of the module to
    float16 they are its only trainable parameters, in float16. peft's `get_peft_model` does
    the same, then upcasts float16 and bfloat16 adapters to float32 (`autocast_adapter_dtype=True`,
    its default since peft 0.12); diffusers' `cast_training_params(model)` upcasts every
    trainable parameter to float32."""

    library: str  # "peft", "diffusers"
    names: FrozenSet[str]  # the callee's last name: `add_adapter`, `inject_adapter_in_model`
    # Where the module is: the receiver (`unet.add_adapter(config)`), or an argument (keyword, position).
    method: bool = False
    module_keywords: Tuple[str, ...] = ()
    module_position: int = -1
    # "creates": adapters in the module's current dtype, its only trainable parameters;
    # "upcasts": its trainable parameters become float32; "keeps": reads or loads their values,
    # or picks the active adapter, leaving every dtype as it is (no precision change, whatever
    # its name: `get_peft_model_state_dict(unet)` in a checkpoint hook undoes no cast).
    effect: str = "creates"
    # A keyword that, given a literal False, keeps an upcasting call from upcasting
    # (`get_peft_model(model, config, autocast_adapter_dtype=False)`): it then creates.
    upcast_keyword: str = ""
    # Matches only where the first argument is a string literal (True), or an adapter's config
    # (False: `LoraConfig(...)`, a name like `unet_lora_config`, or `adapter_config=`): peft's
    # `PeftModel.add_adapter("name", config)` upcasts like `get_peft_model`, diffusers' and
    # transformers' `model.add_adapter(config, adapter_name="name")` do not, and AdapterHub's
    # `model.add_adapter(task_name, config=...)` is neither.
    name_first: Optional[bool] = None


ADAPTER_CALLS = (
    AdapterCall("peft", frozenset({"inject_adapter_in_model"}), module_keywords=("model",), module_position=1),
    AdapterCall("diffusers", frozenset({"add_adapter", "load_lora_adapter"}), method=True, name_first=False),
    AdapterCall(
        "diffusers",
        frozenset({"load_lora_into_unet", "load_lora_into_text_encoder", "load_lora_into_transformer"}),
        module_keywords=("unet", "text_encoder", "transformer"),
        module_position=2,
    ),
    AdapterCall(
        "peft",
        frozenset({"get_peft_model"}),
        module_keywords=("model",),
        module_position=0,
        effect="upcasts",
        upcast_keyword="autocast_adapter_dtype",
    ),
    AdapterCall("peft", frozenset({"add_adapter"}), method=True, effect="upcasts", upcast_keyword="autocast_adapter_dtype", name_first=True),
    AdapterCall("diffusers", frozenset({"cast_training_params"}), module_keywords=("model",), module_position=0, effect="upcasts"),
    AdapterCall(
        "peft",
        frozenset({"get_peft_model_state_dict", "set_peft_model_state_dict"}),
        module_keywords=("model",),
        module_position=0,
        effect="keeps",
    ),
    AdapterCall(
        "diffusers",
        frozenset({"set_adapter", "set_adapters", "enable_adapters", "disable_adapters", "get_adapter_state_dict"}),
        method=True,
        effect="keeps",
    ),
)
