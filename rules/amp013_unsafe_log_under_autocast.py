from __future__ import annotations

from typing import Iterator, List

import libcst as cst

from amplint.analyses.probabilities import Probability
from amplint.analyses.region_ops import RegionOp, RegionOps, region_devices, region_words
from amplint.lint.evidence import AUTOCAST, BCE, LOG, PROBABILITY
from amplint.lint.rule import Flagged, Message, Prediction, Report, Rule
from amplint.semantic import SemanticModel, source_text
from amplint.semantic.pytorch import frameworks
from amplint.semantic.pytorch.autocast_ops import BANNED, LOG_OPS, autocast_policy

_LOW = ("float16", "bfloat16")


class UnsafeLogUnderAutocast(Rule):
    """A log of a sigmoid, `1 - sigmoid` or softmax computed in low precision, or `binary_cross_entropy`, under autocast.

    ## What it does
    Flags these, inside an enabled `torch.autocast` region (or in a function of the file
    called from inside one; a LightningModule's step hooks count as one when the file builds
    the Trainer with a known mixed precision, `Trainer(precision="16-mixed")`, which runs
    them under its autocast):
    - `torch.log(p)` / `p.log()` of `p = sigmoid(x)` in a float16 region;
    - `log(1 - p)` (and `log1p(-p)`) of a sigmoid in a float16 or bfloat16 region;
    - `log(softmax(x))` in a float16 region on CPU;
    - `F.binary_cross_entropy` / `nn.BCELoss` in a region that may run on CUDA; also in loss
      code of another file that such a region reaches (a `criterion = BCEGanLoss()` called in
      the training script's region: the project's ambient pass reports it there, with the way in).

    An epsilon guard (`log(p + eps)`, `p.clamp(min=eps)`, `sigmoid(x).clamp(eps, 1 - eps)`)
    silences it unless the region's dtype rounds the guard away (`1e-8` is 0 in float16,
    `1 - 1e-7` is 1.0 in float16 and bfloat16). The logits are taken to be in the region's
    dtype (a Linear's or a model's output), except where the code shows them float32: an
    explicit cast, or an op autocast runs in float32 on the region's device (a BPR score
    `(u * v).sum(-1)` on CUDA). `F.logsigmoid`, `F.log_softmax`,
    `binary_cross_entropy_with_logits` and `BCEWithLogitsLoss` are the fix, never flagged.

    ## Why is this bad?
    Autocast runs `sigmoid`, `1 - p` and `+` in their input's dtype (they are on no autocast
    list), so downstream of a Linear layer they run in float16 or bfloat16. A float16 sigmoid
    is exactly 0 for x < -17.3; `1 - sigmoid(x)` is exactly 0 for x > 8.3 in float16 and for
    x > 6.2 in bfloat16 (it has fewer mantissa bits). That `log` itself autocasts to float32
    on CUDA does not help: its input is already 0, and `log(0)` is -inf (`0 * log(0)` is NaN).
    bfloat16 keeps float32's range, so its sigmoid does not underflow at these logits. On
    CUDA, `softmax` autocasts to float32, so `log(softmax(x))` is no worse there than in
    float32; on CPU autocast leaves `softmax` alone. `binary_cross_entropy` and `BCELoss`
    raise on CUDA inside autocast ("unsafe to autocast", PyTorch AMP docs: "Prefer
    binary_cross_entropy_with_logits over binary_cross_entropy").

    ## What goes wrong at runtime
    Measured by `amplint verify` (CPU, a Linear classifier with a GradScaler, 5 steps; each
    step also computes the same loss on the same logits in float32, and a non-finite loss
    counts against the low precision only where that one is finite): the hand-written binary
    cross-entropy `-(y*log(p) + (1-y)*log(1-p))` on logits of spread ~4 was NaN at every step
    in float16 and in bfloat16 while float32 stayed finite, and the scaler skipped every
    update. (On logits of spread ~12 it is NaN in float32 too: `1 - sigmoid(z)` is 0 in
    float32 from z = 16.6.) `+ 1e-8` inside the logs did not help in float16. With logits of
    spread ~2, the largest 7, it matched `binary_cross_entropy_with_logits` to 4e-6 in float16
    but was NaN at every step in bfloat16. `-log(sigmoid(z))` was inf at every step in float16; in bfloat16
    its loss was as close to the float32 stable form as `-logsigmoid(z)` in bfloat16 (both
    5.2e-4 off). `nll_loss(log(softmax(z)))` was inf at every step in
    float16 on the CPU; CUDA autocast runs softmax in float32, where it is finite. The
    `binary_cross_entropy` failure is loud, not silent: CUDA autocast refuses it ("unsafe to
    autocast") at the first forward pass; on CPU, where autocast runs it in float32, its loss
    was within 1e-3 of the stable form's. The two CUDA behaviours are claims of their own,
    checked by `amplint verify --device cuda`.

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
        p = torch.sigmoid(logits)
        loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
        loss = F.binary_cross_entropy_with_logits(logits, y)
    ```
    `F.logsigmoid(x)` for `log(sigmoid(x))`, `F.logsigmoid(-x)` for `log(1 - sigmoid(x))`,
    `F.log_softmax(x, dim)` for `log(softmax(x, dim))`.

    ## Fix safety
    No fix. The stable form (`logsigmoid`, `log_softmax`, `binary_cross_entropy_with_logits`)
    takes logits, not probabilities, so the code that computes the probabilities changes too.
    """

    code = "AMP013"
    name = "unsafe-log-under-autocast"
    severity = "error"
    # A LightningModule's hooks run under the autocast of a Trainer the file builds with its
    # precision (`Trainer(precision="16-mixed")`: `frameworks.AUTOCAST_HOOK_BUILDERS`).
    triggers = frameworks.REGION_TRIGGERS
    # A region, and `binary_cross_entropy` or a log with a sigmoid or softmax.
    needs = ({AUTOCAST}, {LOG, BCE}, {PROBABILITY, BCE})

    PREDICTIONS = (
        Prediction(
            "hand-bce-confident",
            "precision_nonfinite",
            "The hand-written binary cross-entropy on logits of spread ~4 is NaN at every step in float16, "
            "where the same loss on the same logits in float32 is finite (the with-logits form: NaN at none).",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
        Prediction(
            "hand-bce-confident",
            "precision_nonfinite",
            "... and at every step in bfloat16.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("bfloat16",),
        ),
        Prediction(
            "hand-bce-epsilon-confident",
            "precision_nonfinite",
            "`+ 1e-8` inside the logs does not help in float16 (1e-8 is 0 there): NaN at every step.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
        Prediction(
            "hand-bce-moderate",
            "first_loss_error",
            "On logits of spread ~2 it does not bite in float16: the loss is within 1e-4 of the "
            "with-logits form's.",
            compare="buggy",
            at_most=1e-4,
            dtypes=("float16",),
            kind="control",
            quotes=(("buggy", "4e-6"),),
        ),
        Prediction(
            "hand-bce-moderate",
            "precision_nonfinite",
            "In bfloat16 it does (`1 - p` is 0 from logit 6.2 on, and the largest is 7): NaN at every step.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("bfloat16",),
        ),
        Prediction(
            "log-sigmoid-confident",
            "precision_nonfinite",
            "`-log(sigmoid(z))` on logits of spread ~12 is inf at every step in float16.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
        ),
        Prediction(
            "log-sigmoid-confident",
            "first_loss_error",
            "In bfloat16 (float32's range) its loss is as close to the float32 stable form as "
            "`-logsigmoid(z)` in bfloat16 is (within 1e-4 of its error): not flagged there.",
            compare="buggy-fixed",
            at_least=-1e-4,
            at_most=1e-4,
            dtypes=("bfloat16",),
            kind="control",
            quotes=(("buggy", "5.2e-4"), ("fixed", "5.2e-4")),
        ),
        Prediction(
            "log-softmax-confident",
            "precision_nonfinite",
            "`nll_loss(log(softmax(z)))` is inf at every step in float16 on CPU, where autocast "
            "leaves softmax in float16.",
            compare="buggy-fixed",
            at_least=1,
            dtypes=("float16",),
            devices=("cpu",),
        ),
        Prediction(
            "bce-probabilities-confident",
            "first_loss_error",
            "On CPU autocast runs `binary_cross_entropy` in float32 and it works (within 1e-3 of "
            "the with-logits form); the rule flags it for CUDA, where it raises.",
            compare="buggy",
            at_most=1e-3,
            dtypes=("float16",),
            kind="control",
            devices=("cpu",),
        ),
        Prediction(
            "log-softmax-confident",
            "nonfinite_losses",
            "On CUDA autocast runs softmax in float32, so the same `nll_loss(log(softmax(z)))` is finite "
            "at every step there: a CPU failure, not a CUDA one.",
            compare="buggy-fixed",
            at_least=0,
            at_most=0,
            dtypes=("float16",),
            kind="control",
            devices=("cuda",),
        ),
        Prediction(
            "bce-probabilities-confident",
            "raised",
            "On CUDA autocast refuses `binary_cross_entropy`: it raises (\"unsafe to autocast\") at the "
            "first forward pass, loud, not silent.",
            compare="buggy-fixed",
            at_least=1,
            devices=("cuda",),
        ),
    )

    def check(self, model: SemanticModel) -> Iterator[Report]:
        reported = set()  # a helper called under two regions is reported once
        for found in model.facts(RegionOps).ops_in_regions():
            if id(found.node) in reported:
                continue
            if found.op.name in LOG_OPS and found.op.inputs:
                probability = model.facts(RegionOps).probability(found.op.inputs[0], found.unit, found.op.name)
                dtypes = []
                # The sigmoid or softmax must run under autocast too: before the region, the
                # dtype of its input is anyone's guess.
                if probability is not None and model.facts(RegionOps).runs_in_region(probability.source):
                    dtypes = _dtypes_reaching_zero(probability, found)
                if dtypes:
                    reported.add(id(found.node))
                    yield Report(found.node, Message.split(_log_message(found, probability, dtypes)))  # type: ignore[arg-type]
            elif found.op.name == "binary_cross_entropy" and BANNED in found.policies():
                reported.add(id(found.node))
                yield Report(found.node, Message.split(_bce_message(found)))

    VALID = (
        # The stable forms.
        """
import torch
import torch.nn.functional as F
with torch.autocast("cuda", dtype=torch.float16):
    logits = model(x)
    a = F.binary_cross_entropy_with_logits(logits, y)
    b = -F.logsigmoid(logits).mean()
    c = F.nll_loss(F.log_softmax(logits, dim=-1), t)
    d = torch.nn.BCEWithLogitsLoss()(logits, y)
""",
        # bfloat16 keeps float32's range: its sigmoid does not underflow at ordinary logits.
        """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    loss = -torch.log(torch.sigmoid(model(x))).mean()
""",
        # A guard float16 can hold.
        """
import torch
with torch.autocast("cuda"):
    p = torch.sigmoid(model(x))
    loss = -(y * torch.log(p.clamp(min=1e-4)) + (1 - y) * torch.log((1 - p).clamp(min=1e-4))).mean()
""",
        # On CUDA softmax autocasts to float32: log(softmax) is no worse than in float32.
        """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    loss = -torch.log(torch.softmax(model(x), dim=-1)).gather(1, t[:, None]).mean()
""",
        # The sigmoid of an explicit float32 cast runs in float32.
        """
import torch
with torch.autocast("cuda"):
    p = torch.sigmoid(model(x).float())
    loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
""",
        # Not a probability from a sigmoid; a disabled region; an unknown dtype.
        """
import torch
with torch.autocast("cuda"):
    log_one_minus_alphas = torch.log(1.0 - alphas_cumprod)
    self.log("train_loss", loss)
with torch.autocast("cuda", enabled=False):
    loss = -torch.log(torch.sigmoid(logits.float()))
with torch.autocast("cuda", dtype=amp_dtype):
    loss = -torch.log(torch.sigmoid(logits))
""",
        # The sigmoid runs before the region, on logits of unknown dtype.
        """
import torch
p = torch.sigmoid(logits)
with torch.autocast("cuda"):
    loss = -(y * torch.log(p)).mean()
""",
        # BPR: `sum` autocasts to float32 on CUDA, so the sigmoid of the score runs in float32.
        """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    u, i, j = user(b), item(p), item(n)
    score = (u * i).sum(dim=1) - (u * j).sum(dim=1)
    loss = -torch.log(torch.sigmoid(score)).mean()
""",
        # binary_cross_entropy runs (in float32) under CPU autocast; it only raises on CUDA.
        """
import torch
import torch.nn.functional as F
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = F.binary_cross_entropy(torch.sigmoid(model(x)), y)
""",
    )
    INVALID = (
        Flagged(
            """
import torch
with torch.autocast("cuda", dtype=torch.float16):
    logits = model(x)
    p = torch.sigmoid(logits)
    loss = -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()
""",
            at=((6, 18), (6, 43)),
        ),
        Flagged(
            """
import torch
with torch.autocast("cuda", dtype=torch.bfloat16):
    p = model(x).sigmoid().clamp(1e-7, 1 - 1e-7)
    neg = (1 - p).log()
    pos = p.log()
""",
            at=((5, 11),),
        ),
        Flagged(
            """
import torch
import torch.nn as nn
import torch.nn.functional as F
EPS = 1e-8
criterion = nn.BCELoss()
with torch.autocast("cuda"):
    logits = model(x)
    a = torch.log(torch.sigmoid(logits) + EPS)
    b = F.binary_cross_entropy(torch.sigmoid(logits), y)
    c = criterion(torch.sigmoid(logits), y)
""",
            at=((9, 9), (10, 9), (11, 9)),
        ),
        Flagged(
            """
import torch
with torch.autocast("cpu", dtype=torch.float16):
    loss = torch.nn.functional.nll_loss(torch.log(torch.softmax(model(x), dim=-1)), t)
""",
            at=((4, 41),),
        ),
    )


def _dtypes_reaching_zero(probability: Probability, found: RegionOp) -> List[str]:
    region = found.region
    if region_devices(region) & probability.float32_on:
        return []  # logits autocast makes float32 (`(u * v).sum(-1)` on CUDA)
    if probability.kind == "softmax":
        # Only where autocast leaves softmax alone (CPU); CUDA runs it in float32.
        devices = region.possible_devices
        if not devices or any(d not in ("cuda", "cpu") or autocast_policy("softmax", d) is not None for d in devices):
            return []
    if region.possible_dtypes:
        return [d for d in _LOW if d in region.possible_dtypes and probability.reaches_zero(d)]
    # An unknown dtype: only what fails in float16 and bfloat16 alike.
    return list(_LOW) if all(probability.reaches_zero(d) for d in _LOW) else []


def _where(found: RegionOp) -> str:
    where = region_words(found.region)
    if found.via:
        where += " (it runs there through " + ", then ".join(f"`{source_text(v)}`" for v in found.via) + ")"
    return where


def _log_message(found: RegionOp, probability: Probability, dtypes: List[str]) -> str:
    source = source_text(probability.source)
    logits = probability.logits
    x = source_text(logits)
    negated = f"-{x}" if isinstance(logits, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) else f"-({x})"
    dtype = " or ".join(dtypes)
    if probability.kind == "sigmoid":
        what = f"`{source}`" if source_text(found.op.inputs[0]) != source else "a sigmoid"
        why = "a float16 sigmoid is exactly 0 for inputs below -17.3"
        fix = f"Use `F.logsigmoid({x})`, or `F.binary_cross_entropy_with_logits` for a binary cross-entropy."
    elif probability.kind == "complement":
        what = f"one minus `{source}`"
        limits = {"float16": "above 8.3 in float16", "bfloat16": "above 6.2 in bfloat16"}
        why = "`1 - sigmoid(x)` is exactly 0 for x " + " and ".join(limits[d] for d in dtypes)
        fix = f"Use `F.logsigmoid({negated})`, or `F.binary_cross_entropy_with_logits` for a binary cross-entropy."
    else:
        what = f"`{source}`" if source_text(found.op.inputs[0]) != source else "a softmax"
        why = "a float16 softmax on CPU is exactly 0 for entries 17.3 below their row's maximum"
        fix = f"Use `F.log_softmax({x}, dim=...)`, or `F.cross_entropy` on the logits."
    rounded = probability.rounded_away(dtypes[0])
    for guard in rounded:
        text = source_text(guard.node)
        value = f" ({guard.value:g})" if guard.value is not None and text != f"{guard.value:g}" and not text[:1].isdigit() else ""
        lands = "0" if guard in probability.floors else "1.0"
        why += f"; `{text}`{value} is {lands} in {dtypes[0]}, so it guards nothing"
    return (
        f"`{source_text(found.node)}` takes the log of {what}, computed in {dtype} inside {_where(found)}: "
        f"{why}, and the loss becomes inf or NaN. {fix}"
    )


def _bce_message(found: RegionOp) -> str:
    return (
        f"`{source_text(found.node)}` inside {_where(found)}: on CUDA, `binary_cross_entropy` and "
        "`nn.BCELoss` raise under autocast (\"unsafe to autocast\"). Pass the logits to "
        "`F.binary_cross_entropy_with_logits` (or `nn.BCEWithLogitsLoss`) instead of their sigmoid."
    )
