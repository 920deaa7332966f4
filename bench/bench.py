#!/usr/bin/env python3
"""Benchmark amplint side by side with ruff and TorchFix, in one run, on any directory.

    python bench/bench.py DIR [DIR ...]          # a real corpus (see bench/README.md)
    python bench/bench.py                        # no corpus: 300 stdlib files + tests/cases

Sections (all by default; `--sections compare,replay` picks some):

    compare       amplint cold (-j1 and -jN) and warm, ruff `--select E,F,B` cold and warm,
                  and TorchFix with amplint on a sample: wall time, CPU time (the tool's whole
                  process tree), peak RSS, and the ratios that matter.
    replay        one in-process pass over the corpus measuring every file's CPU and where it
                  goes (read, syntax check, LibCST parse, semantic model, rules, ...), then the
                  measured per-file times replayed through amplint's scheduler for 1-16
                  workers (no spare cores needed), beside the old fixed-chunk schedule.
    isolation     what linting in a worker process costs a pre-commit-sized run (1-5 files).
    pathological  inputs that used to crash amplint or stall it (deep nesting, long chains,
                  many nested loops, a 5 MB one-line list): each file's wall and CPU time.

Results are RATIOS measured in the same run; absolute seconds depend on the machine and its
load. Runs go round-robin over the configurations and the best wall time of --repeat counts,
so a burst of load from elsewhere hits every configuration alike. This is a script people
run, never a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(REPO, "tests", "cases")
SECTIONS = ("compare", "replay", "isolation", "pathological", "lsp")
LSP_LATENCY = os.path.join(REPO, "bench", "lsp_latency.py")

# Runs one tool invocation in a fresh interpreter: its RUSAGE_CHILDREN covers that invocation
# (the tool and every process it started and waited for) and nothing else. Meanwhile it reads
# the peak RSS (VmHWM) of the tool's process and of each of its descendants (amplint's
# workers) from /proc every 0.1 s, following /proc/PID/task/PID/children; where there is no
# /proc, only the largest process's peak (ru_maxrss) is known.
_WRAPPER = r"""
import json, os, resource, subprocess, sys, time
cmd, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])

def hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None

def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except (OSError, ValueError):
        return []

start = time.perf_counter()
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, **env))
peaks = {}  # pid -> peak RSS in KiB
def sample():
    todo = [proc.pid]
    while todo:
        pid = todo.pop()
        peak = hwm(pid)
        if peak is not None:
            peaks[pid] = max(peak, peaks.get(pid, 0))
        todo.extend(children(pid))
polled = os.path.exists(f"/proc/{proc.pid}/status")
chunks = []
import threading
reader = threading.Thread(target=lambda: chunks.append(proc.stderr.read()), daemon=True)
reader.start()
while proc.poll() is None:
    if polled:
        sample()
    time.sleep(0.1)
reader.join()
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
others = [kib for pid, kib in peaks.items() if pid != proc.pid]
print(json.dumps({"wall": wall, "rc": proc.returncode, "cpu": usage.ru_utime + usage.ru_stime,
                  "rss_kib": usage.ru_maxrss / (1024 if sys.platform == "darwin" else 1),
                  "main_rss_kib": peaks.get(proc.pid), "worker_rss_kib": max(others) if others else None,
                  "workers_seen": len(others),
                  "stderr": b"".join(chunks).decode("utf-8", "replace")[-4000:]}))
"""


def log(message: str, end: str = "\n") -> None:
    print(message, end=end, file=sys.stderr, flush=True)


def run_once(cmd: Sequence[str], env: Optional[Dict[str, str]] = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _WRAPPER, json.dumps(list(cmd)), json.dumps(env or {})],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        check=True,
    )
    return json.loads(out.stdout)


# --------------------------------------------------------------------------- corpora


def python_files(roots: Sequence[str]) -> List[str]:
    found = []
    for root in roots:
        for directory, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in ("__pycache__", ".amplint_cache"))
            found.extend(os.path.join(directory, n) for n in sorted(names) if n.endswith(".py"))
    return found


def build_default_corpus(dest: str, stdlib_files: int = 300) -> str:
    """300 stdlib files (sorted, no tests) and amplint's AMP-heavy tests/cases, flattened."""
    corpus = os.path.join(dest, "stdlib+cases")
    os.makedirs(corpus)
    root = sysconfig.get_paths()["stdlib"]
    skip = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
    found = []
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
        found.extend(os.path.relpath(os.path.join(directory, n), root) for n in names if n.endswith(".py") and not n.startswith("test_"))
    for rel in sorted(found)[:stdlib_files]:
        shutil.copyfile(os.path.join(root, rel), os.path.join(corpus, "stdlib__" + rel.replace(os.sep, "__")))
    for path in sorted(glob.glob(os.path.join(CASES, "*.py"))):
        shutil.copyfile(path, os.path.join(corpus, "amp__" + os.path.basename(path)))
    return corpus


