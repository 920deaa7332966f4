"""`amplint verify`: verdict logic, crash and hang handling with tiny fake fixtures (no torch),
the JSON and text shapes, the missing-torch message, and one real CPU run of every fixture."""

import json
import math
import subprocess
import sys
import textwrap
import time

import pytest

from amplint.harness import command
from amplint.harness.report import render_json, render_text
from amplint.harness.runner import VerifyRun, verify
from amplint.harness.verdict import (
    COMPARISONS,
    CONFIRMED,
    ERROR,
    NOT_REPRODUCED,
    SKIPPED,
    bounds_text,
    combine,
    holds,
    judge,
)
from amplint.rule import Prediction, Rule
from amplint.rules import ALL_RULES
from conftest import REPO

REQUIRED_JSON_KEYS = {"code", "scenario", "device", "dtype", "buggy", "fixed", "verdict"}


# --------------------------------------------------------------------------- verdict logic


@pytest.mark.parametrize(
    "compare, buggy, fixed, expected",
    [
        ("buggy/fixed", 2874.0, 0.04386, 2874.0 / 0.04386),
        ("fixed/buggy", 6.7e-7, 0.0439, 0.0439 / 6.7e-7),
        ("buggy-fixed", 0.97, 0.0, 0.97),
        ("buggy", 0.0, 0.1, 0.0),
        ("fixed/buggy", 0.0, 0.1, math.inf),  # a frozen quantity is infinitely far from a moving one
        ("buggy/fixed", 0.0, 0.0, 1.0),  # both exactly zero: the same
    ],
)
def test_combine(compare, buggy, fixed, expected):
    assert combine(compare, buggy, fixed) == pytest.approx(expected)


def test_combine_propagates_nan_and_rejects_unknown_comparisons():
    assert math.isnan(combine("buggy/fixed", math.nan, 1.0))
    with pytest.raises(ValueError):
        combine("buggy*fixed", 1.0, 1.0)


def test_bounds():
    at_least = Prediction("s", "q", "claim", compare="fixed/buggy", at_least=1000)
    near_one = Prediction("s", "q", "claim", compare="buggy/fixed", at_least=0.999, at_most=1.001)
    exactly_zero = Prediction("s", "q", "claim", compare="buggy", at_least=0, at_most=0)
    assert holds(at_least, 65536) and holds(at_least, math.inf) and not holds(at_least, 999.9)
    assert holds(near_one, 1.0) and not holds(near_one, 1.01) and not holds(near_one, 0.99)
    assert holds(exactly_zero, 0.0) and not holds(exactly_zero, 1e-12)
    assert not holds(near_one, math.nan) and not holds(at_least, math.nan)
    assert bounds_text(at_least) == "fixed/buggy >= 1000"
    assert bounds_text(near_one) == "buggy/fixed in [0.999, 1.001]"
    assert bounds_text(exactly_zero) == "buggy == 0"


def test_judge():
    prediction = Prediction("sgd", "first_update", "claim", compare="fixed/buggy", at_least=1000)
    assert judge(prediction, 6.7e-7, 0.0439) == (pytest.approx(0.0439 / 6.7e-7), CONFIRMED)
    assert judge(prediction, 0.03, 0.0439)[1] == NOT_REPRODUCED


@pytest.mark.parametrize("rule", ALL_RULES, ids=[rule.code for rule in ALL_RULES])
def test_every_shipped_prediction_is_well_formed(rule):
    for prediction in rule.PREDICTIONS:
        assert prediction.compare in COMPARISONS
        assert prediction.at_least is not None or prediction.at_most is not None, "a claim needs a bound"
        assert prediction.dtypes and set(prediction.dtypes) <= {"float16", "bfloat16"}
        assert prediction.claim.endswith(".")
    if rule.PREDICTIONS:
        assert "amplint verify" in rule.section("What goes wrong at runtime"), "the docs quote the measurement"


# --------------------------------------------------------------------------- fake fixtures

# A fixture without torch: it prints its scenario's values as a real one would.
FAKE_FIXTURE = """\
import argparse, json, sys, time
parser = argparse.ArgumentParser()
parser.add_argument("--device")
parser.add_argument("--dtype")
parser.add_argument("--scenario", action="append")
args = parser.parse_args()
{behaviour}
print("human-readable lines come first")
print(json.dumps({{"torch": "fake", "results": {{s: values for s in args.scenario}}}}))
"""


def write_pair(root, code, buggy, fixed):
    (root / code).mkdir(parents=True)
    for which, behaviour in (("buggy", buggy), ("fixed", fixed)):
        (root / code / f"{which}.py").write_text(FAKE_FIXTURE.format(behaviour=textwrap.dedent(behaviour)))


