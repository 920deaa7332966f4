"""The run driver: a file that crashes or overruns costs that file only, never another file's
findings; results come back in order; the scheduler keeps every worker busy."""

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

import amplint.lint.engine
from amplint.run import driver
from amplint.run.cache import Cache
from amplint.run.driver import Job, Runner, plan, simulate
from amplint.rules import ALL_RULES

from conftest import BUGGY, REPO

CODES = tuple(rule.code for rule in ALL_RULES)
GOOD = (REPO / "fixtures" / "AMP003" / "buggy.py").read_text()
# Code a rule needs (`amplint.lint.evidence`), so that the file is parsed by LibCST.
AMP_CODE = "import torch; torch.autocast; loss.backward()\n"


def write(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return [str(tmp_path / name) for name in files]


def summary(results):
    return [(Path(r.path).name, [(f.row, f.code) for f in r.findings], r.error.message if r.error else None) for r in results]


# --------------------------------------------------------------------------- the brief's repro


def test_a_file_that_would_crash_libcst_does_not_hide_another_files_findings(amplint, tmp_path):
    # LibCST's native parser overflows its stack on this (SIGSEGV): the run used to print
    # nothing at all.
    (tmp_path / "t.py").write_text(AMP_CODE + "x = a" + " and a" * 10000 + "\n")
    (tmp_path / "good.py").write_text(GOOD)
    result = amplint("--no-cache", "--output-format", "concise", "t.py", "good.py", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert re.search(r"good\.py:\d+:21: AMP003", result.stdout)
    assert re.search(r"error: t\.py: not parsed: the statement at 2:1 nests 10003 levels deep", result.stderr)


# --------------------------------------------------------------------------- isolation


def _crash_on(name, how="segfault", marker=None):
    """A lint_bytes that kills its worker on the file called `name` (once, if `marker` is a
    path: the crash leaves it behind)."""
    real = amplint.lint.engine.lint_bytes

    def lint_bytes(data, path, rules, *args, **kwargs):
        if os.path.basename(path) == name and not (marker and os.path.exists(marker)):
            if marker:
                Path(marker).write_text("crashed once")
            if how == "segfault":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif how == "python-loop":
                while True:
                    pass
            elif how == "native-loop":
                re.match(r"(a+)+$", "a" * 64 + "b")  # exponential, in C: never returns to Python
            elif how == "abort":  # LibCST's native parser when an allocation fails
                os.abort()
            elif how == "memory":
                hoard = [bytes(1 << 20) for _ in range(1 << 10)]  # 1 GiB, a MiB at a time
                del hoard
            elif how == "memory-caught":
                try:
                    hoard = [bytes(1 << 20) for _ in range(1 << 10)]
                except MemoryError:
                    raise ValueError("LibCST's own error") from None  # `from None` keeps __context__
            elif how == "library-catches":
                # Library code that catches the interruption and fails its own way (LibCST's
                # metadata resolution turned it into a KeyError naming a whole syntax tree).
                try:
                    while True:
                        pass
                except BaseException:
                    raise KeyError("IndentedBlock(" + "body=[...], " * 500 + ")") from None
        return real(data, path, rules, *args, **kwargs)

    return lint_bytes


@pytest.mark.parametrize("workers", [1, 2])
def test_a_crashed_worker_costs_one_file(tmp_path, monkeypatch, workers):
    # Workers are forked: they inherit the patched engine.
    monkeypatch.setattr(amplint.lint.engine, "lint_bytes", _crash_on("crash.py"))
    names = {f"train{i}.py": BUGGY for i in range(9)}
    names["crash.py"] = BUGGY
    paths = write(tmp_path, names)
    with Runner(workers=workers) as runner:
        results = runner.lint([Job(p, CODES) for p in paths])
    assert [r.path for r in results] == paths
    crashed = results[-1]
    assert crashed.error.message == "crashed while parsing or analysing (killed by SIGSEGV); not linted"
    assert all([(f.row, f.code) for f in r.findings] == [(8, "AMP003")] for r in results[:-1])


def test_a_crash_is_retried_alone_before_it_counts(tmp_path, monkeypatch):
    marker = str(tmp_path / "crashed")
    monkeypatch.setattr(amplint.lint.engine, "lint_bytes", _crash_on("flaky.py", marker=marker))
    paths = write(tmp_path, {"flaky.py": BUGGY, "other.py": BUGGY})
    with Runner(workers=1) as runner:
        results = runner.lint([Job(p, CODES) for p in paths])
    assert os.path.exists(marker)
    assert summary(results) == [("flaky.py", [(8, "AMP003")], None), ("other.py", [(8, "AMP003")], None)]


@pytest.mark.parametrize("how", ["python-loop", "native-loop", "library-catches"])
def test_a_file_over_its_cpu_budget_is_an_error_and_the_run_goes_on(tmp_path, monkeypatch, how):
    monkeypatch.setattr(amplint.lint.engine, "lint_bytes", _crash_on("slow.py", how=how))
    paths = write(tmp_path, {"slow.py": BUGGY, "after.py": BUGGY})
    started = time.monotonic()
    with Runner(workers=1, budget=0.5) as runner:
        slow, after = runner.lint([Job(p, CODES) for p in paths])
    assert slow.error.message == "analysis exceeded the 0.5 s CPU safety limit; not linted (raise it with --file-budget)"
    assert [f.code for f in after.findings] == ["AMP003"]
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("how", ["memory", "memory-caught"])
def test_a_file_over_the_memory_limit_is_an_error_and_the_worker_goes_on(tmp_path, monkeypatch, how):
    monkeypatch.setattr(amplint.lint.engine, "lint_bytes", _crash_on("hog.py", how=how))
    paths = write(tmp_path, {"hog.py": BUGGY, "after.py": BUGGY, "last.py": BUGGY})
    cache = Cache(str(tmp_path / "cache"))
    with Runner(workers=1, memory=256, cache=cache) as runner:
        hog, after, last = runner.lint([Job(p, CODES) for p in paths])
        (worker,) = runner._pool
        assert worker.alive(), "the worker that ran out is the one that goes on"
    assert hog.error.message == "analysis exceeded the 256 MiB memory safety limit; not linted (raise it with --file-memory)"
    assert [f.code for f in after.findings] == [f.code for f in last.findings] == ["AMP003"]
    with Runner(workers=1, memory=256, cache=Cache(str(tmp_path / "cache"))) as runner:
        again = runner.lint([Job(p, CODES) for p in paths])
        assert runner.linted == 1, "a file over the limit is never cached"
    assert again[0].error.message == hog.error.message


def test_a_result_is_cached_for_its_memory_limit_only(tmp_path):
    # A parser short of memory may give its verdict on what it could not finish ("nested too
    # deeply"): such a result must not be replayed to a run with another limit.
    paths = write(tmp_path, {"train.py": BUGGY})
    runs = []
    for memory in (256, 256, 512, driver.DEFAULT_MEMORY):
        with Runner(workers=1, memory=memory, cache=Cache(str(tmp_path / "cache"))) as runner:
            runner.lint([Job(p, CODES) for p in paths])
            runs.append(runner.linted)
    assert runs == [1, 0, 1, 1]


def test_a_worker_aborted_names_the_memory_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(amplint.lint.engine, "lint_bytes", _crash_on("big.py", how="abort"))
    (path,) = write(tmp_path, {"big.py": BUGGY})
    with Runner(workers=1, memory=512) as runner:
        (result,) = runner.lint([Job(path, CODES)])
    assert result.error.message == (
        "crashed while parsing or analysing (killed by SIGABRT, as the native parser does past the 512 MiB "
        "memory safety limit: raise it with --file-memory); not linted"
    )


def test_ordinary_files_are_far_below_the_memory_limit(tmp_path):
    # The largest training script of the cases, with an eighth of the default limit.
    largest = max((os.path.join(REPO, "tests", "cases", n) for n in os.listdir(os.path.join(REPO, "tests", "cases")) if n.endswith(".py")), key=os.path.getsize)
    with Runner(workers=1, memory=driver.DEFAULT_MEMORY // 8) as runner:
        (result,) = runner.lint([Job(largest, CODES)])
    assert result.error is None or "memory" not in result.error.message


def test_an_internal_error_is_reported_short():
    from amplint.run.driver import internal_error

    message = internal_error(KeyError("IndentedBlock(" + "body=[...], " * 500 + ")"))
    assert message.startswith("internal error while linting: KeyError: 'IndentedBlock(") and len(message) < 260


def test_the_cli_reports_a_budget_overrun_as_an_error(amplint, tmp_path):
    # 5,000 terms over as many lines: too slow for LibCST, and invisible to the one-line guard.
    (tmp_path / "chain.py").write_text(AMP_CODE + "x = (a\n" + " + a\n" * 5000 + ")\n")
    (tmp_path / "good.py").write_text(GOOD)
    result = amplint("--no-cache", "--output-format", "concise", "--file-budget", "0.5", "chain.py", "good.py", cwd=tmp_path)
    assert result.returncode == 2
    assert re.search(r"good\.py:\d+:21: AMP003", result.stdout)
    assert "error: chain.py: analysis exceeded the 0.5 s CPU safety limit; not linted (raise it with --file-budget)" in result.stderr


def test_file_budget_must_be_a_number(amplint, tmp_path):
    result = amplint("--file-budget", "soon", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert "not a number of seconds" in result.stderr


# --------------------------------------------------------------------------- order and equality


def test_results_are_the_same_in_order_whatever_the_workers(tmp_path):
    sources = {"a.py": BUGGY, "b.py": "x = 1\n", "c.py": GOOD, "broken.py": "import torch  # autocast\ndef (:\n"}
    sources.update({f"plain{i}.py": f"y = {i}\n" for i in range(20)})
    paths = write(tmp_path, sources)
    jobs = [Job(p, CODES) for p in paths]
    with Runner(workers=1, isolate=False) as runner:
        expected = summary(runner.lint(jobs))
    for workers in (1, 2, 3):
        with Runner(workers=workers) as runner:
            assert summary(runner.lint(jobs)) == expected
    assert expected[3][2].startswith("syntax error at 2:5")


def test_standard_input_is_isolated_too(amplint):
    result = amplint("-", "--stdin-filename", "t.py", input=AMP_CODE + "x = a" + " and a" * 10000 + "\n")
    assert result.returncode == 2
    assert "error: t.py: not parsed" in result.stderr


# --------------------------------------------------------------------------- scheduling


def test_parsed_files_go_alone_largest_first_and_cheap_ones_in_batches():
    files = [(1000, False)] * 200 + [(50_000, True), (200_000, True), (1_000, True)]
    units = plan(files)
    assert units[0] == [201] and units[1] == [200]  # the largest parsed files first
    assert sorted(i for unit in units for i in unit) == list(range(len(files)))
    batches = [unit for unit in units if len(unit) > 1]
    assert batches and all(not files[i][1] for unit in batches for i in unit)
    assert max(len(unit) for unit in units) <= driver._BATCH_FILES


def test_replayed_per_file_times_scale_with_the_workers():
    # Per-file CPU measured on 2,694 files (timm, diffusers, pytorch/examples, accelerate):
    # (size in bytes, parsed by LibCST, CPU seconds). See bench/README.md.
    with open(REPO / "tests" / "data" / "corpus_costs.json") as handle:
        measured = json.load(handle)["files"]
    files = [(size, parsed) for size, parsed, _ in measured]
    cost = [seconds for _, _, seconds in measured]
    units = plan(files)
    total = sum(cost)
    assert simulate(units, cost, 1) == pytest.approx(total)
    speedups = {n: total / simulate(units, cost, n) for n in (2, 4, 16)}
    assert speedups[2] > 1.95 and speedups[4] > 3.8 and speedups[16] > 13, speedups


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_file_that_became_a_fifo_after_discovery_is_an_error_not_a_hang(tmp_path):
    # The driver reads the careful way (amplint.run.source.read_file): a path that turned into a
    # FIFO between the walk and the read cannot block the run.
    os.mkfifo(tmp_path / "train.py")
    (tmp_path / "after.py").write_text(BUGGY)
    with Runner(workers=1) as runner:
        fifo, after = runner.lint([Job(str(tmp_path / "train.py"), CODES), Job(str(tmp_path / "after.py"), CODES)])
    assert fifo.error.message == "not a regular file (a FIFO)"
    assert [f.code for f in after.findings] == ["AMP003"]