def build_sample(dest: str, files: Sequence[str], count: int) -> str:
    """Every k-th file of the corpus, flattened into one directory (no tool's excludes apply)."""
    sample = os.path.join(dest, "sample")
    os.makedirs(sample)
    step = max(1, len(files) // count) if count else 1
    for index, path in enumerate(files[::step][: count or None]):
        shutil.copyfile(path, os.path.join(sample, f"{index:05d}__{os.path.basename(path)}"))
    return sample


# --------------------------------------------------------------------------- compare


def compare(corpora: Dict[str, List[str]], tools: Dict[str, Optional[str]], jobs: int, repeat: int, sample_size: int, workdir: str, serial: bool = True) -> dict:
    """Every configuration on every corpus, round-robin over all of them, so that load from
    elsewhere hits every corpus and tool alike; the results and ratios by corpus."""
    amplint, ruff, torchfix = tools["amplint"], tools["ruff"], tools["torchfix"]
    if not ruff:
        log("bench: ruff not found (pip install ruff, or --ruff PATH): skipping ruff")
    if not torchfix:
        log("bench: TorchFix not found (pip install torchfix into a separate venv, --torchfix PATH): skipping it")
    configs: List[Tuple[str, str, List[str], Dict[str, str]]] = []  # (corpus, configuration, command, environment)
    files: Dict[str, List[str]] = {}
    # amplint runs with its modules' bytecode cached, as an installed copy has it, even where
    # PYTHONDONTWRITEBYTECODE is set (compiling them would add ~0.1 s of CPU to every run).
    python_env = {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": os.path.join(workdir, "pycache")}
    empty = os.path.join(workdir, "empty")
    os.makedirs(empty, exist_ok=True)
    with open(os.path.join(empty, "train.py"), "w", encoding="utf-8") as handle:
        handle.write("import torch\nscaler = torch.amp.GradScaler()\n")
    run_once([amplint, "check", "--isolated", "--exit-zero", "--no-cache", "-j", "1", empty], python_env)  # writes the bytecode
    for corpus, roots in corpora.items():
        files[corpus] = python_files(roots)
        amplint_cache = os.path.join(workdir, f"amplint-cache-{corpus}")
        ruff_cache = os.path.join(workdir, f"ruff-cache-{corpus}")
        base = [amplint, "check", "--isolated", "--exit-zero"]
        if serial:
            configs.append((corpus, "amplint cold -j1", [*base, "--no-cache", "-j", "1", *roots], python_env))
        configs += [
            (corpus, f"amplint cold -j{jobs}", [*base, "--no-cache", "-j", str(jobs), *roots], python_env),
            (corpus, f"amplint warm -j{jobs}", [*base, "--cache-dir", amplint_cache, "-j", str(jobs), *roots], python_env),
        ]
        if ruff:
            rbase = [ruff, "check", "--isolated", "--exit-zero", "--select", "E,F,B"]
            configs += [
                (corpus, "ruff E,F,B cold", [*rbase, "--no-cache", *roots], {}),
                (corpus, "ruff E,F,B warm", [*rbase, "--cache-dir", ruff_cache, *roots], {}),
                # Warm with little to print: what ruff's cache itself costs, without writing
                # 100,000 diagnostics.
                (corpus, "ruff F401 warm", [ruff, "check", "--isolated", "--exit-zero", "--select", "F401", "--cache-dir", ruff_cache + "-f401", *roots], {}),
            ]
        if torchfix:
            sample = build_sample(os.path.join(workdir, corpus), files[corpus], sample_size)
            configs += [
                (corpus, "amplint cold -j1 (sample)", [*base, "--no-cache", "-j", "1", sample], python_env),
                (corpus, "torchfix -j1 (sample)", [torchfix, "-j", "1", sample], {}),
            ]
    for corpus, name, cmd, env in configs:  # prime the caches; the first run of anything warms the disk cache
        if "warm" in name:
            log(f"  priming {corpus}: {name} ...")
            run_once(cmd, env)
    runs: Dict[Tuple[str, str], List[dict]] = {(corpus, name): [] for corpus, name, _, _ in configs}
    for round_ in range(repeat):
        for corpus, name, cmd, env in configs:
            log(f"  round {round_ + 1}/{repeat} {corpus}: {name} ...", end="")
            runs[corpus, name].append(run_once(cmd, env))
            log(f" {runs[corpus, name][-1]['wall']:.2f} s wall, {runs[corpus, name][-1]['cpu']:.2f} s CPU")
    report = {}
    for corpus in corpora:
        results = {}
        for _, name, cmd, _ in (c for c in configs if c[0] == corpus):
            done = runs[corpus, name]
            best = min(done, key=lambda r: r["wall"])
            mib = lambda key: max((r[key] for r in done if r.get(key) is not None), default=None)  # noqa: E731
            results[name] = {
                "cmd": cmd,
                "wall_s": best["wall"],
                "cpu_s": min(r["cpu"] for r in done),
                "peak_rss_mib": max(r["rss_kib"] for r in done) / 1024,
                "main_rss_mib": mib("main_rss_kib") / 1024 if mib("main_rss_kib") is not None else None,
                "worker_rss_mib": mib("worker_rss_kib") / 1024 if mib("worker_rss_kib") is not None else None,
                "workers_seen": max(r.get("workers_seen", 0) for r in done),
                "exit_codes": sorted({r["rc"] for r in done}),
                "stderr_tail": best["stderr"].strip().splitlines()[-1:],
            }
        get = lambda name, key: results[name][key] if name in results else None  # noqa: E731
        ratios = {
            f"speedup -j{jobs} over -j1 (wall)": _div(get("amplint cold -j1", "wall_s"), get(f"amplint cold -j{jobs}", "wall_s")),
            "amplint cold CPU / ruff cold CPU": _div(get(f"amplint cold -j{jobs}", "cpu_s"), get("ruff E,F,B cold", "cpu_s")),
            "amplint warm CPU / ruff E,F,B warm CPU": _div(get(f"amplint warm -j{jobs}", "cpu_s"), get("ruff E,F,B warm", "cpu_s")),
            "amplint warm CPU / ruff F401 warm CPU": _div(get(f"amplint warm -j{jobs}", "cpu_s"), get("ruff F401 warm", "cpu_s")),
            "TorchFix CPU / amplint CPU (sample)": _div(get("torchfix -j1 (sample)", "cpu_s"), get("amplint cold -j1 (sample)", "cpu_s")),
        }
        report[corpus] = {"files": len(files[corpus]), "jobs": jobs, "sample_files": min(len(files[corpus]), sample_size) if torchfix else 0, "results": results, "ratios": ratios}
    return report


def _div(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return a / b if a is not None and b else None


# --------------------------------------------------------------------------- replay

_PARSE_PHASE = "LibCST parse"  # of the files the engine analyses (`syntax.parse_module_exactly`)


def replay(roots: Sequence[str], save_costs: Optional[str], worst: int = 5) -> dict:
    """A whole run in this process (`Runner(isolate=False).lint_project`, as the command runs it
    but without worker processes), its CPU split by phase: each phase is the engine's or the
    project layer's own function, timed where the run calls it (nothing is re-implemented
    here). Every lint's steps on `amplint.work`'s meter, without its limit, so that a file past
    the limit shows its whole cost; the lints counted by kind (a file alone, with the
    summaries of what it imports, whole, again); the `worst` costliest files; then the
    scheduler replayed on the first lint of each file."""
    from amplint import work
    from amplint.lint import engine
    from amplint.project import ambient, link as link_module, order
    from amplint.rules import ALL_RULES
    from amplint.run import driver
    from amplint.run.driver import _BATCH_FILES, Job, Runner, plan, simulate

    clock = time.process_time
    spent: Dict[str, float] = {}
    timed = [
        (engine, "python_tree", "syntax check + CPython tree (files with AMP words)"),
        (engine, "syntax_error", "syntax verdict (files without AMP words: --syntax-errors all)"),
        (engine.evidence, "marks", "marks (files with AMP words)"),
        (engine, "parse_hazard", "parse guard"),
        (engine, "parse_module_exactly", _PARSE_PHASE),
        (engine, "analyze", "semantic model"),
        (engine, "run_rules", "rules"),
        (engine, "_locate", "positions+noqa"),
        (engine, "export_summary", "summary export"),
        (engine, "ambient_facts", "ambient facts"),
        (engine, "hazards_of", "float16 hazards (files a region's way reaches)"),
        (driver, "_syntax_only", "files without AMP words (read, words)"),
    ]
    saved = []

    def timing(module, name: str, phase: str) -> None:
        original = getattr(module, name)
        saved.append((module, name, original))

        def wrapper(*args, **kwargs):
            started = clock()
            try:
                return original(*args, **kwargs)
            finally:
                spent[phase] = spent.get(phase, 0.0) + clock() - started

        setattr(module, name, wrapper)

    for module, name, phase in timed:
        timing(module, name, phase)
    files = python_files(roots)
    by_path: Dict[str, List[Tuple[str, int, float]]] = {}  # path -> (kind, steps, CPU s) of each lint
    kinds: Dict[str, int] = {}
    unlimited = work.metered
    current: List[str] = []

    @contextlib.contextmanager
    def counted(factor: Optional[float] = 1.0, limited: bool = True):
        with unlimited(factor, limited=False) as meter:
            yield meter
        if current:
            by_path.setdefault(current[-1], []).append(("", meter.spent if meter is not None else 0, 0.0))

    lint_task = driver._lint_task

    def task(task, budget, in_process=False, memory=0):
        kind = "again" if task.path in by_path else "with summaries" if task.imported else "whole" if task.whole else "alone"
        kinds[kind] = kinds.get(kind, 0) + 1
        current.append(task.path)
        started = clock()
        try:
            return lint_task(task, budget, in_process, memory)
        finally:
            current.pop()
            lints = by_path.setdefault(task.path, [])
            steps = lints.pop()[1] if lints and lints[-1][0] == "" else 0
            lints.append((kind, steps, clock() - started))

    driver._lint_task = task
    work.metered = counted
    log(f"  one run over {len(files)} files ...")
    started = clock()
    try:
        with Runner(isolate=False) as runner:
            runner.lint_project([Job(path, tuple(rule.code for rule in ALL_RULES)) for path in files])
    finally:
        total_cpu = clock() - started
        driver._lint_task = lint_task
        work.metered = unlimited
        for module, name, original in saved:
            setattr(module, name, original)
    linting = sum(cpu for lints in by_path.values() for _, _, cpu in lints)
    spent["project: import order, links, ambient (serial)"] = total_cpu - linting
    spent["other (decode, pre-check, bookkeeping)"] = linting - sum(v for k, v in spent.items() if not k.startswith("project"))
    # The scheduler, on each file's first lint (what a cold run's workers start with).
    first = {path: lints[0] for path, lints in by_path.items()}
    rows = [(os.path.getsize(path), first[path][0] != "alone" or first[path][2] > 0.01, first[path][2]) for path in files if path in first]
    total = sum(cost for _, _, cost in rows)
    sizes = [(size, parsed) for size, parsed, _ in rows]
    cost = [c for _, _, c in rows]
    units = plan(sizes)
    speedups = {}  # beside the previous driver's pool.map over chunks of len(files) // (workers * 4)
    for workers in (1, 2, 4, 8, 16):
        chunk = max(1, len(rows) // (workers * 4))
        chunks = [list(range(i, min(i + chunk, len(rows)))) for i in range(0, len(rows), chunk)]
        speedups[workers] = {"scheduler": total / simulate(units, cost, workers), "fixed chunks (before)": total / simulate(chunks, cost, workers)} if total else {}
    home = os.path.commonpath([os.path.dirname(os.path.abspath(r)) for r in roots]) if roots else ""
    named = lambda path: os.path.relpath(path, home) if home else path  # noqa: E731
    # A file linted more than once counts with its costliest lint (each has the limit to itself).
    by_file = [(named(path), *max(((n, c, k) for k, n, c in lints), key=lambda row: (row[0], row[1]))) for path, lints in by_path.items()]
    costliest = sorted(by_file, key=lambda row: (-row[1], -row[2]))[:worst]
    slowest = sorted(by_file, key=lambda row: -row[2])[:worst]
    ranked = sorted(cost, reverse=True)
    if save_costs:
        with open(save_costs, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "measured": "amplint's first lint of each file, in one process, CPU seconds per file (time.process_time)",
                    "corpus": " ".join(os.path.basename(os.path.abspath(r)) for r in roots),
                    "files": [[size, parsed, round(seconds, 5)] for size, parsed, seconds in rows],
                },
                handle,
                separators=(",", ":"),
            )
    return {
        "files": len(files),
        "lints": kinds,
        "lint_cpu_s": {kind: sum(cpu for lints in by_path.values() for k, _, cpu in lints if k == kind) for kind in kinds},
        "phase_seconds": spent,
        "total_cpu_s": total_cpu,
        "max_file_cpu_s": ranked[0] if ranked else 0.0,
        "file_step_limit": work.FILE_STEPS,
        "over_limit": sum(1 for row in by_file if row[1] > work.FILE_STEPS),
        "worst_by_steps": [{"file": f, "steps": n, "cpu_s": c, "phase": k} for f, n, c, k in costliest],
        "worst_by_cpu": [{"file": f, "steps": n, "cpu_s": c, "phase": k} for f, n, c, k in slowest],
        "top100_share": sum(ranked[:100]) / total if total else 0.0,
        "units": len(units),
        "batch_files": _BATCH_FILES,
        "speedups": speedups,
    }


# --------------------------------------------------------------------------- isolation


_ISOLATION_RUN = """
import json, sys
sys.path.insert(0, {repo!r})
from amplint.run.driver import Job, Runner
from amplint.rules import ALL_RULES
codes = tuple(rule.code for rule in ALL_RULES)
with Runner(workers={jobs}, isolate={isolate}) as runner:
    runner.lint([Job(path, codes) for path in json.loads(sys.argv[1])])
"""


def isolation(roots: Sequence[str], jobs: int, rounds: int) -> dict:
    """A pre-commit-sized run (1-5 files) in a fresh interpreter, as the command runs it: the
    files linted in worker processes, and in the interpreter itself (unprotected). Both pay
    the same start-up and the same first-use costs, so the difference is what isolation costs."""
    sys.path.insert(0, REPO)
    from amplint.lint import engine
    from amplint.rules import ALL_RULES

    files = python_files(roots)
    parsed = [p for p in files if engine.might_use_amp(open(p, encoding="utf-8", errors="replace").read(), ALL_RULES)]
    parsed.sort(key=os.path.getsize)
    middle = parsed[len(parsed) // 2 : len(parsed) // 2 + 5] if len(parsed) >= 5 else files[:5]
    rows = {}
    for count in range(1, len(middle) + 1):
        paths = json.dumps(middle[:count])
        samples: Dict[bool, List[dict]] = {True: [], False: []}
        for _ in range(rounds):
            for isolate in (False, True):
                code = _ISOLATION_RUN.format(repo=REPO, jobs=jobs, isolate=isolate)
                samples[isolate].append(run_once([sys.executable, "-c", code, paths]))
        median = lambda isolate, key: statistics.median(r[key] for r in samples[isolate])  # noqa: E731
        rows[count] = {"in_process": (median(False, "wall"), median(False, "cpu")), "isolated": (median(True, "wall"), median(True, "cpu"))}
        log(f"  {count} file(s): in-process {rows[count]['in_process'][0] * 1000:.0f} ms wall / {rows[count]['in_process'][1] * 1000:.0f} ms CPU, "
            f"isolated {rows[count]['isolated'][0] * 1000:.0f} ms / {rows[count]['isolated'][1] * 1000:.0f} ms")
    return {"files": [os.path.basename(p) for p in middle], "sizes": [os.path.getsize(p) for p in middle], "jobs": jobs, "rounds": rounds, "rows": rows}


# --------------------------------------------------------------------------- pathological


def _nested_loops(depth: int) -> str:
    lines = ["import torch", "", "scaler = torch.amp.GradScaler('cuda')", "", "def train(model, opt, data, flags):"]
    indent = "    "
    for level in range(depth):
        lines.append(f"{indent}for x{level} in data:")
        indent += "    "
        lines.append(f"{indent}if flags[{level}]:")
        lines.append(f"{indent}    with torch.autocast('cuda', dtype=torch.float16):")
        lines.append(f"{indent}        loss = model(x{level})")
        lines.append(f"{indent}    scaler.scale(loss).backward()")
        lines.append(f"{indent}else:")
        lines.append(f"{indent}    loss.backward()")
    lines.append(f"{indent}scaler.step(opt)")
    lines.append(f"{indent}scaler.update()")
    return "\n".join(lines) + "\n"


PATHOLOGICAL: Dict[str, Callable[[], str]] = {
    "and-chain, 10,000 terms (crashed LibCST)": lambda: "import torch  # autocast\nx = a" + " and a" * 10000 + "\n",
    "1,500 nested brackets (crashed LibCST)": lambda: "import torch  # autocast\nx = " + "[" * 1500 + "]" * 1500 + "\n",
    "`not` x 20,000 (crashed LibCST)": lambda: "import torch  # autocast\nx = " + "not " * 20000 + "a\n",
    "elif x 10,000 (crashes LibCST; not one line)": lambda: "import torch  # autocast\nif a: pass\n" + "elif a: pass\n" * 10000,
    "`a + a ...` 5,000 terms, one line": lambda: "import torch  # autocast\nx = a" + " + a" * 5000 + "\n",
    "`a + a ...` 5,000 terms, one per line": lambda: "import torch  # autocast\nx = (a\n" + " + a\n" * 5000 + ")\n",
    "attribute chain, 3,000": lambda: "import torch  # autocast\nx = a" + ".b" * 3000 + "\n",
    "call chain, 2,500": lambda: "import torch  # autocast\nx = f" + "()" * 2500 + "\n",
    "11 nested loops/ifs around AMP calls": lambda: _nested_loops(11),
    "5 MB one-line list, mentions autocast": lambda: "import torch  # autocast\nx = [" + "1.5, " * 1_000_000 + "]\n",
    "reference: fixtures/AMP003/buggy.py": lambda: open(os.path.join(REPO, "fixtures", "AMP003", "buggy.py")).read(),
}


def pathological(amplint: str, workdir: str) -> dict:
    directory = os.path.join(workdir, "pathological")
    os.makedirs(directory)
    rows = {}
    baseline = os.path.join(directory, "empty.py")
    open(baseline, "w").close()
    start = run_once([amplint, "--isolated", "--no-cache", "-j", "1", baseline])
    for index, (label, make) in enumerate(PATHOLOGICAL.items()):
        path = os.path.join(directory, f"case{index:02d}.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(make())
        log(f"  {label} ...", end="")
        result = run_once([amplint, "--isolated", "--no-cache", "-j", "1", "--concise", path])
        errors = [line.split(": ", 3)[-1] for line in result["stderr"].splitlines() if line.startswith("amplint: error:")]
        rows[label] = {"bytes": os.path.getsize(path), "wall_s": result["wall"], "cpu_s": result["cpu"], "rc": result["rc"], "error": errors[0] if errors else ""}
        log(f" {result['wall']:.2f} s wall, {result['cpu']:.2f} s CPU, exit {result['rc']}")
    return {"startup": {"wall_s": start["wall"], "cpu_s": start["cpu"]}, "rows": rows}


# --------------------------------------------------------------------------- lsp


def lsp_latency(script: str = LSP_LATENCY) -> dict:
    """The editor latency, as bench/lsp_latency.py measures it (`--json`: median_ms,
    typing_median_ms), where that script exists; a row saying it does not, where not."""
    if not os.path.exists(script):
        return {"missing": f"{os.path.relpath(script, REPO)} not present"}
    out = subprocess.run([sys.executable, script, "--json"], capture_output=True, text=True, check=False)
    try:
        result = json.loads(out.stdout)
    except ValueError:
        return {"missing": f"{os.path.relpath(script, REPO)} failed (exit {out.returncode}): {out.stderr.strip()[-300:]}"}
    return result if isinstance(result, dict) else {"missing": "no result"}


# --------------------------------------------------------------------------- output


def _table(rows: List[List[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _mib(value: Optional[float]) -> str:
    return f"{value:.0f}" if value is not None else "?"


def print_summary(report: dict) -> None:
    """The one table issue 27 asks for, a column per corpus: the cold and warm ratios to ruff
    (with the targets), the peak memory of amplint's process and of its largest worker
    (beside the limit each worker has), the costliest file named with its steps and CPU,
    where the CPU goes, and the editor latency (one measurement, not per corpus)."""
    compared, replayed = report.get("compare") or {}, report.get("replay") or {}
    corpora = list(dict.fromkeys([*compared, *replayed]))
    lsp = report.get("lsp")
    if not corpora and lsp is None:
        return
    print("\n== summary (CPU = user+sys of the whole process tree; ratios measured in this one run)")
    columns = corpora or ["-"]
    rows: List[List[str]] = [["", *columns]]

    def row(label: str, value: Callable[[str], str]) -> None:
        rows.append([label, *(value(corpus) for corpus in columns)])

    def measured(corpus: str, name: str) -> Optional[dict]:
        c = compared.get(corpus)
        return c["results"].get(name.format(jobs=c["jobs"])) if c else None

    def ratio(corpus: str, key: str) -> str:
        value = (compared.get(corpus) or {}).get("ratios", {}).get(key)
        return f"{value:.2f}x" if value is not None else "-"

    def cpu(corpus: str, name: str, digits: int) -> str:
        found = measured(corpus, name)
        return f"{found['cpu_s']:.{digits}f}" if found else "-"

    if corpora:
        row("files", lambda c: str((compared.get(c) or replayed.get(c))["files"]))
    if compared:
        row("cold: amplint CPU s", lambda c: cpu(c, "amplint cold -j{jobs}", 1))
        row("cold: ruff E,F,B CPU s", lambda c: cpu(c, "ruff E,F,B cold", 1))
        row("cold ratio (target <= 8x)", lambda c: ratio(c, "amplint cold CPU / ruff cold CPU"))
        row("warm: amplint CPU s", lambda c: cpu(c, "amplint warm -j{jobs}", 2))
        row("warm: ruff E,F,B CPU s", lambda c: cpu(c, "ruff E,F,B warm", 2))
        row("warm ratio (target <= 0.25x)", lambda c: ratio(c, "amplint warm CPU / ruff E,F,B warm CPU"))

        def rss(c: str) -> str:
            cold = measured(c, "amplint cold -j{jobs}")
            return f"{_mib(cold['main_rss_mib'])} / {_mib(cold['worker_rss_mib'])}" if cold else "-"

        row("peak RSS MiB: main / largest worker", rss)
        row("  worker memory limit (--file-memory)", lambda c: f"+{_default_memory()} MiB")
    if replayed:

        def worst(c: str, field: str) -> str:
            r = replayed.get(c)
            if not r or not r["worst_by_steps"]:
                return "-"
            top = r["worst_by_steps"][0]
            if field == "file":
                return _short(top["file"], (report.get("corpus") or {}).get(c, ())) + (f" ({top['phase']})" if top["phase"] not in ("alone", "") else "")
            if field == "steps":
                return f"{top['steps']:,} of {r['file_step_limit']:,} ({100 * top['steps'] / r['file_step_limit']:.0f}%)"
            return f"{top['cpu_s']:.2f}"

        row("costliest file", lambda c: worst(c, "file"))
        row("  its steps (the file limit)", lambda c: worst(c, "steps"))
        row("  its CPU s", lambda c: worst(c, "cpu"))
        row("files over the step limit", lambda c: str(replayed[c]["over_limit"]) if c in replayed else "-")
        shares: Dict[str, Dict[str, float]] = {}
        for c, r in replayed.items():
            total = sum(r["phase_seconds"].values()) or 1.0
            shares[c] = {phase: seconds / total for phase, seconds in r["phase_seconds"].items()}
        phases = sorted({p for s in shares.values() for p in s}, key=lambda p: -max(s.get(p, 0.0) for s in shares.values()))
        row("CPU in one process, s", lambda c: f"{sum(replayed[c]['phase_seconds'].values()):.1f}" if c in replayed else "-")
        for phase in phases:
            if max(s.get(phase, 0.0) for s in shares.values()) >= 0.01:
                row(f"  {phase}", lambda c, phase=phase: f"{100 * shares[c].get(phase, 0.0):.0f}%" if c in shares else "-")
        if compared:
            # What the cold target leaves once LibCST has parsed the analysed files (issue 38
            # keeps LibCST as their parser): the rest of the analysis must fit in it.
            def floor(c: str, field: str) -> str:
                r, ruff = replayed.get(c), measured(c, "ruff E,F,B cold")
                if not r or not ruff or not ruff["cpu_s"] or _PARSE_PHASE not in r["phase_seconds"]:
                    return "-"
                parse, total = r["phase_seconds"][_PARSE_PHASE], sum(r["phase_seconds"].values())
                if field == "ratio":
                    return f"{parse / ruff['cpu_s']:.1f}x"
                return f"{8 * ruff['cpu_s'] - parse:.1f} ({total - parse:.1f})"

            row("LibCST parse alone / ruff cold CPU", lambda c: floor(c, "ratio"))
            row("  8x ruff less the parse, s (the rest now)", lambda c: floor(c, "left"))
    if lsp is not None:
        # One measurement of the server: shown once, in the first column.
        def once(text: str) -> Callable[[str], str]:
            return lambda c: text if c == columns[0] else ""

        if "missing" in lsp:
            row("editor latency", once(lsp["missing"]))
        else:
            row("editor: edit -> diagnostics, median ms (target <= 300)", once(f"{lsp.get('median_ms', float('nan')):.0f}"))
            row("  p90 ms", once(f"{lsp.get('p90_ms', float('nan')):.0f}"))
            if lsp.get("cpu_ms_per_edit") is not None:
                row("  server CPU per edit, ms", once(f"{lsp['cpu_ms_per_edit']:.0f}"))
            if lsp.get("typing_median_ms") is not None:
                row("  last keystroke of a burst -> diagnostics, ms", once(f"{lsp['typing_median_ms']:.0f}"))
    print(_table(rows))
    if compared:
        print("  cold: amplint --no-cache -jN beside ruff check --select E,F,B --no-cache; warm: both again on their filled caches")
    for corpus in corpora:
        r = replayed.get(corpus)
        if not r:
            continue
        print(f"\n  {corpus}, costliest files (limit {r['file_step_limit']:,} steps a file; {r['over_limit']} over it):")
        for found in r["worst_by_steps"]:
            print(f"    {found['steps']:>10,} steps  {found['cpu_s']:6.2f} s CPU  {found['file']}" + (f" ({found['phase']})" if found["phase"] not in ("alone", "") else ""))
        slow = [found for found in r["worst_by_cpu"] if found not in r["worst_by_steps"]][:3]
        for found in slow:
            print(f"    {found['steps']:>10,} steps  {found['cpu_s']:6.2f} s CPU  {found['file']}  (slowest by CPU)")


def _short(path: str, roots: Sequence[str]) -> str:
    """`path` below the corpus directory it is in (the repository and the file)."""
    for root in roots:
        relative = os.path.relpath(path, root)
        if not relative.startswith(".."):
            return relative
    return path


def _default_memory() -> int:
    try:
        from amplint.run.driver import DEFAULT_MEMORY
    except ImportError:  # another build's amplint
        return 0
    return DEFAULT_MEMORY


def print_report(report: dict) -> None:
    env = report["environment"]
    print(f"machine: {env['machine']}, {env['cpus']} CPUs, load average {env['load']}, Python {env['python']}")
    for name, roots in report["corpus"].items():
        print(f"corpus {name}: {' '.join(roots)}")
    for tool, version in env["tools"].items():
        print(f"{tool}: {version or 'not found'}")
    for corpus, compared in (report.get("compare") or {}).items():
        print(f"\n== {corpus}, side by side: {compared['files']} files, best wall of {report['repeat']}, CPU = user+sys of the tool's process tree")
        rows = [["tool", "wall s", "CPU s", "peak RSS MiB", "main", "largest worker", "exit"]]
        for name, r in compared["results"].items():
            rows.append([name, f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}", f"{r['peak_rss_mib']:.0f}", _mib(r["main_rss_mib"]),
                         _mib(r["worker_rss_mib"]) if r["workers_seen"] else "-", ",".join(map(str, r["exit_codes"]))])
        print(_table(rows))
        if compared["sample_files"]:
            print(f"(sample: {compared['sample_files']} files of the corpus, evenly spaced)")
        for name, value in compared["ratios"].items():
            if value is not None:
                print(f"  {name}: {value:.2f}x")
    for corpus, replayed in (report.get("replay") or {}).items():
        spent = replayed["phase_seconds"]
        total = sum(spent.values())
        lints = ", ".join(f"{count} {kind}" for kind, count in sorted(replayed["lints"].items()))
        print(f"\n== {corpus}, where amplint's CPU goes (one process, {replayed['files']} files; lints: {lints})")
        rows = [["phase", "CPU s", "share"]]
        for phase, seconds in spent.items():
            rows.append([phase, f"{seconds:.2f}", f"{100 * seconds / total:.1f}%"])
        rows.append(["total", f"{total:.2f}", "100%"])
        print(_table(rows))
        print(f"  costliest file: {replayed['max_file_cpu_s']:.2f} s; the 100 costliest files: {100 * replayed['top100_share']:.0f}% of the first lints")
        print(f"\n== {corpus}, measured per-file CPU replayed through the scheduler ({replayed['units']} units): speedup over one worker")
        rows = [["workers", "scheduler", "fixed chunks (before)"]]
        for workers, s in replayed["speedups"].items():
            rows.append([str(workers), f"{s['scheduler']:.2f}x", f"{s['fixed chunks (before)']:.2f}x"])
        print(_table(rows))
    isolated = report.get("isolation")
    if isolated:
        print(f"\n== isolation on a pre-commit-sized run (-j{isolated['jobs']}, median of {isolated['rounds']}, fresh interpreter each): "
              "linting in worker processes vs in the reporting process")
        rows = [["files", "in-process wall ms", "isolated wall ms", "in-process CPU ms", "isolated CPU ms", "CPU overhead ms"]]
        for count, r in isolated["rows"].items():
            (iw, ic), (ow, oc) = r["in_process"], r["isolated"]
            rows.append([str(count), f"{iw * 1000:.0f}", f"{ow * 1000:.0f}", f"{ic * 1000:.0f}", f"{oc * 1000:.0f}", f"{(oc - ic) * 1000:+.0f}"])
        print(_table(rows))
    patho = report.get("pathological")
    if patho:
        start = patho["startup"]
        print(f"\n== pathological inputs, one file each, -j1, default budget (an empty file: {start['wall_s']:.2f} s wall, {start['cpu_s']:.2f} s CPU)")
        rows = [["input", "KiB", "wall s", "CPU s", "exit", "reported"]]
        for label, r in patho["rows"].items():
            rows.append([label, f"{r['bytes'] / 1024:.0f}", f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}", str(r["rc"]), r["error"][:70]])
        print(_table(rows))
    print_summary(report)


def _which(name: str, given: Optional[str]) -> Optional[str]:
    if given:
        return given if os.path.exists(given) else shutil.which(given)
    return shutil.which(name)


def _version(executable: Optional[str]) -> Optional[str]:
    if not executable:
        return None
    try:
        out = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=60)
        return (out.stdout.strip() or out.stderr.strip()).splitlines()[-1] + f" ({executable})"
    except (OSError, subprocess.SubprocessError, IndexError):
        return executable


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="*", metavar="DIR", help="directories to benchmark on, one corpus (default: 300 stdlib files + tests/cases)")
    parser.add_argument("--corpus", action="append", default=[], metavar="NAME=DIR[,DIR...]", help="a named corpus (repeatable; e.g. the sets bench/corpus.py assembles): every section runs on each, in one run")
    parser.add_argument("--no-serial", dest="serial", action="store_false", help="compare: leave out the amplint cold -j1 row (it takes the longest)")
    parser.add_argument("--worst", type=int, default=5, metavar="N", help="replay: the N costliest files shown (default: 5)")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N", help="the parallel setting (default: all CPUs)")
    parser.add_argument("--repeat", type=int, default=3, metavar="N", help="runs per configuration; the best wall time counts (default: 3)")
    parser.add_argument("--sample", type=int, default=100, metavar="N", help="files in the TorchFix sample (default: 100; TorchFix takes ~1 s of CPU a file)")
    parser.add_argument("--isolation-rounds", type=int, default=7, metavar="N", help="rounds of the isolation measurement (default: 7)")
    parser.add_argument("--amplint", metavar="PATH", help="amplint executable (default: on PATH)")
    parser.add_argument("--ruff", metavar="PATH", help="ruff executable (default: on PATH)")
    parser.add_argument("--torchfix", metavar="PATH", help="TorchFix executable (default: on PATH)")
    parser.add_argument("--save-costs", metavar="FILE", help="replay: write the measured per-file costs (tests/data/corpus_costs.json's format)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    parser.add_argument("--save", metavar="FILE", help="also write the JSON results to FILE")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown section(s): {', '.join(unknown)}")
    corpora: Dict[str, List[str]] = {}
    for spec in args.corpus:
        name, sep, dirs = spec.partition("=")
        if not sep or not name or not dirs:
            parser.error(f"--corpus wants NAME=DIR[,DIR...], not {spec!r}")
        corpora[name] = [os.path.abspath(d) for d in dirs.split(",")]
        missing = [d for d in corpora[name] if not os.path.isdir(d)]
        if missing:
            parser.error(f"--corpus {name}: no directory {missing[0]} (bench/corpus.py assembles the corpora)")
    if args.save_costs and len(corpora) + bool(args.roots) > 1:
        parser.error("--save-costs measures one corpus: give one")
    tools = {"amplint": _which("amplint", args.amplint), "ruff": _which("ruff", args.ruff), "torchfix": _which("torchfix", args.torchfix)}
    if not tools["amplint"]:
        parser.error("amplint executable not found: pip install -e . or pass --amplint PATH")
    sys.path.insert(0, REPO)  # the in-process sections measure this checkout

    workdir = tempfile.mkdtemp(prefix="amplint-bench-")
    try:
        if args.roots or not corpora:
            roots = [os.path.abspath(r) for r in args.roots] or [build_default_corpus(workdir)]
            corpora = {"corpus" if args.roots else "stdlib+cases": roots, **corpora}
        report: Dict[str, Any] = {
            "environment": {
                "machine": f"{platform.system()} {platform.machine()}",
                "cpus": os.cpu_count(),
                "load": " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?",
                "python": platform.python_version(),
                "tools": {name: _version(path) for name, path in tools.items()},
            },
            "corpus": corpora,
            "repeat": args.repeat,
        }
        if "compare" in sections:
            log("[compare]")
            report["compare"] = compare(corpora, tools, args.jobs, args.repeat, args.sample, workdir, args.serial)
        if "replay" in sections:
            report["replay"] = {}
            for name, roots in corpora.items():
                log(f"[replay {name}]")
                report["replay"][name] = replay(roots, args.save_costs, args.worst)
        if "isolation" in sections:
            log("[isolation]")
            report["isolation"] = isolation([r for roots in corpora.values() for r in roots], args.jobs, args.isolation_rounds)
        if "pathological" in sections:
            log("[pathological]")
            report["pathological"] = pathological(tools["amplint"], workdir)
        if "lsp" in sections:
            log("[lsp]")
            report["lsp"] = lsp_latency()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.save:
        with open(args.save, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
