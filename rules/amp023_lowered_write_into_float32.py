from __future__ import annotations

from typing import Iterator

from amplint.analyses.float16_hazards import Float16Hazards
from amplint.analyses.hazard_sites import WRITE_INTO_FLOAT32
from amplint.lint.evidence import AUTOCAST, FLOAT16_HAZARD
from amplint.lint.rule import Flagged, Message, Report, Rule
from amplint.semantic import SemanticModel
from amplint.semantic.pytorch import frameworks


class LoweredWriteIntoFloat32(Rule):
    """A value autocast lowered written in place into a float32 tensor (`out.index_add_(0, idx, expert(x))`): PyTorch raises.

    ## What it does
    Flags an in-place write of a tensor autocast computed in float16 or bfloat16 into a tensor
    that is float32 by what the code shows, by an op that requires both to have one dtype:
    `index_add_` (and `index_add`), `scatter_add_`, `scatter_`, `scatter_reduce_`,
    `index_copy_`, `index_put_`, `buf[idx] = value` (an index that is a tensor or a list:
    a mask, `torch.nonzero(...)`; a slice or an integer copies, and casts), `masked_scatter_`, `put_`,
    `index_reduce_` and `lerp_`. The value must be one autocast lowered (the output of a
    matrix product, a convolution or a Linear, `self.expert(x)`, followed through views and
    arithmetic with numbers); the destination must be float32 by what the code shows: built by
    `torch.zeros`, `ones`, `empty`, `rand` or `randn` without a dtype (the default dtype,
    in a file that does not change it), or with `dtype=torch.float32`, or cast with
    `.float()`. The write must run in an enabled autocast region, or in a function of the file
    called from inside one. Not flagged: a destination built in the value's dtype
    (`torch.zeros_like(y)`, `dtype=y.dtype`, `y.new_zeros(...)`), a value cast first
    (`y.to(out.dtype)`), out-of-place `scatter_add` and `index_put` on CUDA (autocast promotes
    them), `copy_`, `add_` and `+=` (they cast), and a module's `forward` that no region of the
    file reaches.

    ## Why is this bad?
    Autocast changes the dtype of what the ops on its lower-precision list return, not of the
    tensors the code builds: `torch.zeros(n, d)` is float32 inside a region too. The
    scatter-and-gather family does not convert its source to the destination's dtype, and
    autocast does not cover in-place ops ("in-place variants and calls that explicitly supply
    an `out=` tensor won't go through autocasting", PyTorch's Autocast Op Reference). A
    mixture-of-experts dispatch or a pooling loop written in float32 raises the first time
    it runs under autocast.

    ## What goes wrong at runtime
    Loud, not silent: PyTorch raises at the first forward pass, for float16 and bfloat16
    alike: `RuntimeError: index_add_(): self (Float) and source (Half) must have the same
    scalar type`, `scatter(): Expected self.dtype to be equal to src.dtype`, `Index put
    requires the source and destination dtypes match, got Float for the destination and Half
    for the source` (`buf[idx] = value`), `expected dtype float for end but got dtype
    c10::Half` (`lerp_`), and the like (checked by hand on torch 2.13.0+cpu, under
    `torch.autocast("cpu", ...)` and on float16 and bfloat16 tensors). Not measured by
    `amplint verify`: there is no silent damage to measure.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = torch.zeros(tokens, dim, device=x.device)
        for e, expert in enumerate(self.experts):
            idx = torch.nonzero(assign == e).squeeze(-1)
            out.index_add_(0, idx, expert(x[idx]))  # expert is an nn.Linear
    ```

    ## Use instead
    ```python
            out.index_add_(0, idx, expert(x[idx]).to(out.dtype))
    ```

    ## Fix safety
    No fix. Casting the value up keeps the accumulation in float32; building the destination
    in the value's dtype accumulates in low precision. Which one the model wants is the
    user's decision.
    """

    code = WRITE_INTO_FLOAT32
    name = "lowered-write-into-float32"
    severity = "warning"
    # A LightningModule's hooks run under the autocast of a Trainer the file builds with its
    # precision (`Trainer(precision="16-mixed")`: `frameworks.AUTOCAST_HOOK_BUILDERS`).
    triggers = frameworks.REGION_TRIGGERS
    requires = ("index_", "scatter", "put_", "lerp_", "] =", "]=")
    file_local = True
    # A region, and an op autocast lowers (a product, a convolution, a Linear) beside a call,
    # a division or an assignment where a float16 hazard may be.
    needs = ({AUTOCAST}, {FLOAT16_HAZARD})

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for found in model.facts(Float16Hazards).in_file():
            if found.hazard.code == self.code:
                yield Report(found.hazard.node, Message(found.hazard.message, f"{found.hazard.help} {found.where()}"))

    VALID = (
        # The value cast to the destination's dtype, or a destination in the value's dtype.
        """
import torch
from torch import nn
expert = nn.Linear(8, 8)
with torch.autocast("cuda", dtype=torch.bfloat16):
    y = expert(x)
    a = torch.zeros(4, 8, device=x.device)
    a.index_add_(0, idx, y.to(a.dtype))
    b = torch.zeros_like(y)
    b.index_add_(0, idx, y)
    c = torch.zeros(4, 8, dtype=y.dtype)
    c[idx] = y
    d = torch.zeros(4, 8)
    d[:2] = y[:2]
    d[0] = y[0]
""",
        # Ops that cast, and CUDA's promoted out-of-place scatter_add.
        """
import torch
with torch.autocast("cuda"):
    y = x @ w
    acc = torch.zeros(4, 8)
    acc.copy_(y)
    acc += y
    s = acc.scatter_add(0, idx, y)
""",
        # A destination whose dtype the code does not show; a file that changes the default dtype.
        """
import torch
def pool(buf, x, w, idx):
    with torch.autocast("cuda"):
        buf.index_add_(0, idx, x @ w)
""",
        """
import torch
torch.set_default_dtype(torch.float16)
with torch.autocast("cuda"):
    out = torch.zeros(4, 8)
    out.index_add_(0, idx, x @ w)
""",
    )
    INVALID = (
        Flagged(
            """
import torch
from torch import nn

class MoE(nn.Module):
    def __init__(self, dim, n):
        super().__init__()
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n))
        self.gate = nn.Linear(dim, n)

    def forward(self, x):
        assign = self.gate(x).argmax(-1)
        out = torch.zeros(x.shape[0], x.shape[1], device=x.device)
        for e in range(len(self.experts)):
            idx = torch.nonzero(assign == e).squeeze(-1)
            out.index_add_(0, idx, self.gate(x[idx]) @ self.w[e])
        return out

def train_step(model, x):
    moe = MoE(8, 4)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return moe(x)
""",
            at=((16, 13),),
        ),
        Flagged(
            """
import torch
with torch.autocast("cpu", dtype=torch.bfloat16):
    y = torch.nn.functional.linear(x, w)
    out = torch.zeros(10, 4)
    out[torch.nonzero(keep).squeeze(-1)] = y
    buf = torch.empty(10, 4).float()
    buf.scatter_add_(0, index, y)
""",
            at=((6, 5), (8, 5)),
        ),
    )
