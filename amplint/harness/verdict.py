"""Judging one prediction: combine the buggy and fixed measurements and check the bounds.

Pure functions over numbers, so the verdict logic is tested without running anything.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

from amplint.rule import Prediction

CONFIRMED = "confirmed"
NOT_REPRODUCED = "not reproduced"
SKIPPED = "skipped"
ERROR = "error"

COMPARISONS = ("buggy/fixed", "fixed/buggy", "buggy-fixed", "buggy")


def combine(compare: str, buggy: float, fixed: float) -> float:
    """The number a prediction bounds: a ratio, a difference, or the buggy value alone."""
    if compare == "buggy":
        return buggy
    if compare == "buggy-fixed":
        return buggy - fixed
    if compare == "buggy/fixed":
        return _ratio(buggy, fixed)
    if compare == "fixed/buggy":
        return _ratio(fixed, buggy)
    raise ValueError(f"unknown comparison {compare!r}; expected one of {', '.join(COMPARISONS)}")


def _ratio(numerator: float, denominator: float) -> float:
    # A quantity that is exactly zero on one side is common (a frozen loss, gradients that all
    # underflowed): x/0 is infinitely far apart, 0/0 is "the same".
    if math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    if denominator == 0:
        return 1.0 if numerator == 0 else math.copysign(math.inf, numerator)
    return numerator / denominator


def holds(prediction: Prediction, value: float) -> bool:
    """Whether `value` lies within the prediction's bounds; NaN never does."""
    if math.isnan(value):
        return False
    if prediction.at_least is not None and value < prediction.at_least:
        return False
    if prediction.at_most is not None and value > prediction.at_most:
        return False
    return True


def judge(prediction: Prediction, buggy: float, fixed: float) -> Tuple[float, str]:
    """(combined value, verdict) for one pair of measurements."""
    value = combine(prediction.compare, buggy, fixed)
    return value, CONFIRMED if holds(prediction, value) else NOT_REPRODUCED


def bound_text(prediction: Prediction) -> str:
    """The claimed bound alone: `>= 1000`, `in [0.999, 1.001]`, `== 0`."""
    low, high = prediction.at_least, prediction.at_most
    if low is not None and high is not None:
        return f"== {low:g}" if low == high else f"in [{low:g}, {high:g}]"
    if low is not None:
        return f">= {low:g}"
    if high is not None:
        return f"<= {high:g}"
    return "any value"


def bounds_text(prediction: Prediction) -> str:
    """The claim as a reader checks it: `fixed/buggy >= 1000`."""
    return f"{prediction.compare} {bound_text(prediction)}"


def number_text(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if math.isfinite(value) and value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"
