"""Run each rule's fixture pair and judge its predictions.

A rule's fixtures are two training scripts, `fixtures/<CODE>/buggy.py` and `fixed.py`. Each
prints its measurements as a final JSON line, `{"torch": ..., "results": {scenario:
{quantity: value}}, "history": {scenario: {panel: {line: [value per step]}}}}`, for the
scenarios and the autocast dtype it is given.

Importing torch and building the first optimizer costs 2-4 s of CPU in every fresh process,
more than most fixture scripts' training. So the scripts run in a few long-lived driver
subprocesses (`amplint.harness.driver`), one per worker (a CPU each, or two on a GPU), not
one per script or per rule. Isolation stays per script: a watchdog stops a script that runs
too long, and when a process hangs or crashes, the scripts it had not reached run in a fresh
one. This process never imports torch: a script that raises, crashes or hangs, or output
that cannot be read becomes an `error` verdict for the predictions that needed it, and
everything else carries on.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Type

from amplint.harness.driver import STARTING
from amplint.harness.verdict import (
    CONFIRMED,
    ERROR,
    NOT_REPRODUCED,
    SKIPPED,
    evaluate_expected,
    expected_quantities,
    judge,
    mechanism_missing,
)
from amplint.lint.rule import Prediction, Rule

FIXTURE_SCRIPTS = ("buggy", "fixed")
DTYPES = ("float16", "bfloat16")
ALL_DTYPES = "all"
DEFAULT_TIMEOUT = 120.0
# However loaded the machine, a script whose wall time exceeds this many timeouts is stopped.
WALL_LIMIT_FACTOR = 10
_POLL_SECONDS = 0.1

# {panel: {line: [one value per step]}}: what a fixture recorded for one scenario
History = Dict[str, Dict[str, List[float]]]


@dataclass(frozen=True)
class Variant:
    """The incidental details a run gives every fixture script (`amplint verify --perturb`).

    Every fixture takes `--seed`, `--lr-scale` and `--steps-scale` (fixtures/README.md): its
    seed, a factor on every learning rate, a factor on every number of training steps. A
    claim about the mistake must hold whatever they are, so `--perturb` judges every
    prediction again under each of PERTURBATIONS."""

    name: str
    argv: Tuple[str, ...] = ()
    work: float = 1.0  # the script's work relative to the run as written (more steps: more)


AS_WRITTEN = Variant("as written")
PERTURBATIONS = (
    Variant("seed 1", ("--seed", "1")),
    Variant("seed 2", ("--seed", "2")),
    Variant("lr x0.5", ("--lr-scale", "0.5")),
    Variant("lr x1.5", ("--lr-scale", "1.5")),
    Variant("steps x0.5", ("--steps-scale", "0.5"), work=0.5),
    Variant("steps x1.5", ("--steps-scale", "1.5"), work=1.5),
)
# What a ScriptRun is filed under: (rule code, dtype, "buggy"/"fixed", variant name).
OutputKey = Tuple[str, str, str, str]


@dataclass(frozen=True)
class ScriptSpec:
    """One fixture script to run: a rule's buggy or fixed script, at one dtype, for some
    scenarios, with the incidental details of one variant."""

    code: str
    which: str  # "buggy" or "fixed"
    dtype: str
    script: Path
    argv: Tuple[str, ...]
    variant: Variant = AS_WRITTEN

    @property
    def key(self) -> OutputKey:
        return (self.code, self.dtype, self.which, self.variant.name)

    @property
    def label(self) -> str:
        details = self.dtype if self.variant == AS_WRITTEN else f"{self.dtype}, {self.variant.name}"
        return f"fixtures/{self.code}/{self.which}.py ({details})"

    @property
    def cost(self) -> float:
        """A rough measure of its work, for sharing scripts out between workers: its scenarios."""
        return max(1, self.argv.count("--scenario")) * self.variant.work


@dataclass
class ScriptRun:
    """What one fixture script reported: measurements and histories per scenario, or why there are none."""

    results: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    history: Dict[str, Any] = field(default_factory=dict)
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

    def scenario_history(self, scenario: str) -> Optional[History]:
        """The scenario's per-step curves, if the script recorded any in the expected shape."""
        history = self.history.get(scenario) if isinstance(self.history, dict) else None
        if not isinstance(history, dict):
            return None
        panels = {
            str(panel): {str(line): list(values) for line, values in lines.items() if isinstance(values, list)}
            for panel, lines in history.items()
            if isinstance(lines, dict)
        }
        return {panel: lines for panel, lines in panels.items() if lines} or None


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
    variant: str = AS_WRITTEN.name  # the incidental details it ran with (Variant.name)
    buggy: Optional[float] = None
    fixed: Optional[float] = None
    value: Optional[float] = None  # buggy and fixed combined as the prediction's `compare` says
    expected: Optional[float] = None  # the value of the prediction's `expected` mechanism, if any
    # the scenario's per-step curves from each script, for the HTML report
    history: Dict[str, Optional[History]] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.verdict != SKIPPED

    @property
    def kind(self) -> str:
        return self.prediction.kind if self.prediction is not None else "-"


