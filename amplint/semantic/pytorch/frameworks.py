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
from typing import Dict, FrozenSet, Optional

# Precision values, lower-cased, as `str()` of the argument would write them.
FP16_PRECISIONS = frozenset({"fp16", "16", "16-mixed", "16_mixed"})
BF16_PRECISIONS = frozenset({"bf16", "bf16-mixed", "bf16_mixed"})
# No autocast at all: full precision.
FULL_PRECISIONS = frozenset({"no", "32", "32-true", "64", "64-true", "fp32"})


@dataclass(frozen=True)
class Framework:
    """One framework object that may own a loss scaler."""

    name: str  # "accelerate", "fabric", "lightning": `ScalerInfo.framework`
    # Qualified names of its constructor, and the bare names trusted without a visible import.
    constructors: FrozenSet[str]
    bare_constructors: FrozenSet[str]
    # The argument that chooses its precision: keyword, and position (-1: keyword only).
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
    # Whether the scaler is the object's own (accelerate, Fabric) or belongs to the
    # LightningModule classes of the file that a float16 Trainer trains (Lightning).
    scales_module_classes: bool = False


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
)

LIGHTNING = Framework(
    name="lightning",
    constructors=frozenset(
        {"pytorch_lightning.Trainer", "lightning.Trainer", "lightning.pytorch.Trainer", "pytorch_lightning.trainer.Trainer"}
    ),
    bare_constructors=frozenset({"Trainer", "pl.Trainer", "L.Trainer"}),
    precision_keyword="precision",
    scales_module_classes=True,
)

# Methods a LightningModule calls on itself (`self.manual_backward(loss)`,
# `self.clip_gradients(opt, ...)`, `self.optimizers()`) and the base class that has them.
LIGHTNING_MODULE_BASE = "LightningModule"
LIGHTNING_SELF_BACKWARD = "manual_backward"
LIGHTNING_SELF_UNSCALING_CLIP = "clip_gradients"
LIGHTNING_SELF_OPTIMIZERS = "optimizers"

# The frameworks whose objects the file builds into a variable (accelerate, Fabric).
OBJECT_FRAMEWORKS = (ACCELERATE, FABRIC)
BY_NAME: Dict[str, Framework] = {f.name: f for f in (ACCELERATE, FABRIC, LIGHTNING)}


def autocast_dtype(precision: str) -> Optional[str]:
    """The dtype a framework's autocast runs in at this precision; None for none at all."""
    if precision in FP16_PRECISIONS:
        return "float16"
    if precision in BF16_PRECISIONS:
        return "bfloat16"
    return None
