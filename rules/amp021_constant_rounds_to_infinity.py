from __future__ import annotations

from typing import Iterator

from amplint.analyses.float16_hazards import Float16Hazards
from amplint.analyses.hazard_sites import OVERFLOWING_WHERE
from amplint.lint.evidence import AUTOCAST, FLOAT16_HAZARD
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import SemanticModel
from amplint.semantic.pytorch import frameworks


class ConstantRoundsToInfinity(Rule):
    """`torch.where(mask, scores, -1e9)` on scores autocast lowered to float16: the constant silently becomes -inf.

    ## What it does
    Flags a finite constant outside float16's range (from ±65520, where float16 rounds to
    infinity) written into a tensor autocast computed in float16 by an op that rounds it
    rather than checking it: `torch.where(mask, scores, -1e9)` (either branch),
    `scores.where(mask, -1e9)`, and `scores[mask] = -1e9`. The tensor must be one autocast
    lowered, by what the code shows, in an enabled region whose dtype may be float16, or in a
    function of the file called from inside one (as for AMP020, which flags the ops that
    raise instead: `masked_fill`, `fill_`). Not flagged: `float("-inf")`,
    `torch.finfo(scores.dtype).min`, constants within range, bfloat16 regions, tensors whose
    dtype the code does not show, and a module's `forward` that no region of the file reaches.

    ## Why is this bad?
    `-1e9` is how float32 code writes "minus infinity, but finite": a row whose every entry is
    masked then gets a uniform softmax, not NaN. Under float16 autocast the scores are
    float16, `torch.where` and index assignment convert the Python constant to the tensor's
    dtype, and float16 rounds `-1e9` to `-inf` without a word. A row masked entirely (a
    padded query, an empty sequence in the batch) is then `softmax([-inf, ..., -inf])`, NaN,
    and the NaN spreads through the loss to every weight update; `-inf * 0` is NaN as well.
    bfloat16 keeps float32's range.

    ## What goes wrong at runtime
    Measured by `amplint verify` (CPU, an attention layer trained 5 steps with a
    GradScaler, a batch in which two of eight sequences are padding only): with
    `torch.where(mask, scores, -1e9)` the loss was NaN at 100% of the steps under float16 and
    the scaler skipped every update, while `torch.finfo(scores.dtype).min` kept every loss
    finite. With no row masked entirely the two train alike (the masked entries are 0 after
    the softmax either way); under bfloat16 nothing differs.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-2, -1) * scale
        scores = torch.where(key_mask, scores, -1e9)
        attn = scores.softmax(-1)
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        scores = q @ k.transpose(-2, -1) * scale
        scores = torch.where(key_mask, scores, torch.finfo(scores.dtype).min)
        attn = scores.softmax(-1)
    ```

    ## Fix safety
    No fix. Whether a fully masked row should be uniform (`finfo.min`) or excluded later is
    the model's decision.
    """

    code = OVERFLOWING_WHERE
    name = "constant-rounds-to-infinity"
    severity = "error"
    # A LightningModule's hooks run under the autocast of a Trainer the file builds with its
    # precision (`Trainer(precision="16-mixed")`: `frameworks.AUTOCAST_HOOK_BUILDERS`).
    triggers = frameworks.REGION_TRIGGERS
    requires = ("where", "] =", "]=")
    file_local = True
    # A region, and an op autocast lowers (a product, a convolution, a Linear) beside a call,
    # a division or an assignment where a float16 hazard may be.
    needs = ({AUTOCAST}, {FLOAT16_HAZARD})

    PREDICTIONS = (
        Prediction(
            "padded-sequences",
            "nonfinite_step_share",
            "With two of eight sequences padding only, `torch.where(mask, scores, -1e9)` makes the loss NaN at "
            "every step under float16 (the fixed `finfo.min`: none).",
            compare="buggy-fixed",
            at_least=1.0,
            dtypes=("float16",),
            quotes=(("buggy", "100%"),),
        ),
        Prediction(
            "padded-sequences",
            "masked_score_is_infinite",
            "The mechanism: the masked score written by `torch.where` is -inf under float16 (1), finite in the fixed script.",
            compare="buggy-fixed",
            at_least=1,
            at_most=1,
            dtypes=("float16",),
        ),
        Prediction(
            "no-fully-masked-rows",
            "final_loss",
            "With no row masked entirely, the two train alike under float16 (final losses within 1e-3).",
            compare="buggy-fixed",
            at_least=-1e-3,
            at_most=1e-3,
            dtypes=("float16",),
            kind="control",
        ),
        Prediction(
            "padded-sequences",
            "nonfinite_step_share",
            "Under bfloat16, whose range is float32's, `-1e9` is finite: no step has a non-finite loss.",
            compare="buggy-fixed",
            at_least=0,
            at_most=0,
            dtypes=("bfloat16",),
            kind="control",
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        for found in model.facts(Float16Hazards).in_file():
            if found.hazard.code == self.code:
                yield Report(found.hazard.node, Message(found.hazard.message, f"{found.hazard.help} {found.where()}"))

    VALID = (
        # Constants that fit any dtype.
        """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    scores = q @ k.transpose(-2, -1)
    a = torch.where(mask, scores, float("-inf"))
    b = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    c = torch.where(mask, scores, -1e4)
""",
        # bfloat16 has float32's range; an upcast writes into float32.
        """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    scores = torch.bmm(q, k.transpose(1, 2))
    scores = torch.where(mask, scores, -1e9)
with torch.autocast("cuda"):
    s = (q @ k.transpose(-2, -1)).float()
    s[~mask] = -1e9
""",
        # The other branch is a tensor whose dtype the code does not show.
        """
import torch
def attend(q, k, mask, bias):
    with torch.autocast("cuda"):
        scores = q @ k.transpose(-2, -1)
        return torch.where(mask, scores + bias, -1e9)
""",
    )
    INVALID = (
        Flagged(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    scores = q @ k.transpose(-2, -1) * 0.125
    scores = torch.where(key_mask, scores, -1e9)
    attn = scores.softmax(-1)
""",
            at=((5, 14),),
        ),
        Flagged(
            """
import torch
import torch.nn.functional as F

def pool(h, w, mask):
    logits = F.linear(h, w)
    logits[~mask] = -1e9
    return logits.softmax(-1)

with torch.autocast("cpu", dtype=torch.float16):
    weights = pool(h, w, mask)
""",
            at=((7, 5),),
        ),
    )
