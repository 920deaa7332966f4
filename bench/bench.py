#!/usr/bin/env python3
"""Benchmark amplint against TorchFix (the closest peer: also LibCST) on one machine, one file set.

Results are RATIOS measured in the same run (absolute seconds depend on the machine):

    speed:  TorchFix wall time / amplint wall time   (> 1: amplint is faster)
    memory: amplint peak RSS / TorchFix peak RSS      (< 1: amplint uses less)

Scenarios (both by default):

    mixed  a "repo with few AMP files": the first --stdlib-files .py files of the Python
           standard library (sorted, test directories left out) plus amplint's own
           tests/cases/*.py (AMP-heavy training scripts).
    amp    AMP-heavy files only: tests/cases/*.py replicated to --amp-files files. Every file
           passes both tools' text pre-checks, so this measures parsing and analysis.

`--corpus DIR` benchmarks any directory of .py files instead (one scenario, "custom").

Each tool invocation runs inside a fresh `python -c` wrapper that starts the tool with
subprocess and then reads resource.getrusage(RUSAGE_CHILDREN).ru_maxrss, so peak RSS of one
invocation never mixes with another's. Note that ru_maxrss is the peak of the largest single
process (the main process or one worker), not the sum over a process pool.

torch is not needed. TorchFix is not an amplint dependency: install it into a throwaway venv
(see bench/README.md) and pass `--torchfix /tmp/bench-venv/bin/torchfix`. Without it the
script still reports amplint's own numbers.

This is a script people run, never a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(REPO, "tests", "cases")
INSTALL_HINT = """\
TorchFix not found. To compare against it, install it into a throwaway venv (never into
amplint's dependencies) and pass its executable:

    python -m venv /tmp/bench-venv
    /tmp/bench-venv/bin/pip install torchfix==0.7.0 -e {repo}
    python bench/bench.py --torchfix /tmp/bench-venv/bin/torchfix

Reporting amplint's own numbers only."""

# Runs one tool invocation in a fresh interpreter: its RUSAGE_CHILDREN covers that invocation only.
_WRAPPER = r"""
import json, resource, subprocess, sys, time
cmd = json.loads(sys.argv[1])
start = time.perf_counter()
proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
rss_kib = usage.ru_maxrss / (1024 if sys.platform == "darwin" else 1)
print(json.dumps({"wall": wall, "rc": proc.returncode, "rss_kib": rss_kib,
                  "cpu": usage.ru_utime + usage.ru_stime,
                  "stderr": proc.stderr.decode("utf-8", "replace")[-4000:]}))
"""

# TorchFix's text pre-check (torchfix/__main__.py): only files mentioning "torch" are parsed.
_TORCHFIX_MARKER = "torch"


def _amplint_precheck():
    """amplint's own pre-check, to report how many files it parses (it changes as amplint does)."""
    sys.path.insert(0, REPO)
    try:
        from amplint.engine import might_use_amp

        return might_use_amp
    except ImportError:  # amplint not importable here: no count
        return None
    finally:
        sys.path.remove(REPO)


# --------------------------------------------------------------------------- corpora


def _stdlib_files(limit: int) -> List[str]:
    """The first `limit` .py files of the standard library, sorted by relative path, no tests."""
    root = sysconfig.get_paths()["stdlib"]
    skip_dirs = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
    found = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip_dirs and not d.startswith("."))
        for name in files:
            if name.endswith(".py") and not name.startswith("test_"):
                found.append(os.path.relpath(os.path.join(directory, name), root))
    found.sort()
    return [os.path.join(root, rel) for rel in found[:limit]]


def _case_files() -> List[str]:
    files = sorted(glob.glob(os.path.join(CASES, "*.py")))
    if not files:
        sys.exit(f"bench: no AMP-heavy cases found in {CASES}")
    return files


def _flat_name(root: str, path: str) -> str:
    # Flattened (no directories), so no tool's default excludes (`venv/`, `build/`) drop a file.
    return os.path.relpath(path, root).replace(os.sep, "__")


