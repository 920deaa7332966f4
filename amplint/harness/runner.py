"""Run each rule's fixture pair and judge its predictions.

A rule's fixtures are two training scripts, `fixtures/<CODE>/buggy.py` and `fixed.py`. Each
prints its measurements as a final JSON line, `{"torch": ..., "results": {scenario:
{quantity: value}}}`, for the scenarios and the autocast dtype it is given. All of one rule's
script runs happen in one subprocess (`amplint.harness.driver`) with a timeout, so torch is
imported once per rule, not once per script. This process never imports torch: a script that
raises, a process that crashes or hangs, or output that cannot be read becomes an `error`
verdict for the predictions that needed it, and the other rules carry on.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Tuple, Type, Union

from amplint.harness.driver import STARTING
from amplint.harness.verdict import CONFIRMED, ERROR, NOT_REPRODUCED, SKIPPED, judge
from amplint.rule import Prediction, Rule

FIXTURE_SCRIPTS = ("buggy", "fixed")
DEFAULT_TIMEOUT = 120.0


@dataclass(frozen=True)
class ScriptSpec:
    """One fixture script to run: buggy or fixed, at one dtype, for some scenarios."""

    which: str  # "buggy" or "fixed"
    dtype: str
    script: Path
    argv: Tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.which}.py ({self.dtype})"


@dataclass
class ScriptRun:
    """What one fixture script reported: measurements per scenario, or why there are none."""

    results: Dict[str, Dict[str, float]] = field(default_factory=dict)
    torch_version: Optional[str] = None
    error: Optional[str] = None

    def measurement(self, label: str, scenario: str, quantity: str) -> Tuple[Optional[float], Optional[str]]:
        """(value, None), or (None, why there is no value)."""
        if self.error is not None:
            return None, self.error
        value = self.results.get(scenario, {}).get(quantity)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None, f"{label}.py reported no `{quantity}` for scenario {scenario}"
        return float(value), None


@dataclass
class Row:
    """One prediction, run (or not) at one device and dtype: one line of the table."""

    code: str
    name: str
    prediction: Optional[Prediction]
    device: str
    dtype: str
    verdict: str
    reason: Optional[str] = None
    buggy: Optional[float] = None
    fixed: Optional[float] = None
    value: Optional[float] = None  # buggy and fixed combined as the prediction's `compare` says

    @property
    def ran(self) -> bool:
        return self.verdict != SKIPPED


@dataclass
class VerifyRun:
    rows: List[Row]
    device: str
    torch_version: Optional[str]
    processes: int  # fixture subprocesses started: one per rule that ran
    seconds: float

    @property
    def ok(self) -> bool:
        """Exit 0 material: something ran, and every prediction that ran was confirmed."""
        ran = [row for row in self.rows if row.ran]
        return bool(ran) and all(row.verdict == CONFIRMED for row in ran)


if TYPE_CHECKING:
    from importlib.abc import Traversable


def fixture_root() -> "Traversable":
    """`amplint.fixtures`: the checkout's `fixtures/` (editable install) or the wheel's copy."""
    try:
        return importlib.resources.files("amplint.fixtures")
    except ModuleNotFoundError:
        # A source checkout imported without installing: fixtures/ sits beside amplint/.
        return Path(__file__).resolve().parents[2] / "fixtures"


def script_spec(which: str, script: Path, device: str, dtype: str, scenarios: Sequence[str]) -> ScriptSpec:
    argv = ["--device", device, "--dtype", dtype]
    for scenario in scenarios:
        argv += ["--scenario", scenario]
    return ScriptSpec(which, dtype, script, tuple(argv))


def run_scripts(specs: Sequence[ScriptSpec], timeout: float) -> Dict[Tuple[str, str], ScriptRun]:
    """Run one rule's scripts in one driver subprocess; a ScriptRun for each (which, dtype)."""
    payload = json.dumps([{"label": spec.label, "script": str(spec.script), "argv": list(spec.argv)} for spec in specs])
    command = [sys.executable, "-m", "amplint.harness.driver", payload]
    # Rules run side by side: one intra-op thread each keeps them from fighting over cores
    # and keeps floating-point reduction order the same from run to run.
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    failure: Optional[str] = None
    try:
        # Run from the fixture's folder, as `python fixtures/<CODE>/buggy.py` would see it.
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=str(specs[0].script.parent),
        )
        stdout, stderr = done.stdout, done.stderr
        if done.returncode != 0:
            failure = f"the fixture process exited with {done.returncode}"
    except subprocess.TimeoutExpired as expired:
        stdout, stderr = _text(expired.stdout), _text(expired.stderr)
        failure = f"timed out after {timeout:g} s"
    except OSError as error:
        return {(spec.which, spec.dtype): ScriptRun(error=f"could not start the fixture process: {error}") for spec in specs}

    reports = _reports(stdout)
    running = _last_started(stderr)
    why = f"{failure or 'the fixture process reported nothing'} " + (
        f"while running {running}" if running else "before any script started"
    )
    if failure is None or not failure.startswith("timed out"):
        why += f": {_last_line(stderr)}"
    runs: Dict[Tuple[str, str], ScriptRun] = {}
    for spec in specs:
        report = reports.get(spec.label)
        runs[(spec.which, spec.dtype)] = _script_run(spec, report) if report else ScriptRun(error=f"{spec.label}: {why}")
    return runs


def _script_run(spec: ScriptSpec, report: dict) -> ScriptRun:
    if report.get("error"):
        return ScriptRun(error=f"{spec.label} {report['error']}")
    printed = _final_json(report.get("stdout") or "")
    if printed is None:
        return ScriptRun(error=f"{spec.label} printed no JSON result line")
    results = printed.get("results")
    if not isinstance(results, dict):
        return ScriptRun(error=f"{spec.label}: its JSON line has no `results` object")
    return ScriptRun(results=results, torch_version=printed.get("torch"))


