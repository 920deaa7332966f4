"""The numbers a rule's docs quote, checked against what `amplint verify` measured.

A prediction lists the numbers its rule's "What goes wrong at runtime" section quotes from its
measurements (`Prediction.quotes`: `("value", "65,000x")`, `("buggy", "6.7e-7")`). Each must
appear in that section as written, and agree with the measurement at every dtype the claim is
about, to the precision it is written with: "65,000x" is 65,000 give or take 500, "~700x" is
not 1649. So a fixture that changes, or a sentence written from memory, fails a test instead
of drifting. The ratios and percentages in the section that no prediction quotes are listed
too (`unquoted`): a section whose numbers the harness does not back says so in a test.
"""

from __future__ import annotations

import math
import re
from typing import Iterable, List, Optional, Sequence, Type

from amplint.lint.rule import Rule

# `within`: the bounded value is a ratio near 1, and the docs quote how near ("within 0.01%"):
# |value - 1| must be at most the quoted number.
WHICH = ("value", "buggy", "fixed", "within")
# Relative slack on top of the written precision: a number rounded for prose is still the measurement.
SLACK = 0.01
_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?(%?)")
# What reads as a measured ratio or share in prose: `65,000x`, `~1,650x`, `17%`, `0.045%`.
_RATIO_OR_SHARE = re.compile(r"~?\d[\d,]*(?:\.\d+)?(?:x\b|%)")


def quoted_number(text: str) -> float:
    """The first number in `text` as a value: "65,000x" -> 65000, "17%" -> 0.17, "~6.7e-7" -> 6.7e-7."""
    match = _NUMBER.search(text)
    if match is None:
        raise ValueError(f"no number in the quote {text!r}")
    number = float(match.group(0).rstrip("%").replace(",", ""))
    return number / 100 if match.group(1) else number


def tolerance(text: str) -> float:
    """Half a unit in the last significant digit the quote writes: "65,000" -> 500, "0.044" ->
    0.0005, "6.7e-7" -> 5e-9, "17%" -> 0.005."""
    match = _NUMBER.search(text)
    assert match is not None
    written = match.group(0).rstrip("%").replace(",", "")
    mantissa, _, exponent = written.lower().partition("e")
    scale = 10.0 ** int(exponent) if exponent else 1.0
    if "." in mantissa:
        unit = 10.0 ** -len(mantissa.split(".")[1])
    else:
        digits = mantissa.lstrip("-")
        unit = 10.0 ** (len(digits) - len(digits.rstrip("0"))) if digits.strip("0") else 1.0
    unit *= scale
    return unit / 2 / (100 if match.group(1) else 1)


def agrees(text: str, measured: Optional[float]) -> bool:
    if measured is None or not math.isfinite(measured):
        return False
    return abs(quoted_number(text) - measured) <= tolerance(text) + SLACK * abs(measured)


def quote_problems(rule: Type[Rule], rows: Iterable) -> List[str]:
    """What is wrong with the rule's quoted numbers against the run's rows (runner.Row): a quote
    missing from the section, or one the measurement does not bear out."""
    section = " ".join((rule.section("What goes wrong at runtime") or "").split())
    problems = []
    rows = [row for row in rows if row.code == rule.code and row.ran]
    for prediction in rule.PREDICTIONS:
        for which, text in prediction.quotes:
            if which not in WHICH:
                problems.append(f"{rule.code} {prediction.scenario}: quote {text!r} of {which!r}, not one of {WHICH}")
                continue
            if text not in section:
                problems.append(f"{rule.code} {prediction.scenario}: {text!r} is not in its 'What goes wrong at runtime'")
            measured = [row for row in rows if row.prediction == prediction]
            if not measured:
                problems.append(f"{rule.code} {prediction.scenario}/{prediction.quantity}: quoted but not measured")
            for row in measured:
                value = row.value if which == "within" else getattr(row, which)
                if which == "within":
                    good = value is not None and abs(value - 1) <= quoted_number(text)
                else:
                    good = agrees(text, value)
                if not good:
                    problems.append(
                        f"{rule.code} {prediction.scenario}/{prediction.quantity} ({row.dtype}): the docs say {text!r}, "
                        f"verify measured {which} = {value!r}"
                    )
    return problems


def unquoted(rule: Type[Rule]) -> Sequence[str]:
    """Ratios and shares in the section ("65,000x", "17%") that no prediction quotes and no
    claim states as a bound or a setting ("at least 1000x", "targets 100x larger")."""
    return unbacked(rule.section("What goes wrong at runtime") or "", [rule])


def unbacked(text: str, rules: Iterable[Type[Rule]]) -> Sequence[str]:
    """Ratios and shares in `text` that none of the rules' predictions quotes (so checks against
    a run) and none of their claims states: what a page other than a rule's own (docs/verify.md)
    may only repeat from the rules."""
    predictions = [prediction for rule in rules for prediction in rule.PREDICTIONS]
    covered = " ".join(quoted for prediction in predictions for _, quoted in prediction.quotes)
    claims = " ".join(prediction.claim for prediction in predictions)
    return [
        token
        for token in _RATIO_OR_SHARE.findall(" ".join(text.split()))
        if token not in covered and token.lstrip("~") not in covered and token.lstrip("~") not in claims
    ]
