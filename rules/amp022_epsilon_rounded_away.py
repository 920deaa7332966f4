from __future__ import annotations

from typing import Iterator

from amplint.analyses.float16_hazards import Float16Hazards
from amplint.analyses.hazard_sites import ROUNDED_EPSILON
from amplint.lint.evidence import AUTOCAST, FLOAT16_HAZARD
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import SemanticModel
from amplint.semantic.pytorch import frameworks


class EpsilonRoundedAway(Rule):
    """An epsilon or clamp bound the autocast dtype rounds away (`s + 1e-8` is `s` in float16), guarding a division, log or square root.

    ## What it does
    Flags the guard of a division, a log (`log`, `log2`, `log10`, `log1p`), a square root,
    `rsqrt`, a reciprocal, a negative or fractional power, an arccosine or arcsine, when the
    guarded tensor is one autocast lowered and the region's dtype rounds the guard away:
    - an epsilon added or clamped on (`x / (s + 1e-8)`, `torch.sqrt(var + 1e-10)`,
      `torch.log(s.clamp(min=1e-8))`, `clamp_min`) that is 0 in float16 (anything up to
      2.98e-8; float16's smallest positive value is 6e-8). In bfloat16 such an epsilon holds;
    - an upper bound just below 1 that is 1.0 in the dtype, guarding `1 - p` in a log or a
      division (`torch.log(1 - p.clamp(max=1 - 1e-4))`), or an arccosine's input
      (`torch.acos(cos.clamp(-1 + 1e-7, 1 - 1e-7))`): anything within 2.4e-4 of 1 in
      float16, within 2e-3 in bfloat16.

    The guarded tensor must be one autocast lowered, by what the code shows: the output of a
    matrix product, a convolution or a Linear (`x @ w`, `F.linear`, `self.proj(x)`), followed
    through ops that run in their input's dtype (`*`, `mean`, `abs`, `sqrt`, views), in an
    enabled region that may run in that dtype or in a function of the file called from inside
    one. Not flagged: a guard the dtype holds (`1e-6`, `1 - 1e-3` in float16), a value made
    float32 first (`.float()`) or by an op on the device's float32 list (`.norm()`, `.pow(2)`,
    `.sum()`, `softmax` on CUDA: their output is float32 and the epsilon with it), an epsilon
    that is a parameter or an attribute amplint cannot read, a log of a sigmoid or softmax
    probability (AMP013's), and a module's `forward` that no region of the file reaches.

    ## Why is this bad?
    Autocast runs matrix products in the low-precision dtype, and the arithmetic after them
    (`+`, `*`, `mean`, `clamp`, `sqrt` on CUDA and CPU alike) runs in their inputs' dtype. An
    epsilon written for float32 is converted to that dtype: `1e-8` is 0 in float16, so `s +
    1e-8` is `s`, and where `s` is 0 (an all-zero row, a padded position, a constant feature)
    the division is 0/0, the log -inf, the square root's gradient infinite, exactly what the
    epsilon was written to prevent. `1 - 1e-4` is 1.0 in both float16 and bfloat16 (their
    spacing just below 1 is 2**-11 and 2**-8), so a clamp meant to keep a cosine or a
    probability below 1 lets it reach 1. That `log`, `rsqrt` and `acos` themselves autocast
    to float32 on CUDA does not help: their input is already rounded.

    ## What goes wrong at runtime
    Measured by `amplint verify` (CPU, 5 steps with a GradScaler): a root-mean-square
    normalisation `h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-8)` of a Linear's
    output, in a batch where a quarter of the positions are padding (all-zero features), made
    the loss NaN at 100% of the steps under float16 and the scaler skipped every update; the
    same normalisation computed from `h.float()` stayed finite. Under bfloat16, where 1e-8
    holds, nothing differs. An angular margin, `torch.acos(cos.clamp(-1 + 1e-7, 1 - 1e-7))`
    of a Linear's cosine similarities, gave non-finite gradients at 100% of the steps under
    bfloat16 (`1 - 1e-7` is 1.0 there and the arccosine's gradient at 1 is infinite), and at
    every step under float16; clamped in float32, none.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        h = self.proj(x)
        h = h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-8)
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        h = self.proj(x).float()
        h = h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-8)
    ```
    Or an epsilon the dtype holds (`1e-6`), where the quotient stays within float16's range.

    ## Fix safety
    No fix. Computing the guarded expression in float32 changes the dtype of what follows;
    a larger epsilon changes the result. Either is the user's decision.
    """

    code = ROUNDED_EPSILON
    name = "epsilon-rounded-away"
    severity = "error"
    # A LightningModule's hooks run under the autocast of a Trainer the file builds with its
    # precision (`Trainer(precision="16-mixed")`: `frameworks.AUTOCAST_HOOK_BUILDERS`).
    triggers = frameworks.REGION_TRIGGERS
    # Every guard it flags is a small constant written with an exponent, or 1 minus one.
    requires = ("e-",)
    file_local = True
    # A region, and an op autocast lowers (a product, a convolution, a Linear) beside a call,
    # a division or an assignment where a float16 hazard may be.
    needs = ({AUTOCAST}, {FLOAT16_HAZARD})

    PREDICTIONS = (
        Prediction(
            "padded-rms-norm",
            "nonfinite_step_share",
            "With a quarter of the positions all-zero padding, `h / torch.sqrt((h * h).mean(-1) + 1e-8)` makes the "
            "loss NaN at every step under float16 (computed from `h.float()`: none).",
            compare="buggy-fixed",
            at_least=1.0,
            dtypes=("float16",),
            quotes=(("buggy", "100%"),),
        ),
        Prediction(
            "padded-rms-norm",
            "epsilon_is_zero",
            "The mechanism: `zeros + 1e-8` is exactly 0 in the buggy script's float16 (1), 1e-8 in the fixed one's float32.",
            compare="buggy-fixed",
            at_least=1,
            at_most=1,
            dtypes=("float16",),
        ),
        Prediction(
            "padded-rms-norm",
            "nonfinite_step_share",
            "Under bfloat16 1e-8 holds: no step has a non-finite loss.",
            compare="buggy-fixed",
            at_least=0,
            at_most=0,
            dtypes=("bfloat16",),
            kind="control",
        ),
        Prediction(
            "angular-margin",
            "nonfinite_grad_step_share",
            "`torch.acos(cos.clamp(-1 + 1e-7, 1 - 1e-7))` of a Linear's cosines gives non-finite gradients at every "
            "step under bfloat16, where `1 - 1e-7` is 1.0 (clamped in float32: none).",
            compare="buggy-fixed",
            at_least=1.0,
            dtypes=("bfloat16",),
            quotes=(("buggy", "100%"),),
        ),
        Prediction(
            "angular-margin",
            "nonfinite_grad_step_share",
            "... and at every step under float16.",
            compare="buggy-fixed",
            at_least=1.0,
            dtypes=("float16",),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for found in model.facts(Float16Hazards).in_file():
            if found.hazard.code == self.code:
                yield Report(found.hazard.node, Message(found.hazard.message, f"{found.hazard.help} {found.where()}"))

    VALID = (
        # Guards float16 holds; bfloat16 holds 1e-8.
        """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    h = x @ w
    a = h / (h.abs().amax(-1, keepdim=True) + 1e-6)
    b = torch.log((h * h).clamp(min=1e-4))
with torch.autocast("cuda", dtype=torch.bfloat16):
    g = x @ w
    c = g / torch.sqrt((g * g).mean(-1, keepdim=True) + 1e-8)
""",
        # Upcast first, or an op CUDA runs in float32 (`norm`, `pow`, `sum`).
        """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    h = (x @ w).float()
    a = h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-8)
    g = x @ w
    b = g / (g.norm(dim=-1, keepdim=True) + 1e-8)
    c = g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + 1e-8)
    d = g / (g.sum(-1, keepdim=True) + 1e-10)
""",
        # A tensor whose dtype the code does not show; an epsilon amplint cannot read.
        """
import torch
def normalise(h, x, w, eps):
    with torch.autocast("cuda"):
        a = h / (h.abs().amax(-1, keepdim=True) + 1e-8)
        g = x @ w
        b = g / (g.abs().amax(-1, keepdim=True) + eps)
    return a, b
""",
        # A sigmoid probability's log is AMP013's, not this rule's.
        """
import torch
with torch.autocast("cuda"):
    p = torch.sigmoid(x @ w)
    loss = -torch.log(p + 1e-8).mean()
""",
        # A clamp bound float16 and bfloat16 keep below 1.
        """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    cos = torch.nn.functional.linear(x, w)
    theta = torch.acos(cos.clamp(-1 + 1e-3, 1 - 1e-3))
""",
    )
    INVALID = (
        Flagged(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    h = x @ w
    h = h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-8)
""",
            at=((5, 57),),
        ),
        # On CPU, `norm` runs in its input's dtype; `1 - 1e-7` is 1.0 in bfloat16 too.
        Flagged(
            """
import torch
import torch.nn.functional as F

def angular(x, w):
    cos = F.linear(x, w)
    return torch.acos(cos.clamp(-1 + 1e-7, 1 - 1e-7))

def loss_fn(h, x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        theta = angular(x, w)
    with torch.autocast("cpu", dtype=torch.float16):
        g = h @ w
        n = g / (g.norm(dim=-1, keepdim=True) + 1e-8)
    return theta, n
""",
            at=((7, 44), (14, 49)),
        ),
    )
