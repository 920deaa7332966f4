"""What autocast does to each PyTorch op, and the names the ops go by: data from PyTorch.

The policy of each op is PyTorch's "Autocast Op Reference" (docs/source/amp.rst) and its source,
`aten/src/ATen/autocast_mode.h` (`AT_FORALL_LOWER_PRECISION_FP`, `AT_FORALL_FP32`,
`AT_FORALL_FP32_SET_OPT_DTYPE`, `AT_FORALL_PROMOTE`, shared by CUDA and the backends that reuse
its lists) and `autocast_mode.cpp` (the CPU lists, the banned `binary_cross_entropy`). What the
analyses do with them is `amplint.analyses.region_ops` (the ops under autocast) and
`amplint.analyses.lowered_values` (the values autocast lowered).

`TABLES_FROM` is the torch the tables were read from: CUDA's lists are the header as torch
2.13.0's wheel ships it (`torch/include/ATen/autocast_mode.h`), CPU's were measured on torch
2.13.0+cpu (float32 inputs under `torch.autocast("cpu", dtype=...)` for the lower-precision list,
float16 and bfloat16 inputs for the float32 list; the same for both dtypes). A new torch may move
an op: read the header again and rerun the measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, Optional, Tuple

TABLES_FROM = "torch 2.13.0"

LOWER_PRECISION = "lower precision"
FLOAT32 = "float32"
PROMOTE = "promote"
BANNED = "banned"
# What autocast does depends on what the code does not show (CPU's einsum of an equation
# amplint cannot read runs as a `bmm`, cast down, or as a `mul`, in its inputs' dtype).
UNKNOWN = "unknown"

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
# CUDA lists `einsum` itself, so it casts einsum's inputs down whatever the equation: an outer
# or elementwise product (`"i,j->ij"`, TorchOps' "einsum_elementwise") and one whose equation
# the code does not show ("einsum_unread") too. CPU lists einsum nowhere: a contracting equation
# runs as a `bmm`, which CPU casts down ("einsum"), any other as a `mul`, in its inputs' dtype
# (measured: float32 in, float32 out).
_LOWER_CUDA_ONLY = frozenset({"mv", "addmv", "addr", "einsum_elementwise", "einsum_unread"})
# Composites that autocast lists nowhere on CPU: they decompose into `mm`/`bmm`, which CPU
# autocast casts down (measured on torch 2.13: float32 inputs come out float16/bfloat16). On
# CUDA `tensordot` is on the promote list, and `inner` reaches it: float32 inputs stay float32.
_LOWER_CPU_ONLY = frozenset({"tensordot", "inner"})
# AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE and `norm`, as amplint names the ops (the
# `upsample_*` kernels behind `F.interpolate` are left out: its "area" mode is none of them).
_FLOAT32_CUDA = frozenset(
    {
        "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal",
        "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "rms_norm", "group_norm", "norm",
        "normalize", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss",
        "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
        "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
        "multi_margin_loss", "binary_cross_entropy_with_logits", "cross_entropy", "dist", "pdist",
        "cdist", "renorm", "logsumexp", "prod", "softmax", "log_softmax", "cumprod", "cumsum",
        "linalg_vector_norm", "linalg_matrix_norm", "sum",
    }
)
# Measured on torch 2.13's CPU (float16 and bfloat16 inputs come out float32): the losses,
# `cdist`, `prod` (and the FFTs and linear algebra, which amplint does not name).
_FLOAT32_CPU = frozenset(
    {
        "binary_cross_entropy", "binary_cross_entropy_with_logits", "nll_loss", "cross_entropy", "mse_loss",
        "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "cdist", "prod",
    }
)
_PROMOTE_CUDA = frozenset(
    {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put", "tensordot", "scatter_add"}
)
_BANNED_CUDA = frozenset({"binary_cross_entropy"})
# The names the binary cross-entropy CUDA's autocast refuses is written with.
BANNED_LOSS_NAMES = frozenset({"binary_cross_entropy", "BCELoss"})
_UNKNOWN_CPU = frozenset({"einsum_unread"})


def autocast_policy(op: str, device: str) -> Optional[str]:
    """What autocast on `device` does to `op`: LOWER_PRECISION, FLOAT32, PROMOTE, BANNED,
    UNKNOWN (it depends on what the code does not show), or None when it leaves the op alone
    (it runs in its inputs' dtype) or the device is not one whose lists amplint knows (CUDA, CPU)."""
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
        if op in _UNKNOWN_CPU:
            return UNKNOWN
        return FLOAT32 if op in _FLOAT32_CPU else None
    return None


# --------------------------------------------------------------------------- low-precision formats


@dataclass(frozen=True)
class FloatFormat:
    """What a low-precision dtype can hold (IEEE 754 binary16; bfloat16, float32's exponent with
    8 bits of significand), for the constants code writes into it."""

    name: str
    max_finite: float  # the largest finite value
    smallest_subnormal: float  # the smallest positive value
    spacing_below_one: float  # the gap between 1.0 and the largest value below it

    def rounds_to_zero(self, value: float) -> bool:
        """Whether a positive constant (an epsilon) is 0 once stored: at or below half the
        smallest subnormal (the tie rounds to even, 0)."""
        return 0 < value <= self.smallest_subnormal / 2

    def rounds_to_one(self, value: float) -> bool:
        """Whether a constant just below 1 (a clamp's `1 - eps`) is 1.0 once stored: within
        half a spacing of 1."""
        return value < 1.0 and 1.0 - value <= self.spacing_below_one / 2

    def overflows(self, value: float) -> bool:
        """Whether a finite constant is outside the format's range: `masked_fill`, `fill_`,
        `full` refuse it ("value cannot be converted to type c10::Half without overflow")."""
        return abs(value) > self.max_finite and abs(value) != float("inf")

    def rounds_to_infinity(self, value: float) -> bool:
        """Whether a finite constant becomes +-inf where it is rounded rather than checked
        (`torch.where(c, x, -1e9)`, `x[m] = -1e9`): from half a spacing past `max_finite`."""
        spacing_at_max = self.max_finite - float.fromhex(_BELOW_MAX[self.name])
        return abs(value) != float("inf") and abs(value) >= self.max_finite + spacing_at_max / 2


# The largest finite value of each format's last binade but one step: 65504 - 32, and bfloat16's.
_BELOW_MAX = {"float16": "0x1.ff8p+15", "bfloat16": "0x1.fcp+127"}

FORMATS: Dict[str, FloatFormat] = {
    "float16": FloatFormat("float16", 65504.0, 2.0**-24, 2.0**-11),
    "bfloat16": FloatFormat("bfloat16", float.fromhex("0x1.fep+127"), 2.0**-133, 2.0**-8),
}


def rounds_to_zero(value: float, dtype: str) -> bool:
    """Whether a positive constant (an epsilon) is 0 once stored in `dtype`."""
    found = FORMATS.get(dtype)
    return found is not None and found.rounds_to_zero(value)


def rounds_to_one(value: float, dtype: str) -> bool:
    """Whether a constant just below 1 (a clamp's `1 - eps`) is 1.0 once stored in `dtype`."""
    found = FORMATS.get(dtype)
    return found is not None and found.rounds_to_one(value)


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
    "torch.rsqrt": "rsqrt",
    "torch.acos": "acos",
    "torch.arccos": "acos",
    "torch.asin": "asin",
    "torch.arcsin": "asin",
    "torch.reciprocal": "reciprocal",
    "torch.nn.functional.rms_norm": "rms_norm",
    "torch.cdist": "cdist",
    # On no autocast list of either device: they run in their input's dtype.
    "torch.sqrt": "sqrt",
    "torch.abs": "abs",
    "torch.tanh": "tanh",
    "torch.nn.functional.tanh": "tanh",
    "torch.relu": "relu",
    "torch.nn.functional.relu": "relu",
    "torch.nn.functional.gelu": "gelu",
    "torch.nn.functional.silu": "silu",
    "torch.nn.functional.dropout": "dropout",
    "torch.mean": "mean",
    "torch.amax": "amax",
    "torch.amin": "amin",
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
    "rsqrt": ("rsqrt", frozenset({0})),
    "acos": ("acos", frozenset({0})),
    "arccos": ("acos", frozenset({0})),
    "asin": ("asin", frozenset({0})),
    "arcsin": ("asin", frozenset({0})),
    "reciprocal": ("reciprocal", frozenset({0})),
    "sqrt": ("sqrt", frozenset({0})),
    "abs": ("abs", frozenset({0})),
    "tanh": ("tanh", frozenset({0})),
    "relu": ("relu", frozenset({0})),
    "mean": ("mean", frozenset({0, 1})),
    "amax": ("amax", frozenset({0, 1})),
    "amin": ("amin", frozenset({0, 1})),
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
    "torch.nn.LayerNorm": "layer_norm",
    "torch.nn.GroupNorm": "group_norm",
    "torch.nn.RMSNorm": "rms_norm",
    "torch.nn.Dropout": "dropout",
    "torch.nn.ReLU": "relu",
    "torch.nn.GELU": "gelu",
    "torch.nn.SiLU": "silu",
    "torch.nn.Tanh": "tanh",
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
ALL_OPERANDS = frozenset({"einsum", "einsum_elementwise", "einsum_unread", "chain_matmul", "linalg_multi_dot"})



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
# The calls at which a value autocast lowered may meet a float16 hazard
# (`amplint.analyses.hazard_sites`): ops that write a constant into it, the ops an epsilon
# guards, the in-place writes of it into another tensor. Divisions and subscript assignments
# are the others.
HAZARD_CALLS = frozenset(
    {
        "masked_fill", "masked_fill_", "fill_", "fill_diagonal_", "index_fill_", "new_full", "full_like", "full", "where",
        "clamp", "clip", "clamp_", "clip_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_",
        "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "acos", "asin", "arccos", "arcsin",
        "index_add_", "index_add", "scatter_add_", "scatter_add", "scatter_", "scatter", "scatter_reduce_",
        "scatter_reduce", "index_copy_", "index_copy", "index_put_", "index_put", "masked_scatter_", "put_",
        "index_reduce_", "lerp_",
    }
)
# The default dtype of `torch.autocast(device_type)` without `dtype=`, per device.
DEFAULT_DTYPES = {"cuda": "float16", "cpu": "bfloat16"}
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
