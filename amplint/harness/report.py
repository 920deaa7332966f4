"""How `amplint verify` prints its verdicts: an aligned text table, or JSON."""

from __future__ import annotations

import json
import math
from typing import Dict, List, Optional, Union

from amplint.harness.runner import Row, VerifyRun
from amplint.harness.verdict import (
    CONFIRMED,
    ERROR,
    NOT_REPRODUCED,
    SKIPPED,
    bound_text,
    bounds_text,
    combine,
    measured_text,
    number_text,
    value_text,
)

COLUMNS = ("rule", "device", "dtype", "scenario", "quantity", "kind", "buggy", "fixed", "check", "verdict")
# With `--perturb`, each row also says which incidental details it ran with.
VARIANT_COLUMN = "variant"
# How a control's verdict reads: it "holds" (nothing differs, as claimed); it is no confirmation of harm.
HELD = "held"
NOT_HELD = "not held"


def verdict_word(row: Row) -> str:
    """`confirmed` / `not reproduced` for an effect; `held` / `not held` for a control."""
    if row.prediction is not None and row.prediction.is_control:
        return {CONFIRMED: HELD, NOT_REPRODUCED: NOT_HELD}.get(row.verdict, row.verdict)
    return row.verdict


def verdict_text(row: Row) -> str:
    return f"{verdict_word(row)}: {row.reason}" if row.reason else verdict_word(row)


def check_text(row: Row) -> str:
    """`fixed/buggy = 6.5e+04, claim >= 1000`: the measured comparison next to the claimed bound.

    A tight band prints the value with the digits that show where it sits in the band; a
    mechanism (`expected`) prints the comparison, what the mechanism predicts, and their ratio."""
    prediction = row.prediction
    if prediction is None:
        return "-"
    if row.value is None:
        return f"claim {bounds_text(prediction)}"
    value = value_text(prediction, row.value)
    if prediction.expected and row.expected is not None:
        # `fixed/buggy = 5.707e+04 = 0.993 x expected 5.749e+04`; the expression is in the JSON and HTML
        return (
            f"{prediction.compare} = {number_text(_combined(row))} = {value} x expected {number_text(row.expected)}, "
            f"claim {bound_text(prediction)}"
        )
    return f"{prediction.compare} = {value}, claim {bound_text(prediction)}"


def _combined(row: Row) -> Optional[float]:
    if row.prediction is None or row.buggy is None or row.fixed is None:
        return None
    return combine(row.prediction.compare, row.buggy, row.fixed)


def summary_counts(run: VerifyRun) -> Dict[str, int]:
    """Effects confirmed and controls held apart: a control that holds is no evidence of harm."""
    def count(verdict: str, control: Optional[bool] = None) -> int:
        return sum(
            row.verdict == verdict and (control is None or (row.prediction is not None and row.prediction.is_control) == control)
            for row in run.rows
        )

    return {
        "effects confirmed": count(CONFIRMED, control=False),
        "controls held": count(CONFIRMED, control=True),
        "effects not reproduced": count(NOT_REPRODUCED, control=False),
        "controls not held": count(NOT_REPRODUCED, control=True),
        SKIPPED: count(SKIPPED),
        "errors": count(ERROR),
    }


def summary_text(run: VerifyRun) -> str:
    """`143 predictions: 113 effects confirmed, 27 controls held, 0 effects not reproduced, 0
    controls not held, 3 skipped, 0 errors`; with perturbations, `1001 checks (143 predictions,
    as written and under 6 perturbations): ...`."""
    counts = summary_counts(run)
    summary = ", ".join(count_text(label, count) for label, count in counts.items())
    if len(run.variants) == 1:
        return f"{_count(len(run.rows), 'prediction')}: {summary}"
    predictions = len(run.rows) // len(run.variants)
    perturbations = _count(len(run.variants) - 1, "perturbation")
    return f"{_count(len(run.rows), 'check')} ({_count(predictions, 'prediction')}, as written and under {perturbations}): {summary}"


def count_text(label: str, count: int) -> str:
    """`1 effect confirmed`, `2 effects confirmed`, `1 error`: a count of summary_counts."""
    if count == 1:
        first, _, rest = label.partition(" ")
        label = " ".join(filter(None, (first[:-1] if first.endswith("s") else first, rest)))
    return f"{count} {label}"


def header_text(run: VerifyRun) -> str:
    """`amplint verify: torch 2.13.0+cpu, device cpu, fixtures from /src/amplint/fixtures, 2
    fixture processes, 12.6 s`: where the fixtures came from too (a copy of the checkout run
    with PYTHONPATH runs its own, and says so)."""
    torch = f"torch {run.torch_version}" if run.torch_version else "torch (no fixture reported a version)"
    source = f", fixtures from {run.root}" if run.root else ""
    return f"amplint verify: {torch}, device {run.device}{source}, {_count(run.processes, 'fixture process', 'es')}, {run.seconds:.1f} s"


def _cells(row: Row, variants: bool) -> List[str]:
    prediction = row.prediction
    return ([row.variant] if variants else []) + [
        row.code,
        row.device,
        row.dtype,
        prediction.scenario if prediction else "-",
        prediction.quantity if prediction else "-",
        row.kind,
        measured_text(prediction, row.buggy),
        measured_text(prediction, row.fixed),
        check_text(row),
        verdict_text(row),
    ]


def render_text(run: VerifyRun) -> str:
    variants = len(run.variants) > 1
    columns = ((VARIANT_COLUMN,) if variants else ()) + COLUMNS
    table = [list(columns)] + [_cells(row, variants) for row in run.rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1] for line in table]
    return "\n".join([header_text(run), ""] + [line.rstrip() for line in lines] + ["", summary_text(run)]) + "\n"


def _count(number: int, noun: str, plural: str = "s") -> str:
    return f"{number} {noun}{'' if number == 1 else plural}"


def _json_number(value: Optional[float]) -> Union[None, float, str]:
    # JSON has no NaN or infinity; spell them out rather than emit invalid JSON.
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def row_object(row: Row) -> Dict[str, object]:
    prediction = row.prediction
    return {
        "code": row.code,
        "name": row.name,
        "variant": row.variant,
        "scenario": prediction.scenario if prediction else None,
        "device": row.device,
        "dtype": row.dtype,
        "quantity": prediction.quantity if prediction else None,
        "kind": prediction.kind if prediction else None,
        "devices": list(prediction.devices) if prediction else None,
        "buggy": _json_number(row.buggy),
        "fixed": _json_number(row.fixed),
        "compare": prediction.compare if prediction else None,
        "value": _json_number(row.value),
        "at_least": prediction.at_least if prediction else None,
        "at_most": prediction.at_most if prediction else None,
        "expected": prediction.expected if prediction else None,
        "expected_value": _json_number(row.expected),
        "happened": prediction.happened if prediction else None,
        "claim": prediction.claim if prediction else None,
        "verdict": row.verdict,
        "reason": row.reason,
    }


def render_json(run: VerifyRun) -> str:
    return json.dumps([row_object(row) for row in run.rows], indent=2) + "\n"
