"""The slice of the PyTorch API that amplint reasons about, and how local names reach it.

A full qualified-name analysis (LibCST's QualifiedNameProvider) costs several times a
parse. The AMP API is a few dozen names, so a small import-alias table is enough: it maps
each local name bound by an import to the dotted path it stands for, and `resolve` turns
`amp.autocast` into `torch.cuda.amp.autocast` when the file said `import torch.cuda.amp as amp`.
"""

from __future__ import annotations

from typing import Dict, Optional

import libcst as cst

from amplint.semantic.names import dotted_name

AUTOCAST = frozenset(
    {
        "torch.autocast",
        "torch.amp.autocast",
        "torch.amp.autocast_mode.autocast",
    }
)
# The legacy per-device classes take `enabled` first and imply the device.
LEGACY_AUTOCAST_DEVICE = {
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}

GRAD_SCALER = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.cpu.amp.grad_scaler.GradScaler",
        "torch.distributed.fsdp.ShardedGradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    }
)
# A bare `GradScaler(...)` whose import we cannot see (star import, notebook cell order)
# is still almost certainly torch's.
GRAD_SCALER_BARE_NAMES = frozenset({"GradScaler", "ShardedGradScaler"})

CLIP_FUNCTIONS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grads_with_norm_",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_value_",
        "torch.nn.utils.clip_grad.clip_grads_with_norm_",
    }
)

NO_GRAD_CONTEXTS = frozenset(
    {
        "torch.no_grad",
        "torch.inference_mode",
        "torch.autograd.no_grad",
        "torch.autograd.inference_mode",
        "torch.autograd.grad_mode.no_grad",
        "torch.autograd.grad_mode.inference_mode",
    }
)

AUTOGRAD_BACKWARD = frozenset({"torch.autograd.backward"})
AUTOGRAD_GRAD = frozenset({"torch.autograd.grad"})

DTYPES = {
    "torch.float16": "float16",
    "torch.half": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.float32": "float32",
    "torch.float": "float32",
}

OPTIMIZER_MODULE_PREFIXES = ("torch.optim.", "torch.distributed.optim.")

# Methods of nn.Module that return the module itself: a chain of them starts from the module.
MODULE_CHAIN = frozenset(
    {"to", "cuda", "cpu", "half", "float", "bfloat16", "double", "train", "eval", "requires_grad_", "type", "xpu", "mps"}
)
CAST_METHODS = {"half": "float16", "bfloat16": "bfloat16", "float": "float32", "double": "float64"}
# What hands an optimizer a module's parameters.
PARAMETER_METHODS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children"})
STATE_METHODS = frozenset({"parameters", "named_parameters", "state_dict", "buffers"})
# In-place updates that decay a parameter toward another: what an EMA's update loop does.
DECAY_METHODS = frozenset({"mul_", "lerp_", "_foreach_mul_", "_foreach_lerp_"})


class ImportAliases:
    """Local name -> the dotted path an import bound it to."""

    def __init__(self) -> None:
        self._names: Dict[str, str] = {}

    def add_import(self, node: cst.Import) -> None:
        for alias in node.names:
            full = dotted_name(alias.name)
            if full is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                self._names[alias.asname.name.value] = full
            else:
                # `import torch.cuda.amp` binds `torch`; the rest is attribute access.
                head = full.split(".")[0]
                self._names[head] = head

    def add_import_from(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = dotted_name(node.module)
        if module is None:
            return
        for alias in node.names:
            name = dotted_name(alias.name)
            if name is None:
                continue
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self._names[local] = f"{module}.{name}"

    def resolve(self, node: cst.BaseExpression) -> Optional[str]:
        """The qualified name `node` refers to, or None when it is not an imported name.

        `torch` itself resolves even without a visible import: notebooks and snippets often
        rely on an import made elsewhere, and no other library is spelled `torch`.
        """
        dotted = dotted_name(node)
        if dotted is None:
            return None
        head, _, rest = dotted.partition(".")
        target = self._names.get(head)
        if target is None:
            if head != "torch":
                return None
            target = "torch"
        return f"{target}.{rest}" if rest else target


# Tensor methods and attributes whose result has the receiver's dtype (views, copies, masks):
# a float32 cast is seen through them (`Float32Casts.float32_cast`, `evidence.MODULE_ISLAND`).
SAME_DTYPE_METHODS = frozenset(
    {
        "transpose", "permute", "view", "reshape", "contiguous", "unsqueeze", "squeeze", "expand",
        "expand_as", "flatten", "unflatten", "t", "repeat", "narrow", "select", "clone", "detach",
        "movedim", "swapaxes", "swapdims", "view_as", "reshape_as", "flip", "roll", "tril", "triu",
        "masked_fill", "mul", "div", "neg", "requires_grad_",
    }
)
SAME_DTYPE_ATTRIBUTES = frozenset({"T", "mT", "H", "mH", "data"})