def fake_rule(code, *predictions):
    return type(f"Fake{code}", (Rule,), {"__doc__": "A fake rule.", "code": code, "name": "fake", "PREDICTIONS": predictions})


GROWS = Prediction("s", "q", "q grows 100x.", compare="buggy/fixed", at_least=100)


def rows_by_code(run: VerifyRun):
    return {row.code: row for row in run.rows}


def test_confirmed_and_not_reproduced(tmp_path):
    write_pair(tmp_path, "FAKE1", "values = {'q': 1000.0}", "values = {'q': 1.0}")
    unmet = Prediction("s", "q", "q grows a millionfold.", compare="buggy/fixed", at_least=1e6)
    run = verify([fake_rule("FAKE1", GROWS, unmet)], "cpu", root=tmp_path)
    assert [row.verdict for row in run.rows] == [CONFIRMED, NOT_REPRODUCED]
    assert (run.rows[0].buggy, run.rows[0].fixed, run.rows[0].value) == (1000.0, 1.0, 1000.0)
    assert run.torch_version == "fake"
    assert not run.ok


def test_a_crash_is_a_verdict_and_the_twin_and_other_rules_still_run(tmp_path):
    write_pair(tmp_path, "CRASH", "raise RuntimeError('boom')", "values = {'q': 1.0}")
    write_pair(tmp_path, "GOOD", "values = {'q': 1000.0}", "values = {'q': 1.0}")
    run = verify([fake_rule("CRASH", GROWS), fake_rule("GOOD", GROWS)], "cpu", root=tmp_path)
    crash, good = rows_by_code(run)["CRASH"], rows_by_code(run)["GOOD"]
    assert crash.verdict == ERROR
    assert "buggy.py (float16) raised RuntimeError: boom" in crash.reason
    assert crash.fixed == 1.0 and crash.buggy is None
    assert good.verdict == CONFIRMED
    assert not run.ok


def test_a_hang_times_out_and_names_the_script(tmp_path):
    write_pair(tmp_path, "HANG", "values = {'q': 1000.0}", "time.sleep(60)")
    started = time.monotonic()
    run = verify([fake_rule("HANG", GROWS)], "cpu", timeout=3, root=tmp_path)
    assert time.monotonic() - started < 30
    (row,) = run.rows
    assert row.verdict == ERROR
    assert "timed out after 3 s while running fixed.py (float16)" in row.reason
    assert row.buggy == 1000.0, "what finished before the hang still counts"


@pytest.mark.parametrize(
    "behaviour, reason",
    [
        ("sys.exit(3)", "buggy.py (float16) exited with 3"),
        ("values = {'other': 1.0}", "buggy.py reported no `q` for scenario s"),
        ("print('no json'); sys.exit(0)", "buggy.py (float16) printed no JSON result line"),
    ],
)
def test_unreadable_results_are_errors(tmp_path, behaviour, reason):
    write_pair(tmp_path, "ODD", behaviour, "values = {'q': 1.0}")
    (row,) = verify([fake_rule("ODD", GROWS)], "cpu", root=tmp_path).rows
    assert row.verdict == ERROR and reason in row.reason


def test_a_missing_fixture_is_an_error(tmp_path):
    (row,) = verify([fake_rule("NONE", GROWS)], "cpu", root=tmp_path).rows
    assert row.verdict == ERROR and "no fixture fixtures/NONE/buggy.py" in row.reason


def test_dtype_selection(tmp_path):
    # The fake reports 1000x only under bfloat16, so the dtype it ran at is visible.
    write_pair(tmp_path, "DT", "values = {'q': 1000.0 if args.dtype == 'bfloat16' else 1.0}", "values = {'q': 1.0}")
    about_bf16 = Prediction("s", "q", "q grows under bfloat16.", compare="buggy/fixed", at_least=100, dtypes=("bfloat16",))
    rule = fake_rule("DT", about_bf16)
    (default,) = verify([rule], "cpu", root=tmp_path).rows
    assert (default.dtype, default.verdict) == ("bfloat16", CONFIRMED)
    (other,) = verify([rule], "cpu", dtype="float16", root=tmp_path).rows
    assert (other.verdict, other.reason) == (SKIPPED, "the claim is about bfloat16 only")


def test_nothing_runs_without_the_device(tmp_path):
    write_pair(tmp_path, "FAKE1", "values = {'q': 1000.0}", "values = {'q': 1.0}")
    run = verify([fake_rule("FAKE1", GROWS)], "cuda", unavailable="CUDA is not available", root=tmp_path)
    assert [(row.verdict, row.reason) for row in run.rows] == [(SKIPPED, "CUDA is not available")]
    assert run.processes == 0 and not run.ok, "a run where nothing ran must not pass"


