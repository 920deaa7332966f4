"""The semantic layer's expressions under autocast: which ops run in a region, what autocast
does to them, float32 casts, straight-line values and saturating probabilities."""

import textwrap

import libcst as cst
import pytest

from amplint.analyses.probabilities import rounds_to_one, rounds_to_zero
from amplint.analyses.region_ops import RegionOps
from amplint.semantic import analyze, source_text
from amplint.semantic.pytorch.autocast_ops import BANNED, FLOAT32, LOWER_PRECISION, PROMOTE, UNKNOWN, autocast_policy, einsum_contracts


def model(source):
    return analyze(cst.parse_module(textwrap.dedent(source)))


def ops(source):
    found = model(source)
    return [(op.op.name, source_text(op.node)) for op in found.facts(RegionOps).ops_in_regions()]


def first_op(source, name):
    found = model(source)
    for op in found.facts(RegionOps).ops_in_regions():
        if op.op.name == name:
            return found, op
    raise AssertionError(f"no {name} in a region")


# --- the op lists ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "op, device, policy",
    [
        ("matmul", "cuda", LOWER_PRECISION),
        ("matmul", "cpu", LOWER_PRECISION),
        ("conv_transpose2d", "cpu", LOWER_PRECISION),  # measured on torch 2.13's CPU
        ("mv", "cuda", LOWER_PRECISION),
        ("mv", "cpu", None),  # not on CPU's list: float32 inputs stay float32
        ("log", "cuda", FLOAT32),
        ("log", "cpu", None),  # CPU leaves log and softmax in their input's dtype
        ("softmax", "cuda", FLOAT32),
        ("softmax", "cpu", None),
        ("sigmoid", "cuda", None),
        ("sigmoid", "cpu", None),
        ("binary_cross_entropy", "cuda", BANNED),
        ("binary_cross_entropy", "cpu", FLOAT32),
        ("matmul", "mps", None),  # lists amplint does not know: no claim
        ("tensordot", "cpu", LOWER_PRECISION),  # a composite: its mm is cast down (measured)
        ("inner", "cpu", LOWER_PRECISION),
        ("tensordot", "cuda", PROMOTE),  # on CUDA's promote list: float32 inputs stay float32
        ("einsum", "cpu", LOWER_PRECISION),
        ("addmv", "cpu", None),
    ],
)
def test_autocast_policy(op, device, policy):
    assert autocast_policy(op, device) == policy


def test_rounding_of_guards_in_low_precision():
    assert rounds_to_zero(1e-8, "float16") and rounds_to_zero(2.9e-8, "float16")
    assert not rounds_to_zero(3e-8, "float16") and not rounds_to_zero(1e-8, "bfloat16")
    assert rounds_to_one(1 - 1e-7, "float16") and rounds_to_one(1 - 1e-4, "float16")
    assert not rounds_to_one(1 - 1e-3, "float16")
    assert rounds_to_one(1 - 1e-3, "bfloat16") and not rounds_to_one(1 - 1e-2, "bfloat16")


# --- which ops run in a region ------------------------------------------------------------------


def test_ops_written_in_an_enabled_region_by_every_spelling():
    found = ops(
        """
        import torch
        import torch.nn.functional as F
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                self.fc = nn.Linear(4, 4)
                self.loss = nn.BCELoss()

            def forward(self, a, b):
                with torch.autocast("cuda"):
                    w = a @ b
                    x = torch.matmul(a, b)
                    y = a.mm(b)
                    z = F.linear(a, b)
                    h = self.fc(a)
                    p = a.sigmoid().log()
                    q = self.loss(p, b)
                    self.log("loss", q)
                return w
        """
    )
    assert [name for name, _ in found] == ["matmul", "mm", "linear", "linear", "sigmoid", "log", "binary_cross_entropy", "matmul"]


@pytest.mark.parametrize(
    "equation, contracts",
    [
        # A product autocast lowers: einsum runs a `bmm` over an index two operands share.
        ("ij,jk->ik", True),
        ("bhid,bhjd->bhij", True),
        ("bnd,bne->bde", True),
        ("n d, d -> n", True),
        ("ij,ij->", True),
        ("ij,ij", True),  # implicit output: every index summed
        ("...ij,...jk", True),
        ("...d,...d->", True),  # broadcast dimensions summed away
        # No index summed across operands: a `mul`, in its inputs' dtype (measured under autocast).
        ("i,j->ij", False),
        ("i , j -> i j", False),
        ("...i,j->...ij", False),
        ("bhd,bhd->bhd", False),
        ("i,j", False),
        # One operand: no product at all.
        ("ii->i", False),
        ("ij->", False),
    ],
)
def test_einsum_is_a_product_only_when_it_contracts(equation, contracts):
    assert einsum_contracts(equation) is contracts