@dataclass
class VerifyRun:
    rows: List[Row]
    device: str
    torch_version: Optional[str]
    processes: int  # fixture subprocesses started: one per worker, and one more after each hang or crash
    seconds: float
    # what was planned and what each script reported, keyed (code, dtype, "buggy"/"fixed",
    # variant): enough to judge the same predictions again against other pairings of the scripts
    planned: List["Planned"] = field(default_factory=list)
    outputs: Dict[OutputKey, ScriptRun] = field(default_factory=dict)
    variants: Tuple[str, ...] = (AS_WRITTEN.name,)  # the rows' variants, in the order they ran
    root: Optional[str] = None  # where the fixtures came from (fixture_root), for the header

    @property
    def ok(self) -> bool:
        """Exit 0 material: something ran, and every prediction that ran was confirmed."""
        ran = [row for row in self.rows if row.ran]
        return bool(ran) and all(row.verdict == CONFIRMED for row in ran)


if TYPE_CHECKING:
    from importlib.abc import Traversable


def fixture_root() -> "Traversable":
    """Where the fixtures come from: the `fixtures/` beside the `amplint` package that is
    running, in a source tree (a checkout, or a copy of one run with `PYTHONPATH=copy`);
    else the installed `amplint.fixtures` (a wheel).

    Not `amplint.fixtures` first: an editable install's finder maps that name to the
    checkout it was installed from, so a mutated copy run with PYTHONPATH would silently
    run the original's fixtures."""
    beside = Path(__file__).resolve().parents[2] / "fixtures"
    if _holds_fixtures(beside):
        return beside
    try:
        return importlib.resources.files("amplint.fixtures")
    except ModuleNotFoundError:  # pragma: no cover - a broken install
        return beside


def _holds_fixtures(folder: Path) -> bool:
    """Whether `folder` is amplint's fixtures (a rule's pair in it), not some other `fixtures/`
    (site-packages may hold the PyPI package of that name)."""
    return folder.is_dir() and any(child.name.startswith("AMP") and (child / "buggy.py").is_file() for child in folder.iterdir())


def rules_root() -> Path:
    """The folder the rules (and so the predictions) come from: `amplint.rules`."""
    import amplint.rules

    return Path(amplint.rules.__file__).resolve().parent


def mixed_sources(fixtures: str, rules: Path) -> Optional[str]:
    """Why the fixtures and the rules that judge them come from different trees, or None: an
    editable install maps `amplint.rules` to its own checkout, whatever PYTHONPATH says."""
    fixtures_parent = Path(fixtures).resolve().parent
    if fixtures_parent == rules.parent:
        return None
    return (
        f"the fixtures come from {fixtures} but the rules (the predictions) from {rules}: an editable "
        "install maps `amplint.rules` to the checkout it was installed from; install the tree you mean "
        "to verify (pip install -e PATH) to judge its fixtures by its own rules"
    )


def script_spec(
    code: str, which: str, script: Path, device: str, dtype: str, scenarios: Sequence[str], variant: Variant = AS_WRITTEN
) -> ScriptSpec:
    argv = ["--device", device, "--dtype", dtype]
    for scenario in scenarios:
        argv += ["--scenario", scenario]
    return ScriptSpec(code, which, dtype, script, tuple(argv) + variant.argv, variant)