def build_mixed(dest: str, stdlib_files: int) -> str:
    corpus = os.path.join(dest, "mixed")
    os.makedirs(corpus)
    stdlib_root = sysconfig.get_paths()["stdlib"]
    for path in _stdlib_files(stdlib_files):
        shutil.copyfile(path, os.path.join(corpus, "stdlib__" + _flat_name(stdlib_root, path)))
    for path in _case_files():
        shutil.copyfile(path, os.path.join(corpus, "amp__" + os.path.basename(path)))
    return corpus


def build_amp(dest: str, count: int) -> str:
    corpus = os.path.join(dest, "amp")
    os.makedirs(corpus)
    cases = _case_files()
    for index in range(count):
        case = cases[index % len(cases)]
        shutil.copyfile(case, os.path.join(corpus, f"amp{index:04d}__{os.path.basename(case)}"))
    return corpus


def corpus_stats(corpus: str) -> Dict[str, int]:
    files = [os.path.join(d, f) for d, _, names in os.walk(corpus) for f in names if f.endswith(".py")]
    might_use_amp = _amplint_precheck()
    amplint_candidates = torchfix_candidates = lines = size = 0
    for path in files:
        with open(path, "rb") as handle:
            data = handle.read()
        text = data.decode("utf-8", "replace")
        size += len(data)
        lines += text.count("\n")
        amplint_candidates += bool(might_use_amp and might_use_amp(text))
        torchfix_candidates += _TORCHFIX_MARKER in text
    return {
        "files": len(files),
        "lines": lines,
        "bytes": size,
        "amplint_parses": amplint_candidates if might_use_amp else None,
        "torchfix_parses": torchfix_candidates,
    }


# --------------------------------------------------------------------------- measuring