def test_an_einsum_is_named_by_what_its_equation_does_and_cuda_lowers_every_one():
    found = ops(
        """
        import torch

        EQUATION = "bid,bjd->bij"
        OUTER = "i,j->ij"

        def f(a, b, equation):
            with torch.autocast("cuda"):
                torch.einsum("ij,jk->ik", a, b)
                torch.einsum(EQUATION, a, b)
                torch.einsum("bid," "bjd->bij", a, b)
                torch.einsum(f"bid,bjd->bij", a, b)
                torch.einsum("i,j->ij", a, b)
                torch.einsum(OUTER, a, b)
                torch.einsum(equation, a, b)
                torch.einsum(b"bid,bjd->bij", a, b)
        """
    )
    names = [name for name, _ in found]
    assert names == ["einsum"] * 4 + ["einsum_elementwise"] * 2 + ["einsum_unread"] * 2
    # CUDA lists einsum itself: its inputs are cast down whatever the equation. CPU runs a
    # contracting one as a `bmm` (cast down), any other as a `mul`, in its inputs' dtype.
    assert {autocast_policy(name, "cuda") for name in names} == {LOWER_PRECISION}
    assert [autocast_policy(name, "cpu") for name in dict.fromkeys(names)] == [LOWER_PRECISION, None, UNKNOWN]


def test_disabled_regions_lambdas_and_nested_functions_are_not_in_the_region():
    found = ops(
        """
        import torch
        with torch.autocast("cuda"):
            with torch.autocast("cuda", enabled=False):
                a = x @ y
            f = lambda: torch.matmul(x, y)
            def later():
                return torch.log(x)
        with torch.autocast("cuda", dtype=torch.float32):
            b = x @ y
        c = x @ y
        """
    )
    assert found == []


def test_helpers_called_in_a_region_run_under_it_unless_they_switch_it_off():
    found = model(
        """
        import torch
        def scores(q, k):
            return q @ k.transpose(-1, -2)

        def island(q, k):
            with torch.autocast("cuda", enabled=False):
                return q.float() @ k.float()

        def attend(q, k):
            return scores(q, k).softmax(-1)

        def step(q, k):
            with torch.autocast("cuda"):
                a = attend(q, k)
                b = island(q, k)
            return a, b
        """
    )
    found_ops = {(op.op.name, source_text(op.node)): [source_text(v) for v in op.via] for op in found.facts(RegionOps).ops_in_regions()}
    assert found_ops == {
        ("matmul", "q @ k.transpose(-1, -2)"): ["attend(q, k)", "scores(q, k)"],
        ("softmax", "scores(q, k).softmax(-1)"): ["attend(q, k)"],
    }


def test_recursive_helpers_terminate():
    found = ops(
        """
        import torch
        def walk(x, n):
            return walk(x @ x, n - 1) if n else x

        with torch.autocast("cuda"):
            y = walk(x, 3)
        """
    )
    assert found == [("matmul", "x @ x")]


# --- float32 casts --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "operand, cast",
    [
        ("q.float()", "q.float()"),
        ("q.float().transpose(-1, -2)", "q.float()"),
        ("q.to(torch.float32).T", "q.to(torch.float32)"),
        ("q.to(device, dtype=torch.float)", "q.to(device, dtype=torch.float)"),
        ("q.type(torch.cuda.FloatTensor)", "q.type(torch.cuda.FloatTensor)"),
        ("q.type(torch.cuda.HalfTensor)", None),
        ("q.float() * k.half()", "q.float()"),  # float32 with float16 is float32
        ("q.float() * k.to(torch.float64)", None),
        ("q.float()[:, 0] * scale", "q.float()"),
        ("q.float().to(device)", "q.float()"),
        ("q.float().to('cuda', non_blocking=True)", "q.float()"),
        ("q.float().to(other.dtype)", None),  # a dtype amplint cannot read
        ("q.to(torch.float16)", None),
        ("q.double()", None),
        ("q.float() * k.double()", None),
        ("q.half().float().half()", None),
        ("q", None),
        ("q.type(torch.float32)", "q.type(torch.float32)"),
        ("q.to(dtype=torch.float32)", "q.to(dtype=torch.float32)"),
        ("q.type_as(k.float())", "q.type_as(k.float())"),  # the dtype of an evident float32 tensor
        ("q.to(k.float())", "q.to(k.float())"),
        ("q.type_as(k)", None),  # k's dtype is unknown
        ("q.to(k)", None),
        ("q.type_as(k.half())", None),
        ("q.type_as(torch.zeros(3, dtype=torch.float32))", "q.type_as(torch.zeros(3, dtype=torch.float32))"),
        ("q.type_as(torch.zeros(3))", None),  # the default dtype: not evident in the code
    ],
)
def test_float32_cast(operand, cast):
    found, op = first_op(
        f"""
        import torch
        with torch.autocast("cuda"):
            s = torch.matmul({operand}, k)
        """,
        "matmul",
    )
    got = found.facts(RegionOps).float32_cast(op.op.inputs[0], op.unit)
    assert (source_text(got) if got is not None else None) == cast


