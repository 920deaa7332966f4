"""Which expressions hold a value autocast lowered, per device and dtype (`LoweredValues`): the
ops on each device's lower-precision list, followed through what runs in its input's dtype,
ended by islands, and nothing guessed where the code does not show it."""

import textwrap

import libcst as cst
import pytest

from amplint.analyses.lowered_values import LoweredValues, region_contexts
from amplint.semantic import analyze, iter_tree, source_text


def model(source):
    return analyze(cst.parse_module(textwrap.dedent(source)))


def lowered(source, function="f", device="cuda", dtype="float16", ambient=True):
    """{variable: the source of the op that lowered it, or None} for each `name = value` of
    `function`, its value asked about where it is written."""
    found = model(source)
    unit = next(u for u in found.units if u.name == function)
    answers = {}
    for node in iter_tree(unit.node):
        if isinstance(node, cst.Assign) and isinstance(node.targets[0].target, cst.Name):
            result = found.facts(LoweredValues).lowered(node.value, unit, device, dtype, ambient)
            answers[node.targets[0].target.value] = source_text(result.source) if result is not None else None
    return answers


ATTENTION = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

class Attention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=64):
        super().__init__()
        self.scale = dim_head ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)
        self.temperature = nn.Parameter(torch.ones(heads, 1, 1))

    def forward(self, x, mask, bias):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1)
        scores *= self.scale
        scaled = scores / math.sqrt(q.shape[-1])
        heads = scores * self.temperature
        biased = scores + bias
        squared = scores ** 2
        probs = torch.softmax(scores, -1)
        upcast = scores.float()
        masked = torch.where(mask, scores, -1e4).masked_fill(mask, 0)
        inverse = 1 / scores
        mean = scores.abs().mean(-1, keepdim=True)
        out = F.scaled_dot_product_attention(q, k, v)
        kept = out.view(-1).contiguous()[0]
        return out
