"""The analysis limits: what linting one file may cost, counted in steps, never in seconds.

A verdict that depends on the machine's load is no verdict: the same commit must pass or fail
the same way on a laptop, on a loaded CI runner, at `-j1` or `-j8`, cold or warm. So the work
of linting a file is counted, and the limits are on the count:

- **Per function.** The flow analysis (`amplint.semantic.flow`, its limits in `amplint.semantic.summaries`) follows a function statement
  by statement over a set of states; past `MAX_WORK` statement evaluations (times the
  states they run with) or `MAX_STATES` states at one point, the function is "too complex
  to follow": skipped and reported, never guessed.
- **Per file.** Every node the analysis' tree walks visit (`amplint.semantic.walk.children`)
  is a step, every statement the flow analysis evaluates (per state) is `FLOW_STEP` steps,
  the code LibCST prints for messages and summaries (`amplint.semantic.names.source_text`) a
  step per `PRINT_CHARACTERS_PER_STEP` characters, every binding a lookup of a name may refer
  to (`amplint.semantic.resolve.Resolver.bindings`: a name bound thousands of times is weighed
  that many times at each read), the scans a rule or a fact family makes per finding (AMP014's
  names up the scope chain, a cast's later calls), and LibCST's parse is charged up front, a
  step per `PARSE_CHARACTERS_PER_STEP` characters (its native code cannot be counted from
  inside). Past `FILE_STEPS` the file is not linted ("analysis exceeded the work limit"), an
  error like any other file error, and the same one everywhere.

The weights make a step about the same CPU whatever it counts: 2 to 3 microseconds on the
(shared, loaded) machine they were measured on, where a node expansion takes 2.3 us, a flow
evaluation 5 to 9 us, LibCST's parse 1 us per character and its printing 0.8 us. So the file
limit is 6 to 9 s of CPU there; on a slower shared machine (2 December 2026) a step cost 7 to
13 us in every phase and the whole limit 36 s, still far under the CPU safety net of
`amplint.run.driver`. The largest training scripts of timm, diffusers, pytorch/examples and
accelerate (2,000 to 4,400 lines, 144 files with AMP code) take at most
190,000 steps, 1/16 of the limit (measured 6 December 2026), and 240 mutants of the 12
largest (blocks duplicated, lines deleted, AMP calls inserted) at most 260,000; a generated
2,000-line trainer of 160 AMP training loops takes 540,000 (`tests/test_work_limit.py`). Not
counted, because linear in the file's size (which is limited) or done only for what is
reported: CPython's syntax check and the evidence pre-check, positions of findings, the work a
rule does once per file. Work that grows faster than the file is counted: a file twice or four
times as large takes at most as many more operations as steps, for every rule
(`tests/test_work_growth.py`), so the CPU safety net is never what stops a file below the
step limit.

`--analysis-limit FACTOR` (config: `analysis-limit`) multiplies every limit for a run. The
CPU seconds of `--file-budget` (amplint.run.driver) remain only as a safety net far above what the
step limit allows, for native code that is never counted (a pathological parse).

The meter is a context variable: each thread (the language server's) and each worker process
counts its own file.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator, Optional

FILE_STEPS = 3_000_000
FLOW_STEP = 4
PARSE_CHARACTERS_PER_STEP = 2
PRINT_CHARACTERS_PER_STEP = 2
# The largest `--analysis-limit`: 3,000 times the limit is billions of steps, hours of CPU
# per file, and a whole number of steps (1e308 times is not).
MAX_FACTOR = 1000.0


class WorkLimitExceeded(BaseException):
    """Raised where the file's work passed its limit. A BaseException, so that no
    `except Exception` in the analysis swallows it."""


class Meter:
    """The steps one file's lint has taken, against its limit."""

    __slots__ = ("factor", "limit", "spent")

    def __init__(self, factor: float = 1.0, limited: bool = True) -> None:
        self.factor = factor
        self.limit = int(FILE_STEPS * factor) if limited else sys.maxsize
        self.spent = 0

    def charge(self, steps: int) -> None:
        self.spent += steps
        if self.spent > self.limit:
            raise WorkLimitExceeded()


METER: ContextVar[Optional[Meter]] = ContextVar("amplint_work_meter", default=None)
_current = METER


@contextmanager
def metered(factor: Optional[float] = 1.0, limited: bool = True) -> Iterator[Optional[Meter]]:
    """Count the work done inside, against the limits times `factor` (None: no file limit).
    `limited=False`: the per-function limits times `factor`, and no file limit (`--fix`
    analyses each file again, round after round, after its lint has passed the file limit)."""
    meter = Meter(factor, limited) if factor is not None else None
    token = _current.set(meter)
    try:
        yield meter
    finally:
        _current.reset(token)


def current() -> Optional[Meter]:
    return _current.get()


def charge(steps: int) -> None:
    meter = _current.get()
    if meter is not None:
        meter.charge(steps)


def factor() -> float:
    """The current limits' factor (1 outside a metered lint)."""
    meter = _current.get()
    return meter.factor if meter is not None else 1.0


def limit_message(factor: float) -> str:
    steps = int(FILE_STEPS * factor)
    return f"analysis exceeded the work limit ({steps:,} steps); not linted (raise it with --analysis-limit)"


def parse_factor(text: str) -> float:
    """`--analysis-limit`'s value: a positive multiplier, `4` or `4x`."""
    return check_factor(float(text[:-1] if text.lower().endswith("x") else text))


def check_factor(value: float) -> float:
    """`value` if it is a factor the limits can be multiplied by: above 0, at most
    `MAX_FACTOR`; else ValueError."""
    if not 0 < value <= MAX_FACTOR:
        raise ValueError(value)
    return float(value)