def run_scripts(specs: Sequence[ScriptSpec], timeout: float) -> Tuple[Dict[OutputKey, ScriptRun], int]:
    """Run the scripts one after another in a driver subprocess: a ScriptRun for each (keyed
    by ScriptSpec.key), and how many processes that took.

    Each script may run for `timeout` seconds, counted from the driver's "starting" line for
    it and not counting the time the process spent waiting for a CPU (see `Watchdog`). When
    the process hangs or dies, the script it was running gets the error, and the scripts it
    had not reached run in a fresh process."""
    runs: Dict[OutputKey, ScriptRun] = {}
    pending = list(specs)
    processes = 0
    while pending:
        processes += 1
        reports, failure, running, stderr = _run_process(pending, timeout)
        for spec in pending:
            if spec.label in reports:
                runs[spec.key] = _script_run(spec, reports[spec.label])
        left = [spec for spec in pending if spec.label not in reports]
        if not left:
            break
        why = f"{failure or 'the fixture process reported nothing'} " + (
            f"while running {running}" if running else "before any script started"
        )
        if failure is None or not failure.startswith(("timed out", "could not start")):
            why += f": {_last_line(stderr)}"
        culprit = next((spec for spec in left if spec.label == running), None)
        if culprit is None:  # nothing it was running explains it (it never got going): give up on all
            for spec in left:
                runs[spec.key] = ScriptRun(error=f"{spec.label}: {why}")
            break
        runs[culprit.key] = ScriptRun(error=f"{culprit.label}: {why}")
        pending = [spec for spec in left if spec is not culprit]
    return runs, processes


