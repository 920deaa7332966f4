"""What autocast does to each PyTorch op, and the names the ops go by: data from PyTorch.

The policy of each op is PyTorch's "Autocast Op Reference" (docs/source/amp.rst) and its source,
`aten/src/ATen/autocast_mode.h` (`AT_FORALL_LOWER_PRECISION_FP`, `AT_FORALL_FP32`,
`AT_FORALL_FP32_SET_OPT_DTYPE`, `AT_FORALL_PROMOTE`, shared by CUDA and the backends that reuse
its lists) and `autocast_mode.cpp` (the CPU lists, the banned `binary_cross_entropy`). What the
analysis does with them is `amplint.analyses.region_ops`.
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, Optional, Tuple

LOWER_PRECISION = "lower precision"
FLOAT32 = "float32"
PROMOTE = "promote"
BANNED = "banned"

# Ops that run in the region's low-precision dtype on CUDA and on CPU (torch 2.13: the CPU
# list was measured, the CUDA list is AT_FORALL_LOWER_PRECISION_FP).
_LOWER_EVERYWHERE = frozenset(
    {
        "matmul", "mm", "bmm", "baddbmm", "addmm", "addbmm", "einsum", "linear",
        "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
        "chain_matmul", "linalg_multi_dot", "linalg_vecdot", "prelu", "scaled_dot_product_attention",
    }
)
# Lower precision on CUDA; not on CPU's list (measured: float32 inputs stay float32).
_LOWER_CUDA_ONLY = frozenset({"mv", "addmv", "addr"})
# Composites that autocast lists nowhere on CPU: they decompose into `mm`/`bmm`, which CPU
# autocast casts down (measured on torch 2.13: float32 inputs come out float16/bfloat16). On
# CUDA `tensordot` is on the promote list, and `inner` reaches it: float32 inputs stay float32.
_LOWER_CPU_ONLY = frozenset({"tensordot", "inner"})
_FLOAT32_CUDA = frozenset(
    {
        "log", "log1p", "log2", "log10", "exp", "expm1", "softmax", "log_softmax", "sum", "pow",
        "prod", "cumsum", "cumprod", "norm", "normalize", "cosine_similarity", "softplus",
        "layer_norm", "group_norm", "logsumexp", "binary_cross_entropy_with_logits",
        "nll_loss", "cross_entropy", "mse_loss", "l1_loss", "kl_div",
    }
)
_FLOAT32_CPU = frozenset(
    {"binary_cross_entropy", "binary_cross_entropy_with_logits", "nll_loss", "cross_entropy", "mse_loss", "kl_div"}
)
_PROMOTE_CUDA = frozenset({"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "tensordot", "scatter_add"})
_BANNED_CUDA = frozenset({"binary_cross_entropy"})


def autocast_policy(op: str, device: str) -> Optional[str]:
    """What autocast on `device` does to `op`: LOWER_PRECISION, FLOAT32, PROMOTE, BANNED, or
    None when it leaves the op alone (it runs in its inputs' dtype) or the device is not one
    whose lists amplint knows (CUDA, CPU)."""
    if device == "cuda":
        if op in _LOWER_EVERYWHERE or op in _LOWER_CUDA_ONLY:
            return LOWER_PRECISION
        if op in _BANNED_CUDA:
            return BANNED
        if op in _FLOAT32_CUDA:
            return FLOAT32
        return PROMOTE if op in _PROMOTE_CUDA else None
    if device == "cpu":
        if op in _LOWER_EVERYWHERE or op in _LOWER_CPU_ONLY:
            return LOWER_PRECISION
        return FLOAT32 if op in _FLOAT32_CPU else None
    return None


# --------------------------------------------------------------------------- naming ops

FUNCTIONS: Dict[str, str] = {
    "torch.matmul": "matmul",
    "torch.linalg.matmul": "matmul",
    "torch.mm": "mm",
    "torch.bmm": "bmm",
    "torch.baddbmm": "baddbmm",
    "torch.addmm": "addmm",
    "torch.addbmm": "addbmm",
    "torch.mv": "mv",
    "torch.addmv": "addmv",
    "torch.addr": "addr",
    "torch.einsum": "einsum",
    "torch.tensordot": "tensordot",
    "torch.functional.tensordot": "tensordot",
    "torch.inner": "inner",
    "torch.functional.einsum": "einsum",
    "torch.chain_matmul": "chain_matmul",
    "torch.linalg.multi_dot": "linalg_multi_dot",
    "torch.linalg.vecdot": "linalg_vecdot",
    "torch.nn.functional.linear": "linear",
    "torch.nn.functional.prelu": "prelu",
    "torch.nn.functional.scaled_dot_product_attention": "scaled_dot_product_attention",
    "torch.log": "log",
    "torch.log2": "log2",
    "torch.log10": "log10",
    "torch.log1p": "log1p",
    "torch.special.log1p": "log1p",
    "torch.sigmoid": "sigmoid",
    "torch.nn.functional.sigmoid": "sigmoid",
    "torch.special.expit": "sigmoid",
    "torch.softmax": "softmax",
    "torch.nn.functional.softmax": "softmax",
    "torch.special.softmax": "softmax",
    "torch.log_softmax": "log_softmax",
    "torch.nn.functional.log_softmax": "log_softmax",
    "torch.special.log_softmax": "log_softmax",
    "torch.nn.functional.logsigmoid": "logsigmoid",
    "torch.nn.functional.binary_cross_entropy": "binary_cross_entropy",
    "torch.nn.functional.binary_cross_entropy_with_logits": "binary_cross_entropy_with_logits",
    "torch.sum": "sum",
    "torch.exp": "exp",
    "torch.pow": "pow",
    "torch.cumsum": "cumsum",
    "torch.prod": "prod",
    "torch.logsumexp": "logsumexp",
    "torch.norm": "norm",
    "torch.nn.functional.layer_norm": "layer_norm",
    "torch.nn.functional.group_norm": "group_norm",
    "torch.nn.functional.normalize": "normalize",
    "torch.nn.functional.cosine_similarity": "cosine_similarity",
    "torch.cosine_similarity": "cosine_similarity",
    "torch.nn.functional.softplus": "softplus",
    "torch.clamp": "clamp",
    "torch.clip": "clamp",
    "torch.clamp_min": "clamp_min",
}
for _n in ("1d", "2d", "3d"):
    for _prefix in ("torch.nn.functional.", "torch."):
        FUNCTIONS[f"{_prefix}conv{_n}"] = f"conv{_n}"
        FUNCTIONS[f"{_prefix}conv_transpose{_n}"] = f"conv_transpose{_n}"

# Tensor methods, with the number of positional arguments the tensor method takes: a method
# of the same name with another arity (`self.log("loss", loss)` in Lightning) is not it.
# `x.inner(y)` is left out: `self.inner(x)` is far more often a wrapped module than a tensor.
METHODS: Dict[str, Tuple[str, FrozenSet[int]]] = {
    "matmul": ("matmul", frozenset({1})),
    "mm": ("mm", frozenset({1})),
    "bmm": ("bmm", frozenset({1})),
    "mv": ("mv", frozenset({1})),
    "baddbmm": ("baddbmm", frozenset({2})),
    "addmm": ("addmm", frozenset({2})),
    "addbmm": ("addbmm", frozenset({2})),
    "addmv": ("addmv", frozenset({2})),
    "addr": ("addr", frozenset({2})),
    "log": ("log", frozenset({0})),
    "log2": ("log2", frozenset({0})),
    "log10": ("log10", frozenset({0})),
    "log1p": ("log1p", frozenset({0})),
    "sigmoid": ("sigmoid", frozenset({0})),
    "softmax": ("softmax", frozenset({0, 1})),
    "log_softmax": ("log_softmax", frozenset({0, 1})),
    "clamp": ("clamp", frozenset({0, 1, 2})),
    "clip": ("clamp", frozenset({0, 1, 2})),
    "clamp_min": ("clamp_min", frozenset({1})),
    "sum": ("sum", frozenset({0, 1})),
    "exp": ("exp", frozenset({0})),
    "pow": ("pow", frozenset({1})),
    "cumsum": ("cumsum", frozenset({1})),
    "prod": ("prod", frozenset({0, 1})),
    "logsumexp": ("logsumexp", frozenset({1})),
    "norm": ("norm", frozenset({0, 1})),
}

# `self.fc = nn.Linear(...)`, then `self.fc(x)`.
MODULES: Dict[str, str] = {
    "torch.nn.Linear": "linear",
    "torch.nn.Sigmoid": "sigmoid",
    "torch.nn.Softmax": "softmax",
    "torch.nn.LogSoftmax": "log_softmax",
    "torch.nn.LogSigmoid": "logsigmoid",
    "torch.nn.BCELoss": "binary_cross_entropy",
    "torch.nn.BCEWithLogitsLoss": "binary_cross_entropy_with_logits",
}
for _n in ("1d", "2d", "3d"):
    MODULES[f"torch.nn.Conv{_n}"] = f"conv{_n}"
    MODULES[f"torch.nn.ConvTranspose{_n}"] = f"conv_transpose{_n}"

# Which inputs of a product carry its operands (bias terms and the like are not).
OPERANDS: Dict[str, Tuple[int, ...]] = {
    "matmul": (0, 1), "mm": (0, 1), "bmm": (0, 1), "mv": (0, 1), "linalg_vecdot": (0, 1),
    "tensordot": (0, 1), "inner": (0, 1),
    "baddbmm": (1, 2), "addmm": (1, 2), "addbmm": (1, 2), "addmv": (1, 2), "addr": (1, 2),
    "linear": (0, 1), "prelu": (0, 1), "scaled_dot_product_attention": (0, 1),
    "conv1d": (0, 1), "conv2d": (0, 1), "conv3d": (0, 1),
    "conv_transpose1d": (0, 1), "conv_transpose2d": (0, 1), "conv_transpose3d": (0, 1),
}
ALL_OPERANDS = frozenset({"einsum", "chain_matmul", "linalg_multi_dot"})



def einsum_contracts(equation: str) -> bool:
    """Whether an einsum equation sums over an index that two operands share (`"ij,jk->ik"`,
    `"bhid,bhjd->bhij"`): only then does einsum run a `bmm`, which autocast lowers. An outer or
    elementwise product (`"i,j->ij"`, a rotary embedding's frequencies) is a `mul`, which runs
    in its inputs' dtype under autocast (measured: float32 in, float32 out)."""
    inputs, arrow, output = equation.replace(" ", "").partition("->")
    operands = inputs.split(",")
    shared: Dict[str, int] = {}
    for operand in operands:
        for index in set(operand.replace("...", "")):
            shared[index] = shared.get(index, 0) + 1
    if not arrow:  # implicit output: the indices written once, and the broadcast ones
        written = [index for operand in operands for index in operand.replace("...", "")]
        output = "".join(index for index in written if written.count(index) == 1) + "..."
    if "..." not in output and sum("..." in operand for operand in operands) >= 2:
        return True  # broadcast dimensions summed away
    return any(count >= 2 and index not in output for index, count in shared.items())


LOG_OPS = frozenset({"log", "log2", "log10", "log1p"})
LOWER_PRECISION_OPS = _LOWER_EVERYWHERE | _LOWER_CUDA_ONLY | _LOWER_CPU_ONLY

# Functions that build a tensor in the dtype their `dtype=` says (`torch.zeros(n,
# dtype=torch.float32)`): evidence of a tensor's dtype for `x.type_as(t)`.
CREATION_FUNCTIONS = frozenset(
    {
        "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.tensor", "torch.as_tensor",
        "torch.arange", "torch.linspace", "torch.logspace", "torch.eye", "torch.rand", "torch.randn",
        "torch.zeros_like", "torch.ones_like", "torch.empty_like", "torch.full_like", "torch.rand_like",
        "torch.randn_like",
    }
)


def names_of(ops: Iterable[str]) -> FrozenSet[str]:
    """Every name a file may write one of `ops` with: a function's or a module class's last
    name (`linear`, `Linear`, `expit`), a tensor method, the op itself. For the pre-check
    (`amplint.lint.evidence`): a file with none of them has none of the ops."""
    ops = frozenset(ops)
    tables = (FUNCTIONS.items(), MODULES.items(), ((name, op) for name, (op, _) in METHODS.items()))
    return ops | frozenset(name.rsplit(".", 1)[-1] for table in tables for name, op in table if op in ops)