@pytest.mark.parametrize(
    "operand, cast",
    [
        ("q.type_as(self.scale)", True),  # a buffer built float32
        ("q.type_as(self.table)", True),  # an attribute only ever assigned a float32 tensor
        ("q.to(self.table)", True),
        ("q.type_as(self.half_scale)", False),
        ("q.type_as(self.plain)", False),  # built without a dtype
        ("q.type_as(self.weight)", False),  # unknown
        ("q.to(F32)", True),  # torch.float32 through an alias
        ("q.to(torch.float)", True),
    ],
)
def test_casts_to_a_tensors_dtype_and_through_aliases(operand, cast):
    found, op = first_op(
        f"""
        import torch
        F32 = torch.float32
        class Head(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("scale", torch.ones(4, dtype=torch.float32))
                self.register_buffer("half_scale", torch.ones(4, dtype=torch.float16))
                self.register_buffer("plain", torch.ones(4))
                self.table = torch.zeros(4, dtype=F32)

            def forward(self, q, k):
                with torch.autocast("cuda"):
                    return torch.matmul({operand}, k)
        """,
        "matmul",
    )
    got = found.facts(RegionOps).float32_cast(op.op.inputs[0], op.unit)
    assert (got is not None) == cast


@pytest.mark.parametrize(
    "before, cast",
    [
        ("q = x.float()", "x.float()"),
        ("q = x.float()\nk = 1", "x.float()"),
        ("q = x.float()\nif flag:\n    q = q.half()", None),  # rebound in a branch
        ("if flag:\n    q = x.float()", None),  # bound in a branch only
        ("q = x.float()\nq += 1", None),
        ("q = x.float()\nq, r = q.chunk(2)", None),
        ("", None),  # a parameter
    ],
)
def test_straight_line_values(before, cast):
    body = textwrap.indent(before, " " * 16)
    found, op = first_op(
        f"""
        import torch
        def f(q, k, x, flag):
            with torch.autocast("cuda"):
{body}
                s = q @ k
        """,
        "matmul",
    )
    got = found.facts(RegionOps).float32_cast(op.op.inputs[0], op.unit)
    assert (source_text(got) if got is not None else None) == cast


def test_a_value_assigned_before_the_region_reaches_into_it_but_not_around_a_loop():
    source = """
    import torch
    def f(x, k):
        q = x.float()
        with torch.autocast("cuda"):
            s = q @ k
        for _ in range(3):
            with torch.autocast("cuda"):
                t = q @ k
            q = x.half()
    """
    found = model(source)
    products = found.facts(RegionOps).ops_in_regions()
    assert [found.facts(RegionOps).float32_cast(op.op.inputs[0], op.unit) is not None for op in products] == [True, False]


# --- saturating probabilities ---------------------------------------------------------------------


def probability(expression, region='torch.autocast("cuda")', before=""):
    found, op = first_op(
        f"""
        import torch
        import torch.nn.functional as F
        EPS = 1e-8
        with {region}:
            {before}
            loss = {expression}
        """,
        "log" if "log1p" not in expression else "log1p",
    )
    return found.facts(RegionOps).probability(op.op.inputs[0], op.unit, op.op.name)


@pytest.mark.parametrize(
    "expression, before, kind, float16, bfloat16",
    [
        ("torch.log(torch.sigmoid(z))", "", "sigmoid", True, False),
        ("torch.log(p)", "p = z.sigmoid()", "sigmoid", True, False),
        ("torch.log(1 - p)", "p = F.sigmoid(z)", "complement", True, True),
        ("torch.log1p(-p)", "p = torch.sigmoid(z)", "complement", True, True),
        ("(1.0 - p).log()", "p = torch.sigmoid(z)", "complement", True, True),
        ("torch.log(torch.softmax(z, -1))", "", "softmax", True, False),
        ("torch.log(torch.sigmoid(z) + 1e-8)", "", "sigmoid", True, False),
        ("torch.log(torch.sigmoid(z) + EPS)", "", "sigmoid", True, False),
        ("torch.log(torch.sigmoid(z) + 1e-6)", "", "sigmoid", False, False),
        ("torch.log(torch.sigmoid(z) + self.eps)", "", "sigmoid", False, False),
        ("torch.log(p.clamp(min=1e-8))", "p = torch.sigmoid(z)", "sigmoid", True, False),
        ("torch.log(torch.clamp(p, 1e-4, 1))", "p = torch.sigmoid(z)", "sigmoid", False, False),
        ("torch.log(1 - p)", "p = torch.sigmoid(z).clamp(1e-7, 1 - 1e-7)", "complement", True, True),
        ("torch.log(1 - p)", "p = torch.sigmoid(z).clamp(1e-3, 1 - 1e-3)", "complement", False, True),
        ("torch.log(1 - p)", "p = torch.sigmoid(z).clamp(max=1 - 1e-2)", "complement", False, False),
        ("torch.log(1 - p + 1e-8)", "p = torch.sigmoid(z)", "complement", True, False),
    ],
)
def test_probabilities_and_their_guards(expression, before, kind, float16, bfloat16):
    found = probability(expression, before=before)
    assert found is not None and found.kind == kind
    assert found.reaches_zero("float16") is float16
    assert found.reaches_zero("bfloat16") is bfloat16


