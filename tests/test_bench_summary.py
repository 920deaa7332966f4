"""bench/bench.py's summary table: beside the cold ratio, what LibCST's parse of the analysed
files costs against ruff's whole run, and what the 8x target leaves the rest of the analysis
once that parse is paid (issue 38 keeps LibCST as the parser of the files amplint analyses)."""

import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("bench_bench", os.path.join(REPO, "bench", "bench.py"))
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_bench"] = bench
_spec.loader.exec_module(bench)


def _compared(ruff_cpu):
    tool = lambda cpu: {"cpu_s": cpu, "main_rss_mib": 150.0, "worker_rss_mib": 190.0}  # noqa: E731
    return {"files": 10, "jobs": 2, "results": {"amplint cold -j2": tool(50.0), "ruff E,F,B cold": tool(ruff_cpu)}, "ratios": {"amplint cold CPU / ruff cold CPU": 50.0 / ruff_cpu}}


def _replayed(parse):
    phases = {"LibCST parse": parse, "rules": 8.0, "semantic model": 5.0}
    return {"files": 10, "phase_seconds": phases, "worst_by_steps": [], "worst_by_cpu": [], "file_step_limit": 3_000_000, "over_limit": 0}


def _row(out, label):
    return [line for line in out.splitlines() if line.startswith(label)]


def test_the_parse_alone_and_what_the_target_leaves_are_printed_per_corpus(capsys):
    bench.print_summary({"compare": {"broad": _compared(2.5)}, "replay": {"broad": _replayed(15.0)}})
    out = capsys.readouterr().out
    assert _row(out, "LibCST parse alone / ruff cold CPU")[0].split()[-1] == "6.0x"
    # 8 x 2.5 s - 15 s of parse = 5 s left; the rest of the one-process run is 8 + 5 s.
    assert _row(out, "  8x ruff less the parse")[0].split()[-2:] == ["5.0", "(13.0)"]


def test_a_corpus_without_both_measurements_has_no_floor(capsys):
    bench.print_summary({"compare": {"bench": _compared(2.5)}, "replay": {"broad": _replayed(15.0)}})
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.split()[-2:] == ["bench", "broad"]).split()
    row = _row(out, "LibCST parse alone / ruff cold CPU")[0].split()[-2:]
    assert dict(zip(header[-2:], row)) == {"bench": "-", "broad": "-"}


def test_compare_alone_prints_no_floor(capsys):
    bench.print_summary({"compare": {"bench": _compared(2.5)}})
    assert "LibCST parse alone" not in capsys.readouterr().out
