"""Judging one prediction: combine the buggy and fixed measurements and check the bounds.

Pure functions over numbers, so the verdict logic is tested without running anything.
"""

from __future__ import annotations

import ast
import math
from typing import Mapping, Optional, Tuple

from amplint.lint.rule import Prediction

CONFIRMED = "confirmed"
NOT_REPRODUCED = "not reproduced"
SKIPPED = "skipped"
ERROR = "error"

# Every comparison reads the buggy run: a claim about fixed.py alone says nothing about the mistake.
COMPARISONS = ("buggy/fixed", "fixed/buggy", "buggy-fixed", "buggy")
SIDES = ("buggy", "fixed")


def combine(compare: str, buggy: float, fixed: float) -> float:
    """The number a prediction bounds: a ratio, a difference, or the buggy run's value alone."""
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
    # underflowed): x/0 is infinitely far apart. 0/0 is no ratio at all (NaN, which no bound
    # holds): nothing against nothing, say no overflow where the mechanism needs one, is not
    # a match.
    if math.isnan(numerator) or math.isnan(denominator):
        return math.nan
    if denominator == 0:
        return math.nan if numerator == 0 else math.copysign(math.inf, numerator)
    return numerator / denominator


# --------------------------------------------------------------------------- expected: the mechanism


# The functions an expression may call: `happened="min(buggy.loss_scale - 1, fixed.norm -
# fixed.max_norm)"` is positive only when both conditions hold.
FUNCTIONS = {"min": min, "max": max}


def expected_quantities(expression: str) -> Tuple[Tuple[str, str], ...]:
    """The (side, quantity) pairs an `expected` (or `happened`) expression reads; ValueError if
    it is not arithmetic (+ - * /, numbers, parentheses, `min(...)`, `max(...)`) over
    `buggy.<quantity>` / `fixed.<quantity>`."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as error:
        raise ValueError(f"expected {expression!r} does not parse: {error.msg}") from None
    read = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    called = {
        id(node.func)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and node.args and not node.keywords
    }
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if id(node.func) not in called:
                raise ValueError(f"expected {expression!r}: only {', '.join(FUNCTIONS)} may be called")
        elif isinstance(node, ast.Attribute):
            if not (isinstance(node.value, ast.Name) and node.value.id in SIDES):
                raise ValueError(f"expected {expression!r}: only buggy.<quantity> and fixed.<quantity> may be read")
            names.append((node.value.id, node.attr))
        elif isinstance(node, ast.Name):
            if id(node) in called:
                continue
            if node.id not in SIDES or id(node) not in read:
                raise ValueError(f"expected {expression!r}: write buggy.<quantity> or fixed.<quantity>, not {node.id!r}")
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise ValueError(f"expected {expression!r}: only numbers may appear as constants")
        elif not isinstance(node, _ARITHMETIC):
            raise ValueError(f"expected {expression!r}: {type(node).__name__} is not allowed")
    return tuple(dict.fromkeys(names))


_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.USub, ast.UAdd, ast.Load, ast.Call)


def evaluate_expected(expression: str, values: Mapping[str, Mapping[str, float]]) -> float:
    """The expression's value; `values` maps "buggy"/"fixed" to that script's quantities.
    Division by zero gives inf or NaN rather than raising, like the comparisons."""
    expected_quantities(expression)  # validates
    return _evaluate(ast.parse(expression, mode="eval").body, values)


def _evaluate(node: ast.AST, values: Mapping[str, Mapping[str, float]]) -> float:
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Attribute):
        assert isinstance(node.value, ast.Name)
        return float(values[node.value.id][node.attr])
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, values)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        arguments = [_evaluate(argument, values) for argument in node.args]
        # NaN decides nothing: min(NaN, 1) is NaN, never a condition that held
        return math.nan if any(math.isnan(each) for each in arguments) else float(FUNCTIONS[node.func.id](arguments))
    assert isinstance(node, ast.BinOp)
    left, right = _evaluate(node.left, values), _evaluate(node.right, values)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    return _ratio(left, right)


# --------------------------------------------------------------------------- the verdict


def holds(prediction: Prediction, value: float) -> bool:
    """Whether `value` lies within the prediction's bounds; NaN never does."""
    if math.isnan(value):
        return False
    if prediction.at_least is not None and value < prediction.at_least:
        return False
    if prediction.at_most is not None and value > prediction.at_most:
        return False
    return True


def judge(prediction: Prediction, buggy: float, fixed: float, expected: Optional[float] = None) -> Tuple[float, str]:
    """(bounded value, verdict) for one pair of measurements. With `expected` (the value of
    the prediction's mechanism expression) the bounded value is the comparison / expected.
    Whether the mechanism `happened` is judged apart (`mechanism_missing`): where it did not,
    the claim is not reproduced whatever this value."""
    value = combine(prediction.compare, buggy, fixed)
    if expected is not None:
        value = _ratio(value, expected)
    return value, CONFIRMED if holds(prediction, value) else NOT_REPRODUCED


def mechanism_missing(prediction: Prediction, values: Mapping[str, Mapping[str, float]]) -> Optional[str]:
    """Why the claim cannot be confirmed because its mechanism did not occur (`happened` is
    not positive: `fixed.first_epoch_skipped = 0`), or None."""
    if not prediction.happened:
        return None
    value = evaluate_expected(prediction.happened, values)
    if value > 0:  # NaN is not
        return None
    return f"the mechanism did not happen: {prediction.happened} = {number_text(value)}, must be > 0"


# --------------------------------------------------------------------------- how numbers read


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
    comparison = prediction.compare
    if prediction.expected:
        comparison = f"({comparison}) / ({prediction.expected})"
    return f"{comparison} {bound_text(prediction)}"


def number_text(value: Optional[float]) -> str:
    if value is None:
        return "-"
    if math.isfinite(value) and value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return f"{value:.4g}"


def band_decimals(prediction: Prediction) -> Optional[int]:
    """For a two-sided band, the decimals that show where a value sits inside it: two more
    than the band's width needs, so 0.99996 in [0.999, 1.001] does not print as 1."""
    low, high = prediction.at_least, prediction.at_most
    if low is None or high is None or high <= low:
        return None
    return max(0, math.ceil(-math.log10(high - low))) + 2


def is_tight(prediction: Prediction) -> bool:
    """A band narrow next to its values (`[0.999, 1.001]`), where four digits would hide why
    a value passes."""
    low, high = prediction.at_least, prediction.at_most
    if low is None or high is None:
        return False
    return high - low <= 0.1 * max(abs(low), abs(high))


def value_text(prediction: Prediction, value: Optional[float]) -> str:
    """The bounded value, with the digits its band needs."""
    decimals = band_decimals(prediction)
    if value is None or decimals is None or not math.isfinite(value):
        return exact_text(value) if prediction.at_least is not None and prediction.at_least == prediction.at_most else number_text(value)
    return f"{value:.{decimals}f}"


def exact_text(value: Optional[float]) -> str:
    """For `== 0` claims: a value that is not exactly zero must not round to 0."""
    if value is None:
        return "-"
    return "0" if value == 0 else f"{value:.6g}"


def measured_text(prediction: Optional[Prediction], value: Optional[float]) -> str:
    """A buggy or fixed measurement: seven significant digits next to a tight band."""
    if prediction is not None and value is not None and math.isfinite(value) and is_tight(prediction):
        return f"{value:.7g}"
    return number_text(value)
