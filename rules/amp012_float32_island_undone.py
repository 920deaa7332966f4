from __future__ import annotations

from typing import Iterator

from amplint.analyses.region_ops import RegionOp, RegionOps, region_words
from amplint.lint.evidence import AUTOCAST, FLOAT32_CAST, MODULE_ISLAND, PRODUCT
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import SemanticModel, source_text
from amplint.semantic.pytorch import frameworks
from amplint.semantic.pytorch.autocast_ops import LOWER_PRECISION


class Float32IslandUndone(Rule):
    """`.float()` on the inputs of a matrix product or convolution inside autocast: autocast casts them back.

    ## What it does
    Flags a matrix product or convolution (`@`, `torch.matmul`, `mm`, `bmm`, `baddbmm`,
    `addmm`, `addbmm`, `einsum`, `chain_matmul`, `linalg.multi_dot`, `F.linear`, `F.conv*`,
    `scaled_dot_product_attention`; on CUDA also `mv`, `addmv`, `addr`; on CPU also the
    composites `tensordot` and `inner`, which decompose into a cast-down `mm`) inside an
    enabled `torch.autocast` region whose operands are all explicit float32 casts
    (`x.float()`, `x.to(torch.float32)`, `x.to(dtype=torch.float)`, `x.type(torch.float32)`,
    `torch.float32` through an alias, and `x.type_as(t)` or `x.to(t)` when `t` is evidently
    float32: a `.float()` value, a tensor or buffer built with `dtype=torch.float32`), seen
    through views such as `.transpose()` and through variables assigned them on the
    straight-line way there; an operand that is such a float32 tensor itself counts beside
    an explicit cast (`einsum("...i,ij->...j", x.type_as(self.basis), self.basis)`). An
    `einsum` counts by the device (`autocast_ops`, read from torch 2.13.0): CUDA's autocast
    lists `einsum` itself and casts its inputs down whatever the equation, an outer product
    (`"i,j->ij"`, a rotary embedding's frequencies) too; CPU's lists it nowhere, so there only
    an equation that sums over an index two operands share (`"ij,jk->ik"`, run as a `bmm`,
    which CPU casts down) counts, and one that sums over none runs as an elementwise `mul`,
    which keeps float32 inputs in float32. The product may be written in the region or in a
    function of the file called from inside it. A LightningModule's step hooks (`training_step`, ...) are such a region when the
    file builds the Trainer with a known mixed precision (`Trainer(precision="16-mixed")`),
    which runs them under its autocast. So is the `forward` of an `nn.Module` (a class of
    the file deriving from `torch.nn.Module`), with the file's functions it calls, wherever
    the file's own regions do not reach it: it runs under its caller's autocast, and
    mixed-precision training and inference call their model under one (diffusers' rotary
    embeddings were fixed for exactly this). Not there:
    code under autocast switched off in the forward, on it, or around a call of it the
    file makes (also by a wrapper named like autocast given `enabled=False`, as
    transformers' `maybe_autocast`, and by `custom_fwd(cast_inputs=...)`, which runs the
    function with autocast disabled); code inside any other context manager (it may switch
    autocast off), in a function with a decorator other than the plain ones
    (`staticmethod`, `property`, `torch.no_grad`, ...), or in one that asks
    `torch.is_autocast_enabled()`. An op autocast leaves in float32 on the region's device
    (`tensordot` in a CUDA region, which autocast promotes; `addmv` and an outer-product
    `einsum` on CPU, or anywhere the device may be CPU), a `type_as` of a
    tensor whose dtype the code does not show, and a cast inside
    `torch.autocast(..., enabled=False)`, a cast of a product's *output* (`(a @ b).float()`
    before a reduction), a cast of a loss, and products with `.double()` inputs (float64 is
    not eligible for autocast) are not flagged; neither is a single cast beside an uncast
    operand (often a bool mask or integer index made float, not a float32 island).

    ## Why is this bad?
    Autocast decides the dtype of each eligible op by the op, not by its inputs: "CUDA Ops
    that can autocast to float16" (`matmul`, `linear`, `conv*`, `bmm`, `baddbmm`, ...) run
    in the region's low-precision dtype, and their float32 inputs are cast down first (PyTorch
    AMP docs, Autocast Op Reference; the CPU list is the same for these ops). So a "float32
    island" written with `.float()` runs in float16 or bfloat16 anyway: the overflow or the
    precision loss it was written to avoid happens, and the code says it does not. The AMP
    docs' own recipe is to leave autocast locally: `with torch.autocast(device_type,
    enabled=False):` around the island, with its inputs cast to float32.

    ## What goes wrong at runtime
    Measured by `amplint verify` (CPU) on a Gram-matrix loss, `f = features.float(); gram =
    f.transpose(1, 2) @ f`, inside the autocast region: the "float32" Gram matrix came out in
    float16 (bfloat16). With features of magnitude ~12 over 1024 positions its diagonal
    passes float16's 65504: under float16 the loss was inf at every step and the GradScaler
    skipped every update, while the island under `autocast(enabled=False)` stayed finite.
    Where nothing overflows the island only loses precision: its error against float64 was
    at least 100x the float32 island's, under float16 and under bfloat16 alike. How many
    hundreds or thousands of times depends on the CPU's low-precision matrix kernels (how
    they accumulate a sum over 1024 positions), so this page states only the bound every
    run must meet; `amplint verify AMP012` prints this machine's ratios. Under bfloat16 the
    large features did not overflow (bfloat16 keeps float32's range). Written as
    `torch.einsum("bnd,bne->bde", f, f)`, which autocast runs as a `bmm`, the island did the
    same: under float16 the loss was inf at every step, and under bfloat16 its error was
    again at least 100x the float32 island's.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        features = model(x)
        f = features.float()
        gram = f.transpose(1, 2) @ f  # runs in float16
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        features = model(x)
        with torch.autocast("cuda", enabled=False):
            f = features.float()
            gram = f.transpose(1, 2) @ f  # float32
    ```

    ## Fix safety
    No fix. Wrapping the island in `torch.autocast(..., enabled=False)` changes which ops run in
    float32; the extent of the island is the user's decision.
    """

    code = "AMP012"
    name = "float32-island-undone"
    severity = "error"
    # A LightningModule's hooks run under the autocast of a Trainer the file builds with its
    # precision (`Trainer(precision="16-mixed")`: `frameworks.AUTOCAST_HOOK_BUILDERS`), and an
    # nn.Module's `forward` under its caller's; every float32 cast is written with `.float` or
    # `float32` (`x.float()`, `torch.float`, `th.float32`, `from torch import float32`).
    triggers = (*frameworks.REGION_TRIGGERS, "def forward(")
    requires = (".float", "float32")
    # Its regions, and the helpers it follows into them, are the file's own.
    file_local = True
    # A region (or a module's island), a matrix product or convolution, and a float32 cast.
    needs = ({AUTOCAST, MODULE_ISLAND}, {PRODUCT}, {FLOAT32_CAST})

    PREDICTIONS = (
        Prediction(
            "large-activations",
            "nonfinite_steps",
            "Under float16 the Gram matrix of features of magnitude ~12 overflows inside the "
            "`.float()` island: the loss is inf at every step (the fixed island: at none).",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
        Prediction(
            "small-activations",
            "island_low_precision",
            "The `.float()` island's output is float16, not float32 (1 = low precision).",
            compare="buggy-fixed",
            at_least=1,
            at_most=1,
            dtypes=("float16",),
        ),
        Prediction(
            "small-activations",
            "island_error",
            "Where nothing overflows, the island's error against float64 is at least 100x the "
            "float32 island's under float16.",
            compare="buggy/fixed",
            at_least=100,
            dtypes=("float16",),
        ),
        Prediction(
            "small-activations",
            "island_error",
            "... and at least 100x under bfloat16.",
            compare="buggy/fixed",
            at_least=100,
            dtypes=("bfloat16",),
        ),
        Prediction(
            "einsum-large-activations",
            "nonfinite_steps",
            "Written as `torch.einsum`, which autocast runs as a `bmm`, the Gram matrix overflows the same "
            "way under float16: the loss is inf at every step (the fixed island: at none).",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
        Prediction(
            "einsum-large-activations",
            "island_error",
            "Under bfloat16 the einsum island does not overflow, but its error against float64 is at "
            "least 100x the float32 island's.",
            compare="buggy/fixed",
            at_least=100,
            dtypes=("bfloat16",),
        ),
        Prediction(
            "large-activations",
            "nonfinite_steps",
            "Under bfloat16 the same features do not overflow (bfloat16 keeps float32's range): "
            "no step has a non-finite loss.",
            compare="buggy-fixed",
            at_least=0,
            at_most=0,
            dtypes=("bfloat16",),
            kind="control",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        reported = set()
        ops = model.facts(RegionOps)
        for found in ops.ops_in_regions() + ops.ops_under_callers_autocast():
            operands = found.op.operands
            if found.policies() != {LOWER_PRECISION} or len(operands) < 2 or id(found.node) in reported:
                continue
            casts = [ops.float32_cast(operand, found.unit) for operand in operands]
            # Every input float32 by what the code shows (a float32 buffer beside `t.type_as(it)`),
            # at least one by an explicit cast.
            if any(casts) and all(cast is not None or ops.evidently_float32(operand, found.unit) for cast, operand in zip(casts, operands)):
                reported.add(id(found.node))
                yield Report(found.node, Message.split(_message(found, [source_text(c) for c in casts if c is not None])))  # type: ignore[misc]

    VALID = (
        # The island under autocast(enabled=False): the AMP docs' recipe.
        """
import torch
with torch.autocast("cuda"):
    h = model(x)
    with torch.autocast("cuda", enabled=False):
        scores = h.float() @ h.float().transpose(-1, -2)
""",
        # A cast of the product's output, for a reduction or a loss: correct.
        """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    logits = (h @ w).float()
    loss = logits.logsumexp(-1).mean().float()
""",
        # One cast beside an uncast operand: a mask or an index made float, not an island.
        """
import torch
with torch.autocast("cuda"):
    pooled = torch.bmm(mask.float(), hidden)
""",
        # float64 is not eligible for autocast: `.double()` inputs do run in float64.
        """
import torch
with torch.autocast("cuda"):
    g = a.double() @ b.double()
""",
        # Outside any region, and in a region switched off by a literal.
        """
import torch
rotary = inv_freq.float() @ positions.float()
with torch.autocast("cuda", enabled=False):
    s = torch.matmul(q.float(), k.float())
""",
        # A name rebound in a branch before the product: not certainly a cast.
        """
import torch
with torch.autocast("cuda"):
    q = q.float()
    if use_half:
        q = q.half()
    s = q @ k.float().T
""",
        # Ops that promote (CUDA `dot`, `tensordot`) or run in float32 keep the cast.
        """
import torch
with torch.autocast("cuda"):
    d = torch.dot(a.float(), b.float())
    s = torch.softmax(scores.float(), dim=-1)
    t = torch.tensordot(a.float(), b.float(), dims=1)
""",
        # On CPU, `addmv` is on no autocast list: float32 inputs stay float32 (measured).
        """
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    v = torch.addmv(bias, A.float(), x.float())
""",
        # `type_as` a tensor whose dtype the code does not show (a parameter, a module's weight).
        """
import torch
def attend(q, k, ref):
    with torch.autocast("cuda"):
        return q.type_as(ref) @ k.type_as(self.proj.weight).transpose(-1, -2)
""",
        # The einsum island done right: autocast off around it.
        """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    q, k = model(x)
    with torch.autocast("cuda", enabled=False):
        attn = torch.einsum("bhid,bhjd->bhij", q.float(), k.float())
""",
        # A module's island under autocast switched off: in its forward, on the forward as a
        # decorator, or around a call of it the file makes.
        """
import torch
from torch import nn

class Rotary(nn.Module):
    def forward(self, positions):
        with torch.autocast(positions.device.type, enabled=False):
            freqs = self.inv_freq.float() @ positions.float()
        return freqs.cos()

class RotaryDecorated(nn.Module):
    @torch.autocast("cuda", enabled=False)
    def forward(self, positions):
        return (self.inv_freq.float() @ positions.float()).cos()

class RotaryCustomForward(nn.Module):
    @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)
    def forward(self, positions):
        return (self.inv_freq.float() @ positions.float()).cos()

class RotaryContext(nn.Module):
    def forward(self, positions):
        with float32_context():
            return (self.inv_freq.float() @ positions.float()).cos()

class RotaryChecked(nn.Module):
    def forward(self, positions):
        if torch.is_autocast_enabled():
            with torch.autocast("cuda", enabled=False):
                return (self.inv_freq.float() @ positions.float()).cos()
        return (self.inv_freq.float() @ positions.float()).cos()

class Guarded(nn.Module):
    def forward(self, positions):
        return (self.inv_freq.float() @ positions.float()).cos()

class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.rotary = Guarded()

    def forward(self, x, positions):
        with torch.autocast("cuda", enabled=False):
            freqs = self.rotary(positions)
        return x * freqs
""",
        # transformers' rotary embeddings: a wrapper of autocast, by its name, switched off.
        """
import torch
from torch import nn
from ...utils.generic import maybe_autocast

class LlamaRotaryEmbedding(nn.Module):
    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        position_ids_expanded = position_ids[:, None, :].float()
        device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
        with maybe_autocast(device_type=device_type, enabled=False):  # Force float32
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        return freqs.cos(), freqs.sin()
""",
        # Not an nn.Module: nothing calls its `forward` under autocast by convention; and in a
        # module, float64 inputs and a cast of the product's output.
        """
import torch
from torch import nn

class Scorer:
    def forward(self, q, k):
        return q.float() @ k.float()

class Head(nn.Module):
    def forward(self, q, k, h, w):
        exact = q.double() @ k.double()
        logits = (h @ w).float()
        return exact, logits
""",
        # A cast whose dtype is float32 only on one side of a choice, or by a parameter's
        # default (a CPU fallback for half matmuls, a caller's choice): not an island.
        """
import torch
from torch import nn

class Adapter(nn.Module):
    def forward(self, x, r, dtype=torch.float32):
        compute_dtype = torch.float32 if x.device.type == "cpu" else x.dtype
        out = x.to(compute_dtype) @ r.to(compute_dtype).t()
        return out + x.to(dtype) @ r.to(dtype).t()
""",
        # On CPU an outer product written as an einsum runs as an elementwise `mul`, in its
        # float32 inputs' dtype.
        """
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    freqs = torch.einsum("i,j->ij", t.float(), inv_freq.float())
""",
        # A module's forward may run on CPU or CUDA: an outer-product einsum is not flagged
        # there (x-transformers' rotary embedding).
        """
import torch
from torch import nn

class RotaryEmbedding(nn.Module):
    def __init__(self, dim, interpolation_factor=1.0, base=10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq)
        self.interpolation_factor = interpolation_factor

    def forward(self, seq_len):
        t = torch.arange(seq_len, device=self.inv_freq.device).type_as(self.inv_freq)
        t = t / self.interpolation_factor
        freqs = torch.einsum("i , j -> i j", t, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)
""",
    )
    INVALID = (
        Flagged(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    features = model(x)
    f = features.float()
    gram = f.transpose(1, 2) @ f
""",
            at=((6, 12),),
        ),
        Flagged(
            """
import torch
import torch.nn.functional as F
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    attn = torch.einsum("bihd,bjhd->bhij", q.float(), k.float())
    out = F.linear(x.to(torch.float32), self.weight.to(dtype=torch.float32))
""",
            at=((5, 12), (6, 11)),
        ),
        # A helper of the file called inside the region runs under it.
        Flagged(
            """
import torch
def rotary(inv_freq, positions):
    return (inv_freq.float() @ positions.float()).transpose(1, 2)

def forward(x, inv_freq, positions):
    with torch.autocast("cuda"):
        freqs = rotary(inv_freq, positions)
        return model(x, freqs)
""",
            at=((4, 13),),
        ),
        # CUDA's autocast casts an einsum's inputs down whatever its equation: an outer
        # product's too (positions past 2048 collide in float16).
        Flagged(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    freqs = torch.einsum("i,j->ij", t.float(), inv_freq.float())
""",
            at=((4, 13),),
        ),
        # `type_as` a float32 buffer, and a composite that runs on a cast-down `mm` on CPU.
        Flagged(
            """
import torch
F32 = torch.float32

class RotaryScores(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("inv_freq", torch.ones(dim, dtype=torch.float32))

    def forward(self, q, k):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            s = q.type_as(self.inv_freq) @ k.type_as(self.inv_freq).transpose(-1, -2)
            t = torch.tensordot(q.to(F32), k.to(F32), dims=([-1], [-1]))
        return s, t
""",
            at=((12, 17), (13, 17)),
        ),
        # An nn.Module's forward runs under its caller's autocast, which the file need not show:
        # the rotary product of positions collapses in bfloat16 (positions past 256 collide).
        Flagged(
            """
import torch
from torch import nn

class Rotary(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, position_ids):
        inv = self.inv_freq[None, :, None].float()
        pos = position_ids[:, None, :].float()
        freqs = (inv @ pos).transpose(1, 2)
        return freqs.cos(), freqs.sin()
""",
            at=((13, 18),),
        ),
        # ... also in a method or function of the file it calls, and with `type_as` a float32 buffer.
        Flagged(
            """
import torch
import torch.nn.functional as F
from torch import nn

def project(x, basis):
    return torch.einsum("...i,ij->...j", x.type_as(basis), basis)

class Projection(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("basis", torch.ones(dim, dim, dtype=torch.float32))

    def forward(self, x):
        return torch.einsum("...i,ij->...j", x.type_as(self.basis), self.basis)

class Router(nn.Module):
    def forward(self, x):
        return self._scores(x)

    def _scores(self, x):
        return F.linear(x.type(torch.float32), self.weight.type(torch.float32))
""",
            at=((15, 16), (22, 16)),
        ),
    )


def _message(found: RegionOp, casts) -> str:
    region = found.region
    # CUDA lists einsum itself: an outer product's inputs are cast down too.
    what = "every einsum, whatever its equation," if found.op.name in ("einsum_elementwise", "einsum_unread") else "every matrix product and convolution"
    dtype = _dtype_words(region.possible_dtypes)
    device = f'"{region.device}"' if region.device else "device_type"
    where = region_words(region)
    through = ", then ".join(f"`{source_text(v)}`" for v in found.via)
    undone = " and ".join(f"`{c}`" for c in dict.fromkeys(casts))
    if region.caller:
        where = f"`{region.caller}.forward`" + (f" (through {through})" if through else "")
        return (
            f"`{source_text(found.node)}` runs in {dtype}, not float32, whenever `{region.caller}` is "
            f"called under autocast, as mixed-precision training and inference call a model: in "
            f"{where}, autocast casts the inputs of {what} down, "
            f"undoing {undone}. To compute it in float32 whatever the caller does, put it under "
            f"`torch.autocast({device}, enabled=False)`."
        )
    if found.via:
        where += f" (it runs there through {through})"
    return (
        f"`{source_text(found.node)}` runs in {dtype}, not float32: inside {where}, autocast casts the "
        f"inputs of {what} down, undoing {undone}. To compute it in "
        f"float32, put it under `torch.autocast({device}, enabled=False)`."
    )


def _dtype_words(dtypes) -> str:
    low = [d for d in ("float16", "bfloat16") if d in dtypes]
    return " or ".join(low) if low else "the region's low-precision dtype"
