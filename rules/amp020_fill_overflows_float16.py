from __future__ import annotations

from typing import Iterator

from amplint.analyses.float16_hazards import Float16Hazards
from amplint.analyses.hazard_sites import OVERFLOWING_FILL
from amplint.lint.evidence import AUTOCAST, FLOAT16_HAZARD
from amplint.lint.rule import Flagged, Message, Report, Rule
from amplint.semantic import SemanticModel
from amplint.semantic.pytorch import frameworks


class FillOverflowsFloat16(Rule):
    """`masked_fill(mask, -1e9)` on a tensor autocast lowered to float16: the constant does not fit, and PyTorch raises.

    ## What it does
    Flags a finite constant outside float16's range (past ±65504) written into a tensor that
    autocast computed in float16, by an op that checks its value: `masked_fill` and
    `masked_fill_` (the attention mask's `-1e9`), `fill_`, `index_fill_`, `new_full`,
    `torch.full_like(t, c)`, `torch.full(shape, c, dtype=t.dtype)` and a clamp's bounds
    (`clamp(min=-1e9)`, `clamp_min`, `clamp_max`). The tensor must be one autocast lowered,
    by what the code shows (`amplint.analyses.lowered_values`): the output of a matrix product
    or convolution (`q @ k.transpose(-2, -1)`, `torch.bmm`, `F.linear`, a sub-module built as
    `nn.Linear`), followed through views, arithmetic with numbers and straight-line
    assignments, in an enabled autocast region whose dtype may be float16, or in a function
    of the file called from inside one. Not flagged: `float("-inf")` and
    `torch.finfo(scores.dtype).min` (they fit any dtype), constants within range (`-1e4`,
    `-65504`), bfloat16 regions (bfloat16 has float32's range), tensors whose dtype the code
    does not show (a parameter, the output of a module out of sight), anything after an
    island (`.float()`, a softmax on CUDA), and the convention that an `nn.Module`'s
    `forward` may run under its caller's autocast (no dtype is known there; across files,
    the project pass says which regions call it).

    ## Why is this bad?
    Autocast runs matrix products in float16, so the attention scores they produce are
    float16 tensors, and so is everything computed from them in place. float16's largest
    finite value is 65504: `-1e9` cannot be stored, and the ops that write a scalar check it.
    Code written for float32 (`-1e9` is the usual "minus infinity that is not inf") breaks
    the moment the model runs under autocast; it runs under bfloat16, whose range is
    float32's.

    ## What goes wrong at runtime
    Loud, not silent: PyTorch raises `RuntimeError: value cannot be converted to type
    c10::Half without overflow` at the first forward pass under float16 autocast (checked by
    hand on torch 2.13.0+cpu for `masked_fill`, `masked_fill_`, `fill_`, `index_fill_`,
    `new_full`, `full_like`, `full(..., dtype=torch.float16)`, `clamp(min=-1e9)`, `clamp_min`
    and `clamp_max`, under `torch.autocast("cpu", dtype=torch.float16)` and on float16 tensors;
    the check is the scalar conversion's, the same on every device). Not measured by `amplint
    verify`: there is no silent damage to measure.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        scores = scores.masked_fill(mask == 0, -1e9)  # raises
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        scores = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    ```

    ## Fix safety
    No fix. `torch.finfo(scores.dtype).min` and `float("-inf")` differ where a row is masked
    entirely (a uniform row against NaN after a softmax): which one the model wants is the
    user's decision.
    """

    code = OVERFLOWING_FILL
    name = "fill-overflows-float16"
    severity = "warning"
    # A LightningModule's hooks run under the autocast of a Trainer the file builds with its
    # precision (`Trainer(precision="16-mixed")`: `frameworks.AUTOCAST_HOOK_BUILDERS`).
    triggers = frameworks.REGION_TRIGGERS
    requires = ("fill", "full", "clamp", "clip")
    file_local = True
    # A region, and an op autocast lowers (a product, a convolution, a Linear) beside a call,
    # a division or an assignment where a float16 hazard may be.
    needs = ({AUTOCAST}, {FLOAT16_HAZARD})

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for found in model.facts(Float16Hazards).in_file():
            if found.hazard.code == self.code:
                yield Report(found.hazard.node, Message(found.hazard.message, f"{found.hazard.help} {found.where()}"))

    VALID = (
        # Constants that fit any dtype, and one within float16's range.
        """
import math
import torch
with torch.autocast("cuda", dtype=torch.float16):
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    a = scores.masked_fill(mask == 0, float("-inf"))
    b = scores.masked_fill(mask == 0, torch.finfo(scores.dtype).min)
    c = scores.masked_fill(mask == 0, -1e4)
""",
        # bfloat16 has float32's range.
        """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    scores = torch.bmm(q, k.transpose(1, 2))
    scores = scores.masked_fill(mask, -1e9)
""",
        # Upcast first: the fill writes into a float32 tensor.
        """
import torch
with torch.autocast("cuda"):
    scores = (q @ k.transpose(-2, -1)).float()
    scores = scores.masked_fill(mask, -1e9)
""",
        # A tensor whose dtype the code does not show: a parameter, a model's output.
        """
import torch
def attend(scores, mask, model, x):
    with torch.autocast("cuda"):
        a = scores.masked_fill(mask, -1e9)
        b = model(x).masked_fill(mask, -1e9)
    return a, b
""",
        # Outside any region, and under autocast switched off.
        """
import torch
scores = q @ k.transpose(-2, -1)
scores = scores.masked_fill(mask, -1e9)
with torch.autocast("cuda", enabled=False):
    s = q @ k.transpose(-2, -1)
    s = s.masked_fill(mask, -1e9)
""",
        # A module's forward with no region of the file reaching it: its caller's autocast
        # is the project pass's to find.
        """
import torch
from torch import nn

class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (q @ k.transpose(-2, -1)).masked_fill(mask, -1e9)
        return scores.softmax(-1) @ v
""",
    )
    INVALID = (
        Flagged(
            """
import math
import torch
with torch.autocast("cuda", dtype=torch.float16):
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)
    scores = scores.masked_fill(mask == 0, -1e9)
""",
            at=((6, 14),),
        ),
        # A contrastive loss's self-similarities masked on the diagonal (SimCLR's NT-Xent).
        Flagged(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    z = torch.nn.functional.normalize(model(x), dim=1)
    sim = torch.mm(z, z.t()) / 0.5
    sim.fill_diagonal_(-1e9)
""",
            at=((6, 5),),
        ),
        # A module of the file called inside the region, its scores from an `nn.Linear`.
        Flagged(
            """
import torch
from torch import nn

class Attention(nn.Module):
    def __init__(self, dim, heads=8):
        super().__init__()
        self.scale = (dim // heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1)
        scores *= self.scale
        scores.masked_fill_(~mask, -1e9)
        return scores.softmax(-1) @ v

def train_step(x, mask):
    model = Attention(64)
    with torch.autocast("cuda"):
        return model(x, mask)
""",
            at=((15, 9),),
        ),
        Flagged(
            """
import torch
with torch.autocast("cpu", dtype=torch.float16):
    logits = torch.nn.functional.linear(h, w)
    floor = torch.full_like(logits, -1e30)
    logits = logits.clamp(min=-1e9)
""",
            at=((5, 13), (6, 14)),
        ),
    )