"""


def test_lowered_through_what_keeps_the_dtype_and_ended_by_islands():
    cuda = lowered(ATTENTION, "Attention.forward")
    assert cuda["scores"] == cuda["scaled"] == cuda["masked"] == cuda["mean"] == "q @ k.transpose(-2, -1)"
    assert cuda["out"] == cuda["kept"] == "F.scaled_dot_product_attention(q, k, v)"
    # unknown tensors promote (a float32 parameter, a mask of any dtype); `.float()` is an island;
    # CUDA's float32 list: softmax, `**`, a number over a tensor
    for name in ("heads", "biased", "upcast", "squared", "probs", "inverse"):
        assert cuda[name] is None, name
    # CPU's float32 list is the losses: softmax, `**` and `1 / x` run in their input's dtype
    cpu = lowered(ATTENTION, "Attention.forward", device="cpu")
    assert cpu["squared"] == cpu["probs"] == cpu["inverse"] == "q @ k.transpose(-2, -1)"
    assert cpu["heads"] is None and cpu["upcast"] is None
    # the dtype does not change what autocast lowers
    assert lowered(ATTENTION, "Attention.forward", dtype="bfloat16") == cuda


def test_unpacking_and_augmented_assignment_follow_the_tensor():
    answers = lowered(
        """
        import torch
        def f(x, w, scale):
            q, k = (x @ w).chunk(2, dim=-1)
            a, b = q, torch.ones(3)
            q *= scale
            first = q
            other = b
            return first
        """
    )
    assert answers["first"] == "x @ w" and answers["other"] is None


def test_cuda_lowers_every_einsum_cpu_only_a_contracting_one():
    source = """
        import torch
        def f(t, inv_freq, q, k, equation):
            outer = torch.einsum("i,j->ij", t, inv_freq)
            scores = torch.einsum("bhid,bhjd->bhij", q, k)
            unread = torch.einsum(equation, q, k)
            return outer
    """
    assert lowered(source) == {"outer": 'torch.einsum("i,j->ij", t, inv_freq)', "scores": 'torch.einsum("bhid,bhjd->bhij", q, k)', "unread": "torch.einsum(equation, q, k)"}
    assert lowered(source, device="cpu") == {"outer": None, "scores": 'torch.einsum("bhid,bhjd->bhij", q, k)', "unread": None}


def test_unknown_stays_unknown():
    answers = lowered(
        """
        import torch
        def f(x, model, w):
            p = x
            m = model(x)
            d = torch.matmul(x.double(), w.double())
            e = torch.matmul(x, w, out=buf)
            return p
        """
    )
    assert answers == {"p": None, "m": None, "d": None, "e": None}


def test_autocast_switched_off_keeps_what_is_lowered_and_lowers_nothing_new():
    answers = lowered(
        """
        import torch
        def f(x, w):
            h = x @ w
            with torch.autocast("cuda", enabled=False):
                still = h + 1
                again = h @ h.T
                fresh = x @ w
            with torch.autocast("cuda", dtype=torch.bfloat16):
                other = x @ w
            with some_context():
                hidden = x @ w
            return h
        """
    )
    assert answers["still"] == answers["h"] == answers["again"] == "x @ w"  # (a float16 product of float16 `h`)
    # float32 inputs stay float32 with autocast off; a bfloat16 region is not the float16 asked
    # about; a context manager amplint does not know may switch autocast off
    assert answers["fresh"] is None and answers["other"] is None and answers["hidden"] is None


def test_a_function_that_switches_autocast_itself_is_not_guessed_about():
    source = """
        import torch
        @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
        def f(x, w):
            h = x @ w
            return h

        @some_decorator
        def g(x, w):
            h = x @ w
            return h
    """
    assert lowered(source, "f") == {"h": None}
    assert lowered(source, "g") == {"h": None}


def test_outside_autocast_only_the_functions_own_regions_lower():
    source = """
        import torch
        def f(x, w):
            before = x @ w
            with torch.autocast("cuda"):
                inside = x @ w
            return before
    """
    assert lowered(source, ambient=False) == {"before": None, "inside": "x @ w"}
    # in a region of its own dtype: float16 on CUDA by default, not bfloat16
    assert lowered(source, ambient=False, dtype="bfloat16") == {"before": None, "inside": None}
    assert lowered(source) == {"before": "x @ w", "inside": "x @ w"}


def test_the_files_own_functions_and_modules_return_what_they_lower():
    answers = lowered(
        """
        import torch
        from torch import nn

        def scores(q, k):
            return q @ k.transpose(-2, -1)

        def passthrough(x):
            return x

        class Head(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                return self.proj(x)

        def f(q, k, x):
            head = Head(8)
            s = scores(q, k)
            p = passthrough(q)
            h = head(x)
            return s
        """
    )
    assert answers["s"] == "q @ k.transpose(-2, -1)" and answers["p"] is None and answers["h"] == "self.proj(x)"


@pytest.mark.parametrize(
    "call, contexts",
    [
        ('torch.autocast("cuda")', {("cuda", "float16")}),
        ('torch.autocast("cpu")', {("cpu", "bfloat16")}),
        ('torch.autocast("cuda", dtype=torch.bfloat16)', {("cuda", "bfloat16")}),
        ('torch.autocast(device_type=dev, dtype=torch.float16)', {("cuda", "float16"), ("cpu", "float16")}),
        ("torch.autocast(device_type=dev)", set()),  # no dtype known: no context
        ('torch.autocast("cuda", dtype=torch.float16 if half else torch.bfloat16)', {("cuda", "float16"), ("cuda", "bfloat16")}),
    ],
)
def test_the_contexts_a_region_may_run_in(call, contexts):
    found = model(f"import torch\nwith {call}:\n    y = x @ w\n")
    assert region_contexts(found.autocast_regions[0]) == contexts


def test_an_if_on_the_way_gives_each_branchs_value():
    answers = lowered(
        """
        import torch
        def f(q, k, mask, bias, flag):
            scores = q @ k.transpose(-2, -1)
            if mask is not None:
                scores = scores.masked_fill(mask, -1e4)
            elif flag:
                scores = scores * 0.5
            both = scores
            if bias is not None:
                scores = scores + bias
            either = scores
            return both
        """
    )
    assert answers["both"] == "q @ k.transpose(-2, -1)"
    assert answers["either"] is None  # one branch adds a tensor of unknown dtype


def test_a_layer_size_is_a_number():
    answers = lowered(
        """
        import torch
        from torch import nn
        class Attention(nn.Module):
            def __init__(self, dim, heads):
                super().__init__()
                self.scale = dim ** -0.5
                self.qkv = nn.Linear(dim, dim * 3)
                self.temperature = heads ** 0.5

            def forward(self, q, k):
                scaled = q @ k.transpose(-2, -1) * self.scale
                tempered = q @ k.transpose(-2, -1) / self.temperature
                return scaled
        """,
        "Attention.forward",
    )
    # `dim` sizes a Linear; `heads` is used as nothing that shows it is a number
    assert answers == {"scaled": "q @ k.transpose(-2, -1)", "tempered": None}