def _run_process(specs: Sequence[ScriptSpec], timeout: float) -> Tuple[Dict[str, dict], Optional[str], Optional[str], str]:
    """One driver process over the scripts: (reports by label, why it failed or None, the
    label it was running last, its stderr)."""
    payload = json.dumps([{"label": spec.label, "script": str(spec.script), "argv": list(spec.argv)} for spec in specs])
    command = [sys.executable, "-m", "amplint.harness.driver", payload]
    # Workers run side by side: one intra-op thread each keeps them from fighting over cores
    # and keeps floating-point reduction order the same from run to run.
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(specs[0].script.parent),
        )
    except OSError as error:
        return {}, f"could not start the fixture process: {error}", None, ""

    watchdog = Watchdog(process.pid, timeout)
    stdout: List[str] = []
    stderr: List[str] = []
    readers = [
        threading.Thread(target=_pump, args=(process.stdout, stdout, None), daemon=True),
        threading.Thread(target=_pump, args=(process.stderr, stderr, watchdog), daemon=True),
    ]
    for reader in readers:
        reader.start()
    failure: Optional[str] = None
    try:
        while True:
            try:
                process.wait(timeout=_POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                pass
            overrun = watchdog.overrun()
            if overrun is not None:
                process.kill()
                failure = overrun
                break
    finally:
        if process.poll() is None:  # interrupted (Ctrl-C): leave no orphan process training on
            process.kill()
        process.wait()
        for reader in readers:
            reader.join(timeout=5)
    if failure is None and process.returncode != 0:
        failure = f"the fixture process exited with {process.returncode}"
    stderr_text = "".join(stderr)
    return _reports("".join(stdout)), failure, _last_started(stderr_text), stderr_text


def _pump(stream: Any, sink: List[str], watchdog: Optional["Watchdog"]) -> None:
    for line in stream:
        sink.append(line)
        if watchdog is not None and line.startswith(STARTING):
            watchdog.script_started()
    stream.close()


class Watchdog:
    """Decides when the script a fixture process is running has run too long.

    A wall-clock limit fires early on a loaded machine: with the CPUs shared by other jobs,
    a script that needs 5 s of CPU can take 50 s to finish without anything being wrong. So
    the limit counts wall time minus the time the process spent runnable but waiting for a
    CPU, which Linux reports in /proc/PID/schedstat. A hung script (blocked, sleeping or
    spinning) is not waiting for a CPU and is stopped on time; a starved one is not stopped
    until its wall time reaches WALL_LIMIT_FACTOR timeouts. Without schedstat (not Linux),
    the limit is plain wall time.
    """

    def __init__(self, pid: int, timeout: float) -> None:
        self.pid = pid
        self.timeout = timeout
        self._lock = threading.Lock()
        self._since = time.monotonic()
        self._waited_before = self._waited()

    def _waited(self) -> float:
        """Seconds the process's main thread has spent runnable but not running, so far."""
        try:
            with open(f"/proc/{self.pid}/schedstat") as stats:
                return int(stats.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    def script_started(self) -> None:
        with self._lock:
            self._since, self._waited_before = time.monotonic(), self._waited()

    def overrun(self) -> Optional[str]:
        """Why the current script must stop, or None."""
        with self._lock:
            since, waited_before = self._since, self._waited_before
        wall = time.monotonic() - since
        waited = max(0.0, self._waited() - waited_before)
        if wall - waited <= self.timeout and wall <= self.timeout * WALL_LIMIT_FACTOR:
            return None
        message = f"timed out after {self.timeout:g} s"
        if wall - waited <= self.timeout:
            message += f" ({wall:.0f} s of wall time: the machine is starved of CPU)"
        elif waited >= 1:
            message += f" (not counting {waited:.0f} s spent waiting for a CPU)"
        return message


def _script_run(spec: ScriptSpec, report: dict) -> ScriptRun:
    if report.get("error"):
        return ScriptRun(error=f"{spec.label} {report['error']}")
    printed = _final_json(report.get("stdout") or "")
    if printed is None:
        return ScriptRun(error=f"{spec.label} printed no JSON result line")
    results = printed.get("results")
    if not isinstance(results, dict):
        return ScriptRun(error=f"{spec.label}: its JSON line has no `results` object")
    history = printed.get("history")
    return ScriptRun(results=results, history=history if isinstance(history, dict) else {}, torch_version=printed.get("torch"))


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
    the predictions about other dtypes are skipped; with "all", each prediction runs at every
    dtype it is about. A prediction about other devices is skipped (`softmax` runs in float32
    under CUDA autocast: a CPU claim about it says nothing there). `unavailable` skips
    everything (no CUDA).
    """
    planned: List[Planned] = []
    for rule in rules:
        if not rule.PREDICTIONS:
            planned.append(Planned(rule, None, dtype or "-", "the rule makes no runtime prediction"))
        for prediction in rule.PREDICTIONS:
            chosen = list(prediction.dtypes) if dtype == ALL_DTYPES else [dtype or prediction.dtypes[0]]
            for each in chosen:
                skip = unavailable
                if skip is None and device not in prediction.devices:
                    skip = f"the claim is about {prediction.device} only"
                if skip is None and each not in prediction.dtypes:
                    skip = f"the claim is about {prediction.dtype} only"
                planned.append(Planned(rule, prediction, each, skip))
    return planned


def verify(
    rules: Sequence[Type[Rule]],
    device: str,
    dtype: Optional[str] = None,
    timeout: float = DEFAULT_TIMEOUT,
    unavailable: Optional[str] = None,
    root: Optional["Traversable"] = None,
    jobs: Optional[int] = None,
    variants: Sequence[Variant] = (AS_WRITTEN,),
) -> VerifyRun:
    """Run each needed fixture script once per variant (in a few worker subprocesses) and
    judge every prediction under each variant: the rows of the first variant, then the next."""
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
    outputs: Dict[OutputKey, ScriptRun] = {}
    specs: List[ScriptSpec] = []
    processes = 0
    with contextlib.ExitStack() as stack:
        for code, by_dtype in needed.items():
            for chosen, scenarios in by_dtype.items():
                for which in FIXTURE_SCRIPTS:
                    resource = root / code / f"{which}.py"
                    if not resource.is_file():
                        for variant in variants:
                            outputs[(code, chosen, which, variant.name)] = ScriptRun(error=f"no fixture fixtures/{code}/{which}.py")
                        continue
                    # A zipped install hands out a temporary copy; a normal one, the file itself.
                    script = stack.enter_context(importlib.resources.as_file(resource))
                    for variant in variants:
                        specs.append(script_spec(code, which, Path(script), device, chosen, scenarios, variant))
        batches = share_out(specs, jobs or _default_jobs(device))
        with ThreadPoolExecutor(max_workers=max(1, len(batches))) as pool:
            for runs, started_processes in pool.map(lambda batch: run_scripts(batch, timeout), batches):
                outputs.update(runs)
                processes += started_processes

    rows = [row for variant in variants for row in judge_all(planned, device, outputs, variant.name)]
    torch_version = next((run.torch_version for run in outputs.values() if run.torch_version), None)
    return VerifyRun(
        rows,
        device,
        torch_version,
        processes,
        time.monotonic() - started,
        planned,
        outputs,
        tuple(variant.name for variant in variants),
        str(root),
    )


def judge_all(
    planned: Sequence[Planned], device: str, outputs: Dict[OutputKey, ScriptRun], variant: str = AS_WRITTEN.name
) -> List[Row]:
    """A row per planned prediction, judged on what the scripts reported under `variant`."""
    return [judge_row(entry, device, outputs, variant) for entry in planned]


def judged_as_identical(run: VerifyRun, copy: str, variant: str = AS_WRITTEN.name) -> List[Row]:
    """The run's predictions judged as if both scripts of every pair were `copy`.py: what
    running each pair with buggy.py replaced by fixed.py (copy "fixed"), or the other way
    round, reports. The fixtures are seeded and single-threaded, so a script run in its
    twin's place reports what it reported as itself; on such a pair every effect must fail."""
    outputs = {(code, dtype, which, each): run.outputs[(code, dtype, copy, each)] for (code, dtype, which, each) in run.outputs}
    return judge_all(run.planned, run.device, outputs, variant)


def judge_row(entry: Planned, device: str, outputs: Dict[OutputKey, ScriptRun], variant: str = AS_WRITTEN.name) -> Row:
    """One prediction's row: its measurements, its verdict, or why there is none."""
    rule, prediction = entry.rule, entry.prediction
    if entry.skip is not None or prediction is None:
        return Row(rule.code, rule.name, prediction, device, entry.dtype, SKIPPED, entry.skip, variant=variant)
    row = Row(rule.code, rule.name, prediction, device, entry.dtype, ERROR, variant=variant)
    runs = {which: outputs[(rule.code, entry.dtype, which, variant)] for which in FIXTURE_SCRIPTS}
    row.history = {which: run.scenario_history(prediction.scenario) for which, run in runs.items()}
    problems: List[str] = []

    def note(problem: Optional[str]) -> None:
        if problem is not None and problem not in problems:
            problems.append(problem)

    for which, run in runs.items():
        value, problem = run.measurement(which, prediction.scenario, prediction.quantity)
        setattr(row, which, value)
        note(problem)
    values: Dict[str, Dict[str, float]] = {which: {} for which in FIXTURE_SCRIPTS}
    for expression in (prediction.expected, prediction.happened):
        for which, quantity in expected_quantities(expression) if expression else ():
            value, problem = runs[which].measurement(which, prediction.scenario, quantity)
            note(problem)
            if value is not None:
                values[which][quantity] = value
    if problems:
        row.reason = "; ".join(problems)
        return row
    assert row.buggy is not None and row.fixed is not None
    if prediction.expected:
        row.expected = evaluate_expected(prediction.expected, values)
    row.value, row.verdict = judge(prediction, row.buggy, row.fixed, row.expected)
    missing = mechanism_missing(prediction, values)
    if missing is not None:
        row.verdict, row.reason = NOT_REPRODUCED, missing
    return row


def share_out(specs: Sequence[ScriptSpec], workers: int) -> List[List[ScriptSpec]]:
    """The scripts in at most `workers` batches of about equal work, one process each. A
    rule's scripts stay in one batch (its buggy and fixed runs then share a process, as
    before), rules largest first onto the least loaded batch."""
    by_rule: Dict[str, List[ScriptSpec]] = {}
    for spec in specs:
        by_rule.setdefault(spec.code, []).append(spec)
    batches: List[List[ScriptSpec]] = [[] for _ in range(max(1, min(workers, len(by_rule))))]
    loads = [0.0] * len(batches)
    for code in sorted(by_rule, key=lambda code: -sum(spec.cost for spec in by_rule[code])):
        lightest = loads.index(min(loads))
        batches[lightest].extend(by_rule[code])
        loads[lightest] += sum(spec.cost for spec in by_rule[code])
    return [batch for batch in batches if batch]


def _default_jobs(device: str) -> int:
    # Two workers on a GPU: they share one device, and much of their time is start-up.
    return 2 if device == "cuda" else max(1, os.cpu_count() or 1)


__all__ = [
    "AS_WRITTEN",
    "PERTURBATIONS",
    "Variant",
    "CONFIRMED",
    "NOT_REPRODUCED",
    "ERROR",
    "SKIPPED",
    "Planned",
    "Row",
    "VerifyRun",
    "fixture_root",
    "judge_all",
    "judge_row",
    "judged_as_identical",
    "run_scripts",
    "share_out",
    "verify",
]
