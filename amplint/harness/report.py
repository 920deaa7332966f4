"""How `amplint verify` prints its verdicts: an aligned text table, or JSON."""

from __future__ import annotations

import json
import math
from typing import Dict, List, Optional, Union

from amplint.harness.runner import Row, VerifyRun
from amplint.harness.verdict import CONFIRMED, ERROR, NOT_REPRODUCED, SKIPPED, bound_text, bounds_text, number_text

COLUMNS = ("rule", "device", "dtype", "scenario", "quantity", "buggy", "fixed", "check", "verdict")


def verdict_text(row: Row) -> str:
    return f"{row.verdict}: {row.reason}" if row.reason else row.verdict


def check_text(row: Row) -> str:
    """`fixed/buggy = 6.5e+04, claim >= 1000`: the measured comparison next to the claimed bound."""
    if row.prediction is None:
        return "-"
    if row.value is None:
        return f"claim {bounds_text(row.prediction)}"
    return f"{row.prediction.compare} = {number_text(row.value)}, claim {bound_text(row.prediction)}"


def _cells(row: Row) -> List[str]:
    prediction = row.prediction
    return [
        row.code,
        row.device,
        row.dtype,
        prediction.scenario if prediction else "-",
        prediction.quantity if prediction else "-",
        number_text(row.buggy),
        number_text(row.fixed),
        check_text(row),
        verdict_text(row),
    ]


def render_text(run: VerifyRun) -> str:
    table = [list(COLUMNS)] + [_cells(row) for row in run.rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1] for line in table]
    counts = {verdict: sum(row.verdict == verdict for row in run.rows) for verdict in (CONFIRMED, NOT_REPRODUCED, SKIPPED, ERROR)}
    torch = f"torch {run.torch_version}" if run.torch_version else "torch (no fixture reported a version)"
    header = f"amplint verify: {torch}, device {run.device}, {_count(run.processes, 'fixture process', 'es')}, {run.seconds:.1f} s"
    summary = ", ".join(_count(count, verdict, "s" if verdict == ERROR else "") for verdict, count in counts.items())
    footer = f"{_count(len(run.rows), 'prediction')}: {summary}"
    return "\n".join([header, ""] + [line.rstrip() for line in lines] + ["", footer]) + "\n"


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
        "scenario": prediction.scenario if prediction else None,
        "device": row.device,
        "dtype": row.dtype,
        "quantity": prediction.quantity if prediction else None,
        "buggy": _json_number(row.buggy),
        "fixed": _json_number(row.fixed),
        "compare": prediction.compare if prediction else None,
        "value": _json_number(row.value),
        "at_least": prediction.at_least if prediction else None,
        "at_most": prediction.at_most if prediction else None,
        "claim": prediction.claim if prediction else None,
        "verdict": row.verdict,
        "reason": row.reason,
    }


def render_json(run: VerifyRun) -> str:
    return json.dumps([row_object(row) for row in run.rows], indent=2) + "\n"