def _reports(stdout: str) -> Dict[str, dict]:
    reports = {}
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict) and isinstance(parsed.get("label"), str):
            reports[parsed["label"]] = parsed
    return reports


def _last_started(stderr: str) -> Optional[str]:
    started = [line[len(STARTING):].strip() for line in stderr.splitlines() if line.startswith(STARTING)]
    return started[-1] if started else None


def _text(output: Union[bytes, str, None]) -> str:
    if output is None:
        return ""
    return output.decode(errors="replace") if isinstance(output, bytes) else output


def _final_json(stdout: str) -> Optional[dict]:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                parsed = json.loads(line)
            except ValueError:
                return None
            return parsed if isinstance(parsed, dict) else None
    return None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(STARTING)]
    return lines[-1] if lines else "(nothing on stderr)"


@dataclass(frozen=True)
class Planned:
    """A prediction and the dtype it runs at, or why it does not run."""

    rule: Type[Rule]
    prediction: Optional[Prediction]
    dtype: str
    skip: Optional[str] = None


def plan(
    rules: Iterable[Type[Rule]], device: str, dtype: Optional[str], unavailable: Optional[str] = None
) -> List[Planned]:
    """Which predictions run at which dtype, in rule and prediction order.

    Without `dtype`, each prediction runs at the first dtype its claim is about; with one,
    the predictions about other dtypes are skipped. `unavailable` skips everything (no CUDA).
    """
    planned: List[Planned] = []
    for rule in rules:
        if not rule.PREDICTIONS:
            planned.append(Planned(rule, None, dtype or "-", "the rule makes no runtime prediction"))
        for prediction in rule.PREDICTIONS:
            chosen = dtype or prediction.dtypes[0]
            skip = unavailable
            if skip is None and chosen not in prediction.dtypes:
                skip = f"the claim is about {prediction.dtype} only"
            planned.append(Planned(rule, prediction, chosen, skip))
    return planned


def verify(
    rules: Sequence[Type[Rule]],
    device: str,
    dtype: Optional[str] = None,
    timeout: float = DEFAULT_TIMEOUT,
    unavailable: Optional[str] = None,
    root: Optional["Traversable"] = None,
    jobs: Optional[int] = None,
) -> VerifyRun:
    """Run each rule's fixture scripts once (one subprocess per rule) and judge every prediction."""
    started = time.monotonic()
    planned = plan(rules, device, dtype, unavailable)
    # rule code -> dtype -> scenarios its predictions need at that dtype
    needed: Dict[str, Dict[str, List[str]]] = {}
    for entry in planned:
        if entry.skip is None and entry.prediction is not None:
            scenarios = needed.setdefault(entry.rule.code, {}).setdefault(entry.dtype, [])
            if entry.prediction.scenario not in scenarios:
                scenarios.append(entry.prediction.scenario)

    root = root if root is not None else fixture_root()
    outputs: Dict[Tuple[str, str, str], ScriptRun] = {}  # (code, dtype, "buggy"/"fixed")
    work: List[Tuple[str, List[ScriptSpec]]] = []
    with contextlib.ExitStack() as stack:
        for code, by_dtype in needed.items():
            specs = []
            for chosen, scenarios in by_dtype.items():
                for which in FIXTURE_SCRIPTS:
                    resource = root / code / f"{which}.py"
                    if not resource.is_file():
                        outputs[(code, chosen, which)] = ScriptRun(error=f"no fixture fixtures/{code}/{which}.py")
                        continue
                    # A zipped install hands out a temporary copy; a normal one, the file itself.
                    script = stack.enter_context(importlib.resources.as_file(resource))
                    specs.append(script_spec(which, Path(script), device, chosen, scenarios))
            if specs:
                work.append((code, specs))
        workers = max(1, min(jobs or _default_jobs(device), len(work) or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = {code: pool.submit(run_scripts, specs, timeout) for code, specs in work}
            for code, future in futures.items():
                for (which, chosen), run in future.result().items():
                    outputs[(code, chosen, which)] = run

    rows = [_row(entry, device, outputs) for entry in planned]
    torch_version = next((run.torch_version for run in outputs.values() if run.torch_version), None)
    return VerifyRun(rows, device, torch_version, len(work), time.monotonic() - started)


def _row(entry: Planned, device: str, outputs: Dict[Tuple[str, str, str], ScriptRun]) -> Row:
    rule, prediction = entry.rule, entry.prediction
    if entry.skip is not None or prediction is None:
        return Row(rule.code, rule.name, prediction, device, entry.dtype, SKIPPED, entry.skip)
    row = Row(rule.code, rule.name, prediction, device, entry.dtype, ERROR)
    problems = []
    for which in FIXTURE_SCRIPTS:
        value, problem = outputs[(rule.code, entry.dtype, which)].measurement(which, prediction.scenario, prediction.quantity)
        setattr(row, which, value)
        if problem is not None and problem not in problems:
            problems.append(problem)
    if problems:
        row.reason = "; ".join(problems)
        return row
    assert row.buggy is not None and row.fixed is not None
    row.value, row.verdict = judge(prediction, row.buggy, row.fixed)
    return row


def _default_jobs(device: str) -> int:
    # Two rules at a time on a GPU: they share one device, and most of their time is start-up.
    return 2 if device == "cuda" else max(1, os.cpu_count() or 1)


__all__ = ["CONFIRMED", "NOT_REPRODUCED", "ERROR", "SKIPPED", "Row", "VerifyRun", "fixture_root", "run_scripts", "verify"]