def _run_once(cmd: Sequence[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _WRAPPER, json.dumps(list(cmd))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        check=True,
    )
    return json.loads(out.stdout)


def summarize(name: str, cmd: Sequence[str], files: int, runs: List[dict], ok_codes: Sequence[int]) -> dict:
    bad = [r for r in runs if r["rc"] not in ok_codes]
    best = min(runs, key=lambda r: r["wall"])
    result = {
        "tool": name,
        "cmd": list(cmd),
        "wall_s": best["wall"],
        "wall_all_s": [r["wall"] for r in runs],
        "files_per_s": files / best["wall"] if best["wall"] else None,
        "peak_rss_mib": max(r["rss_kib"] for r in runs) / 1024,
        "cpu_s": min(r["cpu"] for r in runs),
        "exit_codes": sorted({r["rc"] for r in runs}),
        "stderr_tail": best["stderr"].strip().splitlines()[-1:] if best["stderr"].strip() else [],
    }
    if bad:
        result["warning"] = f"unexpected exit code {bad[0]['rc']}: {bad[0]['stderr'][-800:]}"
    return result


def _interpreter_of(executable: str) -> Optional[str]:
    """The Python a console script runs under (its shebang), to report its libcst version."""
    try:
        with open(executable, "rb") as handle:
            first = handle.readline().decode("utf-8", "replace").strip()
    except OSError:
        return None
    if first.startswith("#!") and "python" in first:
        return first[2:].strip().split()[0]
    return None


def _version_info(executable: str, package: str) -> Dict[str, Optional[str]]:
    python = _interpreter_of(executable)
    info: Dict[str, Optional[str]] = {"executable": executable, "python": python, "libcst": None, package: None}
    if python and os.path.exists(python):
        code = (
            "import importlib.metadata as m, json, sys\n"
            "def v(p):\n"
            "    try: return m.version(p)\n"
            "    except Exception: return None\n"
            f"print(json.dumps({{'libcst': v('libcst'), {package!r}: v({package!r}), 'py': sys.version.split()[0]}}))"
        )
        try:
            out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
            info.update(json.loads(out.stdout))
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
    return info


def bench_scenario(
    label: str, corpus: str, amplint: str, torchfix: Optional[str], jobs: int, repeat: int
) -> dict:
    stats = corpus_stats(corpus)
    files = stats["files"]
    print(f"\n[{label}] {corpus}: {files} files, {stats['lines']} lines; pre-check passes: "
          f"amplint {stats['amplint_parses']}, TorchFix {stats['torchfix_parses']}", file=sys.stderr)
    # amplint exits 1 on findings; TorchFix exits 1 when a file fails to process.
    configs: List[Tuple[str, List[str], Tuple[int, ...]]] = [
        ("amplint -j1", [amplint, "check", "--isolated", "-j", "1", corpus], (0, 1)),
        (f"amplint -j{jobs}", [amplint, "check", "--isolated", "-j", str(jobs), corpus], (0, 1)),
    ]
    if torchfix:
        configs += [
            ("torchfix -j1", [torchfix, "-j", "1", corpus], (0,)),
            (f"torchfix -j{jobs}", [torchfix, "-j", str(jobs), corpus], (0,)),
        ]
    # Round-robin (a, b, c, d, a, b, ...): a burst of load from elsewhere on the machine then
    # slows every configuration alike instead of one, and best-of-N filters the rest.
    runs: Dict[str, List[dict]] = {name: [] for name, _, _ in configs}
    for round_ in range(repeat):
        for name, cmd, _ in configs:
            print(f"  round {round_ + 1}/{repeat} {name} ...", end="", file=sys.stderr, flush=True)
            runs[name].append(_run_once(cmd))
            print(f" {runs[name][-1]['wall']:.2f}s", file=sys.stderr)
    results = [summarize(name, cmd, files, runs[name], ok) for name, cmd, ok in configs]

    ratios = {}
    by_name = {r["tool"]: r for r in results}
    if torchfix:
        for suffix in ("-j1", f"-j{jobs}"):
            a, t = by_name[f"amplint {suffix}"], by_name[f"torchfix {suffix}"]
            ratios[suffix.lstrip("-")] = {
                "speed_torchfix_over_amplint": t["wall_s"] / a["wall_s"],
                "cpu_torchfix_over_amplint": t["cpu_s"] / a["cpu_s"],
                "rss_amplint_over_torchfix": a["peak_rss_mib"] / t["peak_rss_mib"],
            }
    return {"scenario": label, "corpus": corpus, "stats": stats, "results": results, "ratios": ratios}


# --------------------------------------------------------------------------- in-process profile


def profile_amp_files(rounds: int) -> Optional[dict]:
    """Per AMP-heavy file, in this process: where amplint's time goes (parse vs analysis)."""
    try:
        import ast

        import libcst as cst

        from amplint import engine
        from amplint.rules import ALL_RULES
        from amplint.semantic import analyze
    except ImportError as error:
        print(f"bench: skipping the in-process profile ({error})", file=sys.stderr)
        return None

    clock = time.perf_counter
    phases = ["read+precheck", "ast.parse", "libcst.parse_module", "analyze", "rules", "locate"]
    rule_codes = [rule.code for rule in ALL_RULES]
    totals = {phase: 0.0 for phase in phases}
    per_rule = {code: 0.0 for code in rule_codes}
    files = _case_files()
    for path in files:
        best = {phase: float("inf") for phase in phases}
        best_rule = {code: float("inf") for code in rule_codes}
        for _ in range(rounds):
            t0 = clock()
            with open(path, "rb") as handle:
                source = handle.read().decode("utf-8")
            engine.might_use_amp(source)
            t1 = clock()
            ast.parse(source)
            t2 = clock()
            module = cst.parse_module(source)
            t3 = clock()
            facts = analyze(module)
            t4 = clock()
            reports = []
            seen = set()
            for rule in ALL_RULES:
                r0 = clock()
                for report in rule().check(facts):
                    key = (rule.code, id(report.node))
                    if key not in seen:
                        seen.add(key)
                        reports.append((rule, report.node, report.message))
                best_rule[rule.code] = min(best_rule[rule.code], clock() - r0)
            t5 = clock()
            engine._locate(module, reports, path, source)
            t6 = clock()
            for phase, spent in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
                best[phase] = min(best[phase], spent)
        for phase in phases:
            totals[phase] += best[phase]
        for code in rule_codes:
            per_rule[code] += best_rule[code]
    count = len(files)
    return {
        "files": count,
        "lines_per_file": sum(open(p, "rb").read().count(b"\n") for p in files) / count,
        "rounds": rounds,
        "ms_per_file": {phase: 1000 * totals[phase] / count for phase in phases},
        "rules_ms_per_file": {code: 1000 * per_rule[code] / count for code in rule_codes},
        "note": "ast.parse is not on amplint's path for AMP files (it is the syntax check for files the pre-check skips)",
    }


def profile_corpus(corpus: str, amplint: str) -> Optional[dict]:
    """One in-process pass over a corpus the way amplint walks it: where -j1's time goes."""
    try:
        import ast

        import libcst as cst

        from amplint import engine
        from amplint.rules import ALL_RULES
    except ImportError:
        return None
    clock = time.perf_counter
    spent = {"read+precheck": 0.0, "ast.parse (skipped files)": 0.0, "libcst.parse_module": 0.0, "analysis+rules+locate": 0.0}
    parsed = skipped = 0
    for directory, _, names in sorted(os.walk(corpus)):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            t0 = clock()
            with open(path, "rb") as handle:
                source = handle.read().decode("utf-8", "replace")
            candidate = engine.might_use_amp(source)
            t1 = clock()
            spent["read+precheck"] += t1 - t0
            if not candidate:
                skipped += 1
                try:
                    ast.parse(source)
                except (SyntaxError, ValueError):
                    pass
                spent["ast.parse (skipped files)"] += clock() - t1
                continue
            parsed += 1
            try:
                module = cst.parse_module(source)
            except cst.ParserSyntaxError:
                continue
            t2 = clock()
            spent["libcst.parse_module"] += t2 - t1
            engine._locate(module, engine._run_rules(module, ALL_RULES), path, source)
            spent["analysis+rules+locate"] += clock() - t2
    t0 = clock()
    subprocess.run([amplint, "--version"], stdout=subprocess.DEVNULL, check=False)
    spent["process start (amplint --version)"] = clock() - t0
    return {"corpus": os.path.basename(corpus), "parsed": parsed, "skipped": skipped, "seconds": spent}


# --------------------------------------------------------------------------- output


def _table(rows: List[List[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def print_report(report: dict) -> None:
    env = report["environment"]
    print(f"machine: {env['machine']}, {env['cpus']} CPUs, Python {env['python']}")
    for tool in ("amplint", "torchfix"):
        info = env.get(tool)
        if info:
            print(f"{tool}: {info.get(tool) or '?'} (libcst {info.get('libcst') or '?'}) at {info['executable']}")
    print(f"repeat: best of {report['repeat']} (wall); peak RSS = max over repeats, largest single process")
    for scenario in report["scenarios"]:
        stats = scenario["stats"]
        print(f"\n== {scenario['scenario']}: {stats['files']} files, {stats['lines']} lines; "
              f"files past each tool's text pre-check (parsed): amplint {stats['amplint_parses']}, TorchFix {stats['torchfix_parses']}")
        rows = [["tool", "wall s", "files/s", "CPU s", "peak RSS MiB", "exit"]]
        for r in scenario["results"]:
            rows.append([r["tool"], f"{r['wall_s']:.3f}", f"{r['files_per_s']:.0f}", f"{r['cpu_s']:.2f}",
                         f"{r['peak_rss_mib']:.1f}", ",".join(map(str, r["exit_codes"]))])
        print(_table(rows))
        for r in scenario["results"]:
            if r["stderr_tail"]:
                print(f"  {r['tool']} stderr: {r['stderr_tail'][-1]}")
            if "warning" in r:
                print(f"  warning: {r['tool']}: {r['warning']}")
        for jobs, ratio in scenario["ratios"].items():
            print(f"  {jobs}: speed (wall) TorchFix/amplint = {ratio['speed_torchfix_over_amplint']:.2f}x "
                  f"(CPU time {ratio['cpu_torchfix_over_amplint']:.2f}x), "
                  f"peak RSS amplint/TorchFix = {ratio['rss_amplint_over_torchfix']:.2f}")
    profile = report.get("profile")
    if profile:
        print(f"\n== amplint in-process, per AMP-heavy file ({profile['files']} tests/cases files, "
              f"{profile['lines_per_file']:.0f} lines avg, best of {profile['rounds']})")
        amplint_path = sum(v for k, v in profile["ms_per_file"].items() if k != "ast.parse")
        rows = [["phase", "ms/file", "% of amplint path"]]
        for phase, ms in profile["ms_per_file"].items():
            share = "-" if phase == "ast.parse" else f"{100 * ms / amplint_path:.0f}%"
            rows.append([phase, f"{ms:.2f}", share])
        rows.append(["total (amplint path)", f"{amplint_path:.2f}", "100%"])
        print(_table(rows))
        print("  rules: " + ", ".join(f"{code} {ms:.2f}" for code, ms in profile["rules_ms_per_file"].items()) + " (ms/file)")
        print(f"  ({profile['note']})")
    for corpus in report.get("corpus_profiles") or []:
        total = sum(corpus["seconds"].values())
        print(f"\n== amplint -j1 time split, in-process, corpus {corpus['corpus']} "
              f"({corpus['parsed']} parsed, {corpus['skipped']} skipped by the pre-check; one pass)")
        rows = [["phase", "seconds", "share"]]
        for phase, seconds in corpus["seconds"].items():
            rows.append([phase, f"{seconds:.3f}", f"{100 * seconds / total:.0f}%"])
        rows.append(["total", f"{total:.3f}", "100%"])
        print(_table(rows))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", metavar="DIR", help="benchmark this directory of .py files instead of the default scenarios")
    parser.add_argument("--amp-only", action="store_true", help="only the AMP-heavy scenario (tests/cases replicated)")
    parser.add_argument("--mixed-only", action="store_true", help="only the stdlib + tests/cases scenario")
    parser.add_argument("--stdlib-files", type=int, default=300, metavar="N", help="stdlib files in the mixed scenario (default: 300)")
    parser.add_argument("--amp-files", type=int, default=150, metavar="N", help="files in the AMP-heavy scenario (default: 150)")
    parser.add_argument("--repeat", type=int, default=3, metavar="N", help="runs per tool and setting; the best wall time counts (default: 3)")
    parser.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, metavar="N", help="the parallel setting for both tools (default: all CPUs)")
    parser.add_argument("--amplint", default=shutil.which("amplint"), metavar="PATH", help="amplint executable (default: amplint on PATH)")
    parser.add_argument("--torchfix", default=shutil.which("torchfix"), metavar="PATH", help="TorchFix executable (default: torchfix on PATH)")
    parser.add_argument("--no-profile", action="store_true", help="skip the in-process parse/analysis breakdown")
    parser.add_argument("--profile-rounds", type=int, default=5, metavar="N", help="rounds per file for the breakdown (default: 5)")
    parser.add_argument("--json", action="store_true", help="print machine-readable results to stdout instead of tables")
    parser.add_argument("--save", metavar="FILE", help="also write the JSON results to FILE")
    parser.add_argument("--keep", action="store_true", help="keep the generated corpora (their path is printed)")
    args = parser.parse_args(argv)

    if not args.amplint or not os.path.exists(args.amplint):
        parser.error("amplint executable not found: install amplint (pip install -e .) or pass --amplint PATH")
    torchfix = args.torchfix
    if torchfix and not os.path.exists(torchfix):
        found = shutil.which(torchfix)
        torchfix = found
    if not torchfix:
        print(INSTALL_HINT.format(repo=REPO), file=sys.stderr)

    report = {
        "environment": {
            "machine": f"{platform.system()} {platform.machine()} ({platform.processor() or platform.node()})",
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "amplint": _version_info(args.amplint, "amplint"),
            "torchfix": _version_info(torchfix, "torchfix") if torchfix else None,
        },
        "repeat": args.repeat,
        "jobs": args.jobs,
        "scenarios": [],
    }
    workdir = tempfile.mkdtemp(prefix="amplint-bench-")
    try:
        if args.corpus:
            report["scenarios"].append(bench_scenario("custom", os.path.abspath(args.corpus), args.amplint, torchfix, args.jobs, args.repeat))
        else:
            if not args.amp_only:
                corpus = build_mixed(workdir, args.stdlib_files)
                report["scenarios"].append(bench_scenario("mixed", corpus, args.amplint, torchfix, args.jobs, args.repeat))
            if not args.mixed_only:
                corpus = build_amp(workdir, args.amp_files)
                report["scenarios"].append(bench_scenario("amp", corpus, args.amplint, torchfix, args.jobs, args.repeat))
        if not args.no_profile:
            report["profile"] = profile_amp_files(args.profile_rounds)
            report["corpus_profiles"] = [
                p for p in (profile_corpus(sc["corpus"], args.amplint) for sc in report["scenarios"]) if p
            ]
    finally:
        if args.keep:
            print(f"bench: corpora kept in {workdir}", file=sys.stderr)
        else:
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