def test_resolve_device(monkeypatch):
    assert command.resolve_device("cpu", 10) == ("cpu", None)
    monkeypatch.setattr(command, "_cuda_available", lambda timeout: (False, None))
    assert command.resolve_device("auto", 10) == ("cpu", None)
    device, unavailable = command.resolve_device("cuda", 10)
    assert device == "cuda" and "not available" in unavailable
    monkeypatch.setattr(command, "_cuda_available", lambda timeout: (True, None))
    assert command.resolve_device("auto", 10) == ("cuda", None)


# --------------------------------------------------------------------------- output


@pytest.fixture
def mixed_run(tmp_path):
    write_pair(tmp_path, "MIX", "values = {'q': 1000.0, 'frozen': 0.0}", "values = {'q': 1.0, 'frozen': 0.5}")
    frozen = Prediction("s", "frozen", "It never moves.", compare="fixed/buggy", at_least=1000)
    never = Prediction("s", "q", "Only under bfloat16.", compare="buggy/fixed", at_least=1, dtypes=("bfloat16",))
    return verify([fake_rule("MIX", GROWS, frozen, never)], "cpu", dtype="float16", root=tmp_path)


def test_json_output(mixed_run):
    def no_constants(name):
        raise AssertionError(f"{name} is not JSON")

    objects = json.loads(render_json(mixed_run), parse_constant=no_constants)
    assert len(objects) == 3
    for obj in objects:
        assert REQUIRED_JSON_KEYS <= set(obj)
        assert obj["code"] == "MIX" and obj["device"] == "cpu" and obj["dtype"] == "float16"
    grows, frozen, never = objects
    assert (grows["buggy"], grows["fixed"], grows["verdict"], grows["reason"]) == (1000.0, 1.0, "confirmed", None)
    assert frozen["value"] == "inf" and frozen["verdict"] == "confirmed"
    assert never["verdict"] == "skipped" and never["buggy"] is None and "bfloat16 only" in never["reason"]


def test_text_output(mixed_run):
    text = render_text(mixed_run)
    lines = text.splitlines()
    assert lines[0].startswith("amplint verify: torch fake, device cpu, 1 fixture process")
    assert lines[2].split() == ["rule", "device", "dtype", "scenario", "quantity", "buggy", "fixed", "check", "verdict"]
    assert "buggy/fixed = 1000, claim >= 100" in lines[3] and lines[3].endswith("confirmed")
    assert "fixed/buggy = inf" in lines[4]
    assert lines[5].endswith("skipped: the claim is about bfloat16 only")
    assert lines[-1] == "3 predictions: 2 confirmed, 0 not reproduced, 1 skipped, 0 errors"


# --------------------------------------------------------------------------- the command


def test_usage_errors_exit_2(capsys):
    assert command.main(["AMP999"]) == 2
    assert "no rule matches AMP999" in capsys.readouterr().err
    assert command.main(["--timeout", "0"]) == 2
    assert command.main(["--device", "tpu"]) == 2


def test_without_torch_verify_says_how_to_get_it_and_linting_still_works():
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "from amplint.engine import lint_text\n"
        "assert lint_text('import torch\\nwith torch.autocast(\"cuda\"):\\n    loss = m(x)\\n    loss.backward()\\n')\n"
        "from amplint.harness.command import main\n"
        "sys.exit(main(['AMP003']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "pip install 'amplint[harness]'" in result.stderr
    assert "Linting does not need PyTorch" in result.stderr


# --------------------------------------------------------------------------- the real fixtures


def test_every_prediction_is_confirmed_on_cpu():
    pytest.importorskip("torch")
    result = subprocess.run(
        [sys.executable, "-m", "amplint.harness.command", "--output-format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    rows = json.loads(result.stdout)
    problems = [row for row in rows if row["verdict"] != "confirmed"]
    assert not problems, json.dumps(problems, indent=2)
    assert result.returncode == 0, result.stderr
    expected = [(rule.code, p.scenario, p.quantity, p.dtypes[0]) for rule in ALL_RULES for p in rule.PREDICTIONS]
    assert [(row["code"], row["scenario"], row["quantity"], row["dtype"]) for row in rows] == expected
    assert all(row["device"] == "cpu" and REQUIRED_JSON_KEYS <= set(row) for row in rows)


def test_amplint_verify_through_the_cli():
    pytest.importorskip("torch")
    result = subprocess.run(
        [sys.executable, "-m", "amplint", "verify", "AMP006", "--dtype", "bfloat16"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table = [line.split() for line in result.stdout.splitlines()]
    assert ["AMP006", "cpu", "bfloat16", "sgd", "true_loss"] in [cells[:5] for cells in table]
    assert result.stdout.rstrip().endswith("1 prediction: 1 confirmed, 0 not reproduced, 0 skipped, 0 errors")
