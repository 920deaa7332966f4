"""The autocast tables (`amplint.semantic.pytorch.autocast_ops`) against the torch installed:
CPU's lists as torch runs them, CUDA's as its header lists them, the low-precision formats as
`torch.finfo` gives them. Skipped without torch; the linter itself never imports it."""

import re
from pathlib import Path

import pytest

from amplint.semantic.pytorch.autocast_ops import FLOAT32, FORMATS, LOWER_PRECISION, PROMOTE, autocast_policy

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _ops():
    """op name -> a call of it on float tensors of the dtype given."""
    a = lambda dtype: torch.randn(4, 4).to(dtype)  # noqa: E731
    v = lambda dtype: torch.randn(4).to(dtype)  # noqa: E731
    p = lambda dtype: torch.rand(4, 4).to(dtype)  # noqa: E731
    return {
        "matmul": lambda d: a(d) @ a(d),
        "mm": lambda d: a(d).mm(a(d)),
        "bmm": lambda d: torch.bmm(a(d)[None], a(d)[None]),
        "linear": lambda d: F.linear(a(d), a(d)),
        "conv1d": lambda d: F.conv1d(a(d)[None], a(d)[:, :, None]),
        "einsum": lambda d: torch.einsum("ij,jk->ik", a(d), a(d)),
        "einsum_elementwise": lambda d: torch.einsum("i,j->ij", v(d), v(d)),
        "mv": lambda d: a(d).mv(v(d)),
        "tensordot": lambda d: torch.tensordot(a(d), a(d), 1),
        "scaled_dot_product_attention": lambda d: F.scaled_dot_product_attention(a(d)[None, None], a(d)[None, None], a(d)[None, None]),
        "softmax": lambda d: a(d).softmax(-1),
        "log": lambda d: p(d).log(),
        "exp": lambda d: a(d).exp(),
        "pow": lambda d: a(d).pow(2),
        "sum": lambda d: a(d).sum(),
        "norm": lambda d: a(d).norm(),
        "rsqrt": lambda d: p(d).rsqrt(),
        "layer_norm": lambda d: F.layer_norm(a(d), (4,)),
        "mean": lambda d: a(d).mean(),
        "sqrt": lambda d: p(d).sqrt(),
        "sigmoid": lambda d: a(d).sigmoid(),
        "acos": lambda d: (p(d) * 0.5).acos(),
        "mse_loss": lambda d: F.mse_loss(a(d), a(d)),
        "cross_entropy": lambda d: F.cross_entropy(a(d), torch.tensor([0, 1, 2, 3])),
        "l1_loss": lambda d: F.l1_loss(a(d), a(d)),
        "cdist": lambda d: torch.cdist(a(d), a(d)),
        "prod": lambda d: a(d).prod(),
    }


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cpu_lists_are_what_torch_runs(dtype):
    low = getattr(torch, dtype)
    for name, call in _ops().items():
        policy = autocast_policy(name, "cpu")
        with torch.autocast("cpu", dtype=low):
            lowered = call(torch.float32).dtype == low  # float32 inputs cast down: the lower-precision list
            raised = call(low).dtype == torch.float32  # low-precision inputs cast up: the float32 list
        assert lowered == (policy == LOWER_PRECISION), (name, policy)
        assert raised == (policy == FLOAT32), (name, policy)


def test_cuda_lists_are_the_headers():
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.is_file():
        pytest.skip("this torch ships no ATen headers")
    text = header.read_text()

    def listed(macro):
        body = text[text.index(f"#define {macro}(_)") :].split("\n\n", 1)[0]
        return set(re.findall(r"_\((\w+)", body))

    lower, float32 = listed("AT_FORALL_LOWER_PRECISION_FP"), listed("AT_FORALL_FP32") | listed("AT_FORALL_FP32_SET_OPT_DTYPE")
    promote = listed("AT_FORALL_PROMOTE")
    for name in ("matmul", "mm", "bmm", "baddbmm", "addmm", "einsum", "linear", "conv2d", "mv", "addmv", "addr", "prelu", "scaled_dot_product_attention"):
        assert name in lower and autocast_policy(name, "cuda") == LOWER_PRECISION, name
    for name in ("exp", "log", "pow", "rsqrt", "reciprocal", "acos", "softmax", "log_softmax", "sum", "prod", "layer_norm", "rms_norm", "cdist", "cumsum", "mse_loss"):
        assert name in float32 and autocast_policy(name, "cuda") == FLOAT32, name
    for name in ("addcmul", "tensordot", "scatter_add", "index_put", "dot"):
        assert name in promote and autocast_policy(name, "cuda") == PROMOTE, name
    # on no list: they run in their input's dtype
    for name in ("sqrt", "mean", "sigmoid", "clamp", "tanh", "relu", "gelu", "abs"):
        assert name not in lower | float32 | promote and autocast_policy(name, "cuda") is None, name


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_formats_are_torchs(dtype):
    info, ours = torch.finfo(getattr(torch, dtype)), FORMATS[dtype]
    assert ours.max_finite == info.max
    assert ours.smallest_subnormal == info.smallest_normal * info.eps  # the last bit below the normals
    assert ours.spacing_below_one == info.eps / 2
    low = getattr(torch, dtype)
    for value in (1e-8, 2.0**-25, 3e-8, 1e-40, 1e-45):
        assert ours.rounds_to_zero(value) == (torch.tensor(value).to(low).item() == 0.0), value
    for value in (1 - 1e-4, 1 - 1e-3, 1 - 2e-3, 1 - 1e-2):
        assert ours.rounds_to_one(value) == (torch.tensor(value).to(low).item() == 1.0), value
    for value in (-1e9, -65504.0, -65519.0, -65520.0, 3e38, 3.5e38):
        assert ours.rounds_to_infinity(value) == bool(torch.isinf(torch.tensor(value, dtype=torch.float64).to(low))), value
        overflows = False
        try:
            torch.zeros(1, dtype=low).masked_fill(torch.tensor([True]), value)
        except RuntimeError as error:
            overflows = "overflow" in str(error)
        assert ours.overflows(value) == overflows, value