@pytest.mark.parametrize(
    "expression, before",
    [
        ("torch.log(1.0 - alphas)", ""),  # not a sigmoid
        ("torch.log(torch.sigmoid(z.float()))", ""),  # computed in float32
        ("torch.log(1 - p)", "p = torch.sigmoid(z.float())"),
        ("torch.log(torch.softmax(z, -1, dtype=torch.float32))", ""),
        ("torch.log(F.softmax(z, dim=-1, dtype=torch.float32))", ""),
        ("torch.log(p)", "p = model(x)"),
        ("torch.log1p(p)", "p = torch.sigmoid(z)"),  # log(1 + p): never 0
    ],
)
def test_not_saturating_probabilities(expression, before):
    assert probability(expression, before=before) is None


def test_the_forward_of_a_module_class_of_the_file_runs_under_the_region_that_calls_it():
    found = model(
        """
        import torch
        from torch import nn

        class Attention(nn.Module):
            def forward(self, q, k):
                return q.float() @ k.float().transpose(-1, -2)

        class Block(Attention):
            pass

        class Net(nn.Module):
            def __init__(self):
                self.block = Block()
                self.head = nn.Linear(4, 4) if cfg else Block()

            def forward(self, x):
                with torch.autocast("cuda"):
                    h = self.block(x, x)
                    return self.head(h)
        """
    )
    found_ops = [(op.op.name, source_text(op.node), [source_text(v) for v in op.via]) for op in found.facts(RegionOps).ops_in_regions()]
    # `self.head` may be a Linear or a Block: neither is assumed.
    assert found_ops == [("matmul", "q.float() @ k.float().transpose(-1, -2)", ["self.block(x, x)"])]


@pytest.mark.parametrize(
    "region, flagged",
    [
        ('torch.autocast("cuda", dtype=torch.float16)', False),  # CUDA autocast runs `sum` in float32
        ('torch.autocast(device_type=device, dtype=torch.float16)', False),  # it may be CUDA: not guessed
        ('torch.autocast("cpu", dtype=torch.float16)', True),  # CPU runs `sum` in float16
    ],
)
def test_logits_autocast_makes_float32_are_not_low_precision(region, flagged):
    found, op = first_op(
        f"""
        import torch
        with {region}:
            pos = (user * item).sum(dim=-1)
            neg = torch.sum(user * other, dim=-1)
            loss = -torch.log(torch.sigmoid(pos - neg)).mean()
        """,
        "log",
    )
    probability = found.facts(RegionOps).probability(op.op.inputs[0], op.unit)
    assert probability is not None and probability.float32_on == {"cuda"}
    from amplint.analyses.region_ops import region_devices

    assert (not (region_devices(op.region) & probability.float32_on)) is flagged


@pytest.mark.parametrize(
    "expression, before, kind",
    [
        ("torch.log(p[:, 0])", "p = torch.sigmoid(z)", "sigmoid"),
        ("torch.log(p.gather(1, t[:, None]))", "p = torch.softmax(z, dim=-1)", "softmax"),
        ("torch.log(1 - p.view(-1))", "p = torch.sigmoid(z)", "complement"),
    ],
)
def test_selections_of_a_probability_are_probabilities(expression, before, kind):
    found = probability(expression, before=before)
    assert found is not None and found.kind == kind


def test_a_helper_under_two_regions_runs_in_both_and_module_functions_are_no_tensor_methods():
    found = model(
        """
        import torch

        def loss_fn(z):
            return -torch.log(torch.sigmoid(z)).mean()

        def train(model, x):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                a = loss_fn(model(x))
            with torch.autocast("cuda", dtype=torch.float16):
                b = loss_fn(model(x))
                c = F.softmax(x, -1)  # F's import is out of sight: still not `x.softmax()`
            return a + b
        """
    )
    logs = [op.region.dtype for op in found.facts(RegionOps).ops_in_regions() if op.op.name == "log"]
    assert logs == ["bfloat16", "float16"]
    assert not [op for op in found.facts(RegionOps).ops_in_regions() if op.op.name == "softmax"]
