"""`amplint verify`: verdict logic, crash, hang and load handling with tiny fake fixtures (no
torch), the JSON and text shapes, the command's usage errors, and the real fixtures: one shared
CPU run of every prediction at every dtype, and break-the-fixture runs showing each claim can fail."""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import importlib.util

import pytest

from amplint.harness import command
from amplint.harness.report import render_json, render_text
from amplint.harness.runner import (
    ALL_DTYPES,
    AS_WRITTEN,
    PERTURBATIONS,
    VerifyRun,
    Watchdog,
    fixture_root,
    judge_all,
    judged_as_identical,
    plan,
    run_scripts,
    script_spec,
    verify,
)
from amplint.harness.verdict import (
    COMPARISONS,
    CONFIRMED,
    ERROR,
    NOT_REPRODUCED,
    SKIPPED,
    bounds_text,
    combine,
    evaluate_expected,
    expected_quantities,
    holds,
    judge,
    mechanism_missing,
    measured_text,
    value_text,
)
from amplint.harness.quotes import agrees, quote_problems, quoted_number, tolerance, unbacked, unquoted
from amplint.harness.report import summary_text
from amplint.lint.rule import DEVICES, KINDS, Prediction, Rule
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
    ],
)
def test_combine(compare, buggy, fixed, expected):
    assert combine(compare, buggy, fixed) == pytest.approx(expected)


def test_combine_propagates_nan_and_rejects_unknown_comparisons():
    assert math.isnan(combine("buggy/fixed", math.nan, 1.0))
    for unknown in ("buggy*fixed", "fixed"):  # the fixed run alone says nothing about the mistake
        with pytest.raises(ValueError):
            combine(unknown, 1.0, 1.0)


def test_a_ratio_of_two_zeros_is_no_match():
    """Nothing against nothing (no overflow in either run) used to read as 0/0 = 1, "the same",
    and confirmed a mechanism that never happened."""
    assert math.isnan(combine("buggy/fixed", 0.0, 0.0))
    assert math.isnan(evaluate_expected("buggy.a / fixed.b", {"buggy": {"a": 0.0}, "fixed": {"b": 0.0}}))
    near_one = Prediction("s", "q", "claim", compare="buggy/fixed", at_least=0.9, at_most=1.1)
    assert judge(near_one, 0.0, 0.0)[1] == NOT_REPRODUCED
    # AMP007's mechanism with no overflow: 0 extra skipped steps against 0 halvings expected
    mechanism = Prediction("s", "q", "claim", compare="buggy-fixed", at_least=0.9, at_most=1.1, expected="buggy.h")
    assert judge(mechanism, 1.0, 1.0, expected=0.0)[1] == NOT_REPRODUCED


def test_a_mechanism_must_have_happened_before_anything_is_compared():
    claim = Prediction("s", "q", "claim", compare="buggy-fixed", at_least=0, at_most=0, happened="fixed.overflows")
    assert mechanism_missing(claim, {"buggy": {}, "fixed": {"overflows": 3.0}}) is None
    assert mechanism_missing(claim, {"buggy": {}, "fixed": {"overflows": 0.0}}) == (
        "the mechanism did not happen: fixed.overflows = 0, must be > 0"
    )


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


def test_expected_mechanism():
    mechanism = Prediction(
        "sgd", "first_update", "claim", compare="fixed/buggy", at_least=0.95, at_most=1.05,
        expected="buggy.loss_scale * fixed.logged_grad_norm / fixed.max_norm",
    )
    assert set(expected_quantities(mechanism.expected)) == {
        ("fixed", "max_norm"), ("buggy", "loss_scale"), ("fixed", "logged_grad_norm")
    }
    values = {"buggy": {"loss_scale": 65536.0}, "fixed": {"logged_grad_norm": 0.8771766, "max_norm": 1.0}}
    expected = evaluate_expected(mechanism.expected, values)
    assert expected == pytest.approx(57486.65, rel=1e-6)
    # AMP003 as measured: the update shrank 57,070x, the mechanism says 57,487x
    assert judge(mechanism, 7.684616e-07, 0.04385884, expected)[1] == CONFIRMED
    # the same shrinkage from another cause (a 1000x smaller lr) is not the mechanism
    assert judge(mechanism, 7.684616e-10, 0.04385884, expected)[1] == NOT_REPRODUCED
    assert bounds_text(mechanism) == (
        "(fixed/buggy) / (buggy.loss_scale * fixed.logged_grad_norm / fixed.max_norm) in [0.95, 1.05]"
    )
    assert evaluate_expected("-(fixed.a - 1) / (buggy.b * 0)", {"buggy": {"b": 2.0}, "fixed": {"a": 3.0}}) == -math.inf


def test_a_ratio_to_a_scale_of_1_is_no_match():
    """The 1/1 sibling of 0/0 (the audit): with the scaler off, buggy.py steps like fixed.py and
    "shrunk by the scale" reads 1 / 1 = 1.000 x expected. The mechanism names what must be
    non-trivial first (the scale above 1; with `min`, the fixed run clipping too)."""
    by_scale = Prediction("s", "q", "claim", compare="fixed/buggy", at_least=0.95, at_most=1.05, expected="buggy.loss_scale")
    guarded = Prediction(
        "s", "q", "claim", compare="fixed/buggy", at_least=0.95, at_most=1.05, expected="buggy.loss_scale",
        happened="buggy.loss_scale - 1",
    )
    off = {"buggy": {"loss_scale": 1.0}, "fixed": {}}
    assert judge(by_scale, 0.04, 0.04, expected=1.0)[1] == CONFIRMED  # what the guard is for
    assert mechanism_missing(guarded, off) == "the mechanism did not happen: buggy.loss_scale - 1 = 0, must be > 0"
    assert mechanism_missing(guarded, {"buggy": {"loss_scale": 65536.0}, "fixed": {}}) is None
    both = Prediction(
        "s", "q", "claim", compare="fixed/buggy", at_least=0.99, at_most=1.01,
        expected="buggy.loss_scale * min(fixed.norm, fixed.max_norm) / fixed.max_norm",
        happened="min(buggy.loss_scale - 1, fixed.norm - fixed.max_norm)",
    )
    assert set(expected_quantities(both.happened)) == {("buggy", "loss_scale"), ("fixed", "norm"), ("fixed", "max_norm")}
    clips = {"buggy": {"loss_scale": 65536.0}, "fixed": {"norm": 0.877, "max_norm": 0.25}}
    assert evaluate_expected(both.expected, clips) == 65536.0 and mechanism_missing(both, clips) is None
    no_clip = {"buggy": {"loss_scale": 65536.0}, "fixed": {"norm": 0.877, "max_norm": 1.0}}
    assert evaluate_expected(both.expected, no_clip) == pytest.approx(65536 * 0.877)
    assert mechanism_missing(both, no_clip).startswith("the mechanism did not happen")
    assert math.isnan(evaluate_expected("min(buggy.a, 1)", {"buggy": {"a": math.nan}, "fixed": {}}))


def test_every_mechanism_says_what_must_have_happened():
    """A claim that a comparison equals what the mechanism predicts reads 1 / 1 or 0 / 0 as a
    match where the mechanism never ran: each states what must be non-trivial first."""
    missing = [(rule.code, p.scenario, p.quantity) for rule in ALL_RULES for p in rule.PREDICTIONS if p.expected and not p.happened]
    assert not missing


@pytest.mark.parametrize(
    "expression",
    ["buggy", "loss_scale", "os.system", "buggy.x ** 2", "buggy.x(1)", "fixed.a + 'b'", "buggy.x if 1 else 2",
     "max(buggy.x, key=1)", "min()", "abs(buggy.x)", "buggy.min(1)"],
)
def test_expected_is_only_arithmetic_over_the_two_scripts(expression):
    with pytest.raises(ValueError):
        expected_quantities(expression)


def test_tight_bands_print_the_digits_that_decide_them():
    near_one = Prediction("s", "q", "claim", compare="buggy/fixed", at_least=0.999, at_most=1.001)
    one_percent = Prediction("s", "q", "claim", compare="buggy/fixed", at_least=0.99, at_most=1.01)
    exactly_zero = Prediction("s", "q", "claim", compare="buggy", at_least=0, at_most=0)
    # 0.9976 fails [0.999, 1.001] and must not print as "0.998" or "1"
    assert value_text(near_one, 0.9975879) == "0.99759"
    assert value_text(near_one, 1.0) == "1.00000"
    assert value_text(one_percent, 0.9975879) == "0.9976"
    assert value_text(exactly_zero, 1e-12) == "1e-12" and value_text(exactly_zero, 0.0) == "0"
    assert measured_text(near_one, 0.003352605) == "0.003352605"
    at_least = Prediction("s", "q", "claim", compare="buggy/fixed", at_least=10)
    assert measured_text(at_least, 0.003352605) == "0.003353"


@pytest.mark.parametrize("rule", ALL_RULES, ids=[rule.code for rule in ALL_RULES])
def test_every_shipped_prediction_is_well_formed(rule):
    for prediction in rule.PREDICTIONS:
        assert prediction.compare in COMPARISONS
        assert prediction.at_least is not None or prediction.at_most is not None, "a claim needs a bound"
        assert prediction.dtypes and set(prediction.dtypes) <= {"float16", "bfloat16"}
        assert prediction.devices and set(prediction.devices) <= set(DEVICES)
        assert prediction.kind in KINDS
        assert prediction.claim.endswith(".")
        for expression in (prediction.expected, prediction.happened):
            if expression:
                expected_quantities(expression)
        # a claim whose dtype or device says it is a control, says so in its kind
        if prediction.claim.lower().startswith(("control", "bfloat16 control")):
            assert prediction.is_control, prediction
    if rule.PREDICTIONS:
        assert "amplint verify" in rule.section("What goes wrong at runtime"), "the docs quote the measurement"


@pytest.mark.parametrize(
    "text, measured, agree",
    [
        ("65,000x", 65254.1, True),
        ("~30,000x", 30168.2, True),
        ("~30,000x", 5437.2, False),  # the audit: AMP009's bfloat16 noise ratio, quoted for both dtypes
        ("~700x", 1648.6, False),  # the audit: AMP012's island error
        ("~1,650x", 1648.6, True),
        ("6.7e-7", 6.7212e-7, True),
        ("17%", 0.1713, True),
        ("0.01%", 9.8575e-5, True),
        ("0.01%", 2e-4, False),
        ("skipped 7 of", 7.0, True),
        ("0.044", None, False),
    ],
)
def test_a_quoted_number_agrees_to_the_precision_it_is_written_with(text, measured, agree):
    assert agrees(text, measured) == agree


def test_quoted_numbers_parse_as_written():
    assert quoted_number("65,000x") == 65000 and tolerance("65,000x") == 500
    assert quoted_number("0.045%") == pytest.approx(0.00045) and tolerance("17%") == pytest.approx(0.005)
    assert quoted_number("3.0e-3") == 3e-3 and tolerance("3.0e-3") == pytest.approx(5e-5)


@pytest.mark.parametrize("rule", ALL_RULES, ids=[rule.code for rule in ALL_RULES])
def test_severity_follows_the_measured_harm(rule):
    """rules/README.md: `error` where verify measures silent damage; a rule with no runtime
    prediction, or only loud failures, is a `warning`."""
    silent_harm = [p for p in rule.PREDICTIONS if not p.is_control and p.quantity != "raised"]
    if rule.severity == "error":
        assert silent_harm, f"{rule.code} is an error with no measured silent harm"
    if not rule.PREDICTIONS:
        assert rule.severity == "warning"


# --------------------------------------------------------------------------- fake fixtures

# A fixture without torch: it prints its scenario's values as a real one would.
FAKE_FIXTURE = """\
import argparse, json, sys, time
parser = argparse.ArgumentParser()
parser.add_argument("--device")
parser.add_argument("--dtype")
parser.add_argument("--scenario", action="append")
args, _ = parser.parse_known_args()  # a variant's --seed and the like: ignored
{behaviour}
print("human-readable lines come first")
history = {{"panel": {{"line": [1.0, 2.0]}}}}
print(json.dumps({{"torch": "fake", "results": {{s: values for s in args.scenario}}, "history": {{s: history for s in args.scenario}}}}))
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


def test_histories_and_the_mechanism_reach_the_row(tmp_path):
    write_pair(tmp_path, "MECH", "values = {'q': 2.0e-3, 'scale': 500.0}", "values = {'q': 1.0, 'scale': 500.0}")
    mechanism = Prediction("s", "q", "Shrunk by the scale.", compare="fixed/buggy", at_least=0.95, at_most=1.05, expected="buggy.scale")
    missing = Prediction("s", "q", "Shrunk by what?", compare="fixed/buggy", at_least=0.95, at_most=1.05, expected="buggy.nothing")
    run = verify([fake_rule("MECH", mechanism, missing)], "cpu", root=tmp_path)
    row, broken = run.rows
    assert (row.verdict, row.expected, row.value) == (CONFIRMED, 500.0, 1.0)
    assert row.history == {"buggy": {"panel": {"line": [1.0, 2.0]}}, "fixed": {"panel": {"line": [1.0, 2.0]}}}
    assert broken.verdict == ERROR and "buggy.py reported no `nothing` for scenario s" in broken.reason
    assert "fixed/buggy = 500 = 1.000 x expected 500, claim in [0.95, 1.05]" in render_text(run)
    assert json.loads(render_json(run))[0]["expected"] == "buggy.scale"


def test_a_hang_times_out_and_names_the_script(tmp_path):
    write_pair(tmp_path, "HANG", "values = {'q': 1000.0}", "time.sleep(60)")
    started = time.monotonic()
    run = verify([fake_rule("HANG", GROWS)], "cpu", timeout=3, root=tmp_path)
    assert time.monotonic() - started < 30
    (row,) = run.rows
    assert row.verdict == ERROR
    assert "timed out after 3 s while running fixtures/HANG/fixed.py (float16)" in row.reason
    assert row.buggy == 1000.0, "what finished before the hang still counts"


def test_after_a_hang_or_a_crash_the_other_scripts_run_in_a_fresh_process(tmp_path):
    # both rules share one worker: the hang and the crash must not take the others down
    write_pair(tmp_path, "HANG", "time.sleep(60)", "values = {'q': 1.0}")
    write_pair(tmp_path, "DIES", "import os; os._exit(9)", "values = {'q': 1.0}")
    write_pair(tmp_path, "GOOD", "values = {'q': 1000.0}", "values = {'q': 1.0}")
    rules = [fake_rule(code, GROWS) for code in ("HANG", "DIES", "GOOD")]
    run = verify(rules, "cpu", timeout=3, root=tmp_path, jobs=1)
    hang, dies, good = (rows_by_code(run)[code] for code in ("HANG", "DIES", "GOOD"))
    assert hang.verdict == ERROR and "timed out after 3 s while running fixtures/HANG/buggy.py (float16)" in hang.reason
    assert hang.fixed == 1.0
    assert dies.verdict == ERROR and "exited with 9 while running fixtures/DIES/buggy.py (float16)" in dies.reason
    assert dies.fixed == 1.0
    assert good.verdict == CONFIRMED
    assert run.processes == 3, "one worker, restarted once after the hang and once after the crash"


# Pins itself to one CPU beside three busy competitors, then needs 0.6 s of CPU: about 2.5 s
# of wall time, past a 1.5 s timeout, without anything being wrong.
LOADED = """\
import os, subprocess
cpu = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})
hog = f"import os, time\\nos.sched_setaffinity(0, {{{cpu}}})\\nend = time.monotonic() + 20\\nwhile time.monotonic() < end: pass"
hogs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(3)]
try:
    time.sleep(0.3)  # let them start
    start = time.process_time()
    while time.process_time() - start < 0.6:
        pass
finally:
    for each in hogs:
        each.kill()
values = {'q': 1.0}
"""


@pytest.mark.skipif(
    not (hasattr(os, "sched_setaffinity") and os.path.exists("/proc/self/schedstat")),
    reason="needs Linux CPU affinity and /proc/PID/schedstat to load one CPU on purpose",
)
def test_the_timeout_does_not_count_time_spent_waiting_for_a_cpu(tmp_path):
    write_pair(tmp_path, "LOAD", "values = {'q': 1000.0}", LOADED)
    started = time.monotonic()
    (row,) = verify([fake_rule("LOAD", GROWS)], "cpu", timeout=1.5, root=tmp_path).rows
    elapsed = time.monotonic() - started
    if "the machine is starved of CPU" in (row.reason or ""):
        # Past ten times the limit in wall time the watchdog stops any script, waiting or not
        # (its last resort, tested below): a machine this loaded by others cannot show this.
        pytest.skip(f"the machine was too loaded to tell: {row.reason}")
    assert row.verdict == CONFIRMED, row.reason
    assert elapsed > 2, "the load did not slow the script down: this test proved nothing"


def test_the_watchdog_discounts_waiting_for_a_cpu_but_not_without_end():
    class Dog(Watchdog):
        waited = 0.0

        def _waited(self):
            return self.waited

    dog = Dog(pid=0, timeout=10)
    dog._since = time.monotonic() - 30  # 30 s into the script ...
    dog.waited = 25  # ... 25 of them waiting for a CPU: 5 s of running
    assert dog.overrun() is None
    dog.waited = 15  # 15 s of running
    assert dog.overrun() == "timed out after 10 s (not counting 15 s spent waiting for a CPU)"
    dog._since, dog.waited = time.monotonic() - 150, 145  # 5 s of running, but 150 s of wall time
    assert dog.overrun() == "timed out after 10 s (150 s of wall time: the machine is starved of CPU)"


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


def test_a_mechanism_that_did_not_happen_is_not_reproduced(tmp_path):
    write_pair(tmp_path, "NOOP", "values = {'q': 0.0, 'overflows': 0.0}", "values = {'q': 0.0, 'overflows': 0.0}")
    same = Prediction("s", "q", "No more skipped steps than the fixed run.", compare="buggy-fixed", at_least=0, at_most=0,
                      happened="fixed.overflows")
    (row,) = verify([fake_rule("NOOP", same)], "cpu", root=tmp_path).rows
    assert row.value == 0 and row.verdict == NOT_REPRODUCED
    assert row.reason == "the mechanism did not happen: fixed.overflows = 0, must be > 0"


def test_predictions_about_another_device_are_skipped(tmp_path):
    write_pair(tmp_path, "DEV", "values = {'q': 1000.0}", "values = {'q': 1.0}")
    on_cpu = Prediction("s", "q", "Only on the CPU.", compare="buggy/fixed", at_least=100, devices=("cpu",))
    on_cuda = Prediction("s", "q", "Only on CUDA.", compare="buggy/fixed", at_least=100, devices=("cuda",))
    cpu_row, cuda_row = verify([fake_rule("DEV", on_cpu, on_cuda)], "cpu", root=tmp_path).rows
    assert cpu_row.verdict == CONFIRMED
    assert (cuda_row.verdict, cuda_row.reason) == (SKIPPED, "the claim is about cuda only")
    planned = plan([fake_rule("DEV", on_cpu, on_cuda)], "cuda", ALL_DTYPES)
    assert [(entry.prediction.devices, entry.skip) for entry in planned if entry.dtype == "float16"] == [
        (("cpu",), "the claim is about cpu only"),
        (("cuda",), None),
    ]


def test_the_cuda_claims_are_planned_for_cuda_and_the_cpu_ones_for_the_cpu():
    """No GPU here: what a `--device cuda` run would check is the selection, declared per claim.
    AMP013's `binary_cross_entropy` raises under CUDA autocast and CUDA runs softmax in float32:
    claims of their own, never the CPU's claims run on CUDA; AMP011's mistake needs a device
    that is not CUDA."""
    by_code = {rule.code: rule for rule in ALL_RULES}

    def ran(device, code):
        return {
            (entry.prediction.scenario, entry.prediction.quantity, entry.dtype)
            for entry in plan([by_code[code]], device, ALL_DTYPES)
            if entry.skip is None
        }

    assert ("bce-probabilities-confident", "raised", "float16") in ran("cuda", "AMP013")
    assert ("bce-probabilities-confident", "raised", "bfloat16") in ran("cuda", "AMP013")
    assert ("bce-probabilities-confident", "first_loss_error", "float16") not in ran("cuda", "AMP013")
    assert ("bce-probabilities-confident", "first_loss_error", "float16") in ran("cpu", "AMP013")
    assert ("log-softmax-confident", "precision_nonfinite", "float16") not in ran("cuda", "AMP013")
    assert ("log-softmax-confident", "nonfinite_losses", "float16") in ran("cuda", "AMP013")
    assert not any(quantity == "raised" for _, quantity, _ in ran("cpu", "AMP013"))
    assert ran("cuda", "AMP011") == set() and ran("cpu", "AMP011")
    # where a scenario's CPU claim is skipped on CUDA, its CUDA claim says what happens there
    for rule in ALL_RULES:
        for prediction in rule.PREDICTIONS:
            if prediction.devices == ("cpu",) and rule.code != "AMP011":
                assert any(
                    "cuda" in other.devices and other.scenario == prediction.scenario for other in rule.PREDICTIONS
                ), f"{rule.code} {prediction.scenario}: a CPU-only claim with nothing said about CUDA"


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
    assert lines[0].startswith(f"amplint verify: torch fake, device cpu, fixtures from {mixed_run.root}, 1 fixture process,")
    assert lines[2].split() == ["rule", "device", "dtype", "scenario", "quantity", "kind", "buggy", "fixed", "check", "verdict"]
    assert "buggy/fixed = 1000, claim >= 100" in lines[3] and lines[3].endswith("confirmed")
    assert "fixed/buggy = inf" in lines[4]
    assert lines[5].endswith("skipped: the claim is about bfloat16 only")
    assert lines[-1] == (
        "3 predictions: 2 effects confirmed, 0 controls held, 0 effects not reproduced, 0 controls not held, "
        "1 skipped, 0 errors"
    )


def test_controls_are_counted_apart_and_never_as_confirmations(tmp_path):
    write_pair(tmp_path, "CTL", "values = {'q': 1000.0, 'same': 2.0}", "values = {'q': 1.0, 'same': 2.0}")
    control = Prediction("s", "same", "Control: no difference.", compare="buggy/fixed", at_least=0.99, at_most=1.01, kind="control")
    run = verify([fake_rule("CTL", GROWS, control)], "cpu", root=tmp_path)
    assert summary_text(run) == (
        "2 predictions: 1 effect confirmed, 1 control held, 0 effects not reproduced, 0 controls not held, 0 skipped, 0 errors"
    )
    text = render_text(run).splitlines()
    assert text[3].split()[5] == "effect" and text[3].endswith("confirmed")
    assert text[4].split()[5] == "control" and text[4].endswith("held")
    assert [obj["kind"] for obj in json.loads(render_json(run))] == ["effect", "control"]


# --------------------------------------------------------------------------- the command


@pytest.mark.slow(seconds=20)
def test_a_copy_run_with_pythonpath_runs_its_own_fixtures_and_says_where_they_come_from(tmp_path):
    """The audit's trap: a mutated copy of the checkout run with `PYTHONPATH=copy` silently ran
    the installed checkout's fixtures (an editable install maps `amplint.fixtures` to it), and
    reported a buggy.py replaced by its fixed.py as 7/7 effects confirmed."""
    pytest.importorskip("torch")
    copy = tmp_path / "copy"
    for folder in ("amplint", "fixtures"):
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "fixtures" / "AMP016" / "buggy.py").write_text((REPO / "fixtures" / "AMP016" / "fixed.py").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "amplint", "verify", "AMP016", "--dtype", "bfloat16"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(copy)),
        timeout=120,
    )
    header = done.stdout.splitlines()[0]
    assert f"fixtures from {copy / 'fixtures'}," in header, header
    assert done.returncode == 1 and "0 effects confirmed, 0 controls held, 1 effect not reproduced" in done.stdout, done.stdout
    # the rules still come from the installed checkout: said, not hidden
    assert f"the fixtures come from {copy / 'fixtures'} but the rules (the predictions) from {REPO / 'rules'}" in done.stderr


def test_usage_errors_exit_2(capsys, tmp_path):
    assert command.main(["AMP999"]) == 2
    assert "no rule matches AMP999" in capsys.readouterr().err
    assert command.main(["--timeout", "0"]) == 2
    assert command.main(["--device", "tpu"]) == 2
    assert command.main(["--dtype", "float32"]) == 2
    capsys.readouterr()
    # NaN compares false with everything: it used to pass `<= 0` and crash in subprocess
    for value in ("nan", "inf", "-inf"):
        assert command.main([f"--timeout={value}"]) == 2
        assert "--timeout must be a positive number of seconds" in capsys.readouterr().err
    if importlib.util.find_spec("torch") is not None:
        assert command.main(["AMP001", "--report", str(tmp_path / "no" / "such" / "dir" / "r.html")]) == 2
        assert "cannot write the report" in capsys.readouterr().err


def test_timeout_nan_is_a_usage_error_through_the_cli():
    result = subprocess.run(
        [sys.executable, "-m", "amplint", "verify", "--timeout", "nan"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert result.returncode == 2 and "internal error" not in result.stderr, result.stderr
    assert "--timeout must be a positive number of seconds, not nan" in result.stderr


def test_the_cuda_probe_does_not_import_a_torch_py_from_the_callers_folder(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "torch.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "class cuda:\n    is_available = staticmethod(lambda: True)\n"
    )
    # The torch the probe should find: one on PYTHONPATH, as a user's environment may put it
    # (and quicker to import than the real one).
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text("class cuda:\n    is_available = staticmethod(lambda: False)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    monkeypatch.chdir(tmp_path)
    assert command._cuda_available(60) == (False, None)
    assert not marker.exists(), "the probe imported ./torch.py"
    assert command.resolve_device("auto", 60) == ("cpu", None)


def test_dtype_all_plans_every_prediction_at_every_dtype_it_is_about():
    # Rules with no runtime claim (AMP100 reads comments) get one skipped row, not plans.
    assert [entry.skip for entry in plan([r for r in ALL_RULES if not r.PREDICTIONS], "cpu", ALL_DTYPES)] == [
        "the rule makes no runtime prediction"
    ] * sum(1 for r in ALL_RULES if not r.PREDICTIONS)
    predicting = [rule for rule in ALL_RULES if rule.PREDICTIONS]
    planned = plan(predicting, "cpu", ALL_DTYPES)
    expected = [(rule.code, p, dtype) for rule in ALL_RULES for p in rule.PREDICTIONS for dtype in p.dtypes]
    assert [(entry.rule.code, entry.prediction, entry.dtype) for entry in planned] == expected
    assert all((entry.skip is None) == ("cpu" in entry.prediction.devices) for entry in planned)
    bfloat16 = plan(predicting, "cpu", "bfloat16")
    assert [entry.prediction for entry in bfloat16 if entry.skip is None] == [
        p for rule in ALL_RULES for p in rule.PREDICTIONS if "bfloat16" in p.dtypes and "cpu" in p.devices
    ]


def test_without_torch_verify_says_how_to_get_it_and_linting_still_works():
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # as if torch were not installed\n"
        "from amplint.lint.engine import lint_text\n"
        "assert lint_text('import torch\\nwith torch.autocast(\"cuda\"):\\n    loss = m(x)\\n    loss.backward()\\n')\n"
        "from amplint.harness.command import main\n"
        "sys.exit(main(['AMP003']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "pip install 'amplint[harness]'" in result.stderr
    assert "Linting does not need PyTorch" in result.stderr


# --------------------------------------------------------------------------- the real fixtures


@pytest.mark.slow(seconds=90)
def test_every_prediction_is_confirmed_on_cpu_at_every_dtype(verified):
    ran = [row for row in verified.rows if row.ran]
    problems = [render_json(VerifyRun([row], "cpu", None, 0, 0.0)) for row in ran if row.verdict != CONFIRMED]
    assert not problems, "\n".join(problems)
    assert verified.ok and verified.processes == min(len([r for r in ALL_RULES if r.PREDICTIONS]), os.cpu_count() or 1)
    expected = [(rule.code, p.scenario, p.quantity, dtype) for rule in ALL_RULES for p in rule.PREDICTIONS for dtype in p.dtypes]
    assert [(row.code, row.prediction.scenario, row.prediction.quantity, row.dtype) for row in verified.rows] == expected
    assert {row.dtype for row in ran} == {"float16", "bfloat16"}
    # what does not run on the CPU is a claim about CUDA only, skipped as such
    for row in verified.rows:
        assert row.ran == ("cpu" in row.prediction.devices), row
    # every row carries both scripts' per-step curves for the report
    for row in ran:
        assert all(row.history.get(which) for which in ("buggy", "fixed")) or "raised" in row.prediction.quantity, row


@pytest.mark.slow(seconds=90)
def test_the_numbers_the_docs_quote_are_the_ones_verify_measures(verified):
    """Each rule's "What goes wrong at runtime" quotes its numbers from a prediction, and each
    agrees with this run's measurement at every dtype the claim is about."""
    problems = [problem for rule in ALL_RULES for problem in quote_problems(rule, verified.rows)]
    assert not problems, "\n".join(problems)
    assert not {rule.code: unquoted(rule) for rule in ALL_RULES if unquoted(rule)}, "ratios and shares no prediction quotes"
    assert sum(len(p.quotes) for rule in ALL_RULES for p in rule.PREDICTIONS) >= 50
    # docs/verify.md repeats the rules' numbers; any other ratio or share there is unchecked
    assert not unbacked(VERIFY_MD.read_text(), ALL_RULES), "docs/verify.md: numbers no rule quotes"


VERIFY_MD = REPO / "docs" / "verify.md"


def _quoted_summaries(pattern: str):
    """The lines of docs/verify.md that quote a summary `verify` prints."""
    return [line for line in VERIFY_MD.read_text().splitlines() if re.fullmatch(pattern, line)]


@pytest.mark.slow(seconds=90)
def test_the_summary_docs_verify_md_quotes_is_the_one_verify_prints(verified):
    assert _quoted_summaries(r"\d+ predictions: .*") == [summary_text(verified)]


@pytest.fixture(scope="module")
def perturbed():
    """Every prediction again, at every dtype it is about, under each perturbation of the
    fixtures' incidental details (`amplint verify --perturb` without the run as written, which
    the shared `verified` run is): one run, ~6x the shared run's work, in one fixture process
    (so that it keeps to one CPU, as the test worker that waits for it would: the other
    workers' tests, some timed against their CPU budget, keep theirs)."""
    pytest.importorskip("torch")
    return verify([rule for rule in ALL_RULES if rule.PREDICTIONS], "cpu", ALL_DTYPES, variants=PERTURBATIONS, jobs=1)


@pytest.mark.slow(seconds=120)
def test_every_claim_holds_with_other_seeds_learning_rates_and_steps(perturbed, verified):
    """The audit's fragile claims: a claim about the mistake must not hang on one seed, one
    learning rate or one length of training. Each prediction, effect or control, is confirmed
    with seeds 1 and 2, the learning rates x0.5 and x1.5, and the steps x0.5 and x1.5; and each
    perturbation really changed what the fixtures measured (a fixture that ignored its option
    would make this test vacuous)."""
    assert perturbed.variants == tuple(variant.name for variant in PERTURBATIONS)
    failed = [
        f"{row.variant}: {row.code} {row.prediction.scenario}/{row.prediction.quantity} ({row.dtype}) {row.verdict}: "
        f"{row.reason or row.value}"
        for row in perturbed.rows
        if row.ran and row.verdict != CONFIRMED
    ]
    assert not failed, "\n".join(failed)
    ran = [row for row in verified.rows if row.ran]
    assert len([row for row in perturbed.rows if row.ran]) == len(ran) * len(PERTURBATIONS)
    unchanged = []
    for code in sorted({key[0] for key in verified.outputs}):
        for variant in PERTURBATIONS:
            same = all(
                (run.results, run.history) == (perturbed.outputs[key[:3] + (variant.name,)].results,
                                               perturbed.outputs[key[:3] + (variant.name,)].history)
                for key, run in verified.outputs.items()
                if key[0] == code
            )
            if same:
                unchanged.append(f"{code} {variant.name}")
    assert not unchanged, f"the fixtures measured the same with and without: {unchanged}"
    # docs/verify.md quotes the summary of `verify --dtype all --perturb`: this run and the shared one
    both = VerifyRun(verified.rows + perturbed.rows, "cpu", None, 0, 0.0, variants=(AS_WRITTEN.name,) + perturbed.variants)
    assert _quoted_summaries(r"\d+ checks \(.*") == [summary_text(both)]


def test_a_variant_passes_its_options_to_every_script(tmp_path):
    write_pair(tmp_path, "VARY", "values = {'q': 1000.0, 'argv': float(len(sys.argv))}", "values = {'q': 1.0, 'argv': 0.0}")
    run = verify([fake_rule("VARY", GROWS)], "cpu", root=tmp_path, variants=(AS_WRITTEN,) + PERTURBATIONS)
    assert [row.variant for row in run.rows] == [variant.name for variant in (AS_WRITTEN,) + PERTURBATIONS]
    assert all(row.verdict == CONFIRMED for row in run.rows)
    # the fake ignores the options it does not know; what it was given shows in its argv
    seen = {key[3]: out.results["s"]["argv"] for key, out in run.outputs.items() if key[2] == "buggy"}
    assert seen["as written"] == 7 and seen["seed 1"] == 9 and seen["steps x1.5"] == 9
    assert summary_text(run).startswith("7 checks (1 prediction, as written and under 6 perturbations): 7 effects confirmed")
    assert render_text(run).splitlines()[2].split()[:2] == ["variant", "rule"]


def _key(row):
    return (row.code, row.prediction.scenario, row.prediction.quantity, row.dtype)


def _controls(run: VerifyRun):
    """The controls that ran: the claims that the mistake makes no difference in some regime."""
    return {_key(row) for row in run.rows if row.ran and row.prediction.is_control}


@pytest.mark.slow(seconds=90)
def test_with_each_buggy_py_replaced_by_its_fixed_py_every_effect_fails(verified):
    """Break every fixture the simplest way: no mistake at all, buggy.py replaced by fixed.py.
    Every claim that the mistake does something (a ratio away from 1, a loss stuck, a
    mechanism's predicted size) must then be `not reproduced`; only the declared controls,
    which claim that nothing differs, hold. This reuses the shared CPU run: the fixtures are
    seeded and single-threaded, so fixed.py run as buggy.py reports what it reported as itself."""
    fixed_twice = judged_as_identical(verified, "fixed")
    survivors = {_key(row) for row in fixed_twice if row.verdict == CONFIRMED}
    assert all(row.verdict in (CONFIRMED, NOT_REPRODUCED) for row in fixed_twice if row.ran)
    assert survivors == _controls(verified), "an effect that holds without the mistake proves nothing"
    # fixed.py replaced by buggy.py: every effect that compares the two runs fails; one that
    # bounds the buggy run against a stated reference (`buggy <= 0.001`) reads buggy.py alone
    buggy_twice = judged_as_identical(verified, "buggy")
    against_fixed = {_key(row) for row in buggy_twice if row.verdict == CONFIRMED and row.prediction.compare != "buggy"}
    assert not against_fixed - _controls(verified)
    effects = [row for row in verified.rows if row.ran and not row.prediction.is_control]
    assert len(effects) >= 80 and len(_controls(verified)) >= 20


def test_the_sharpened_claims_fail_on_an_identical_pair(verified):
    """The audit's cases, spelled out: what each identical pair measures and why it fails."""
    fixed_twice = {_key(row): row for row in judged_as_identical(verified, "fixed")}
    buggy_twice = {_key(row): row for row in judged_as_identical(verified, "buggy")}
    # Adam's [1, 10] band used to pass with no effect at all (ratio exactly 1)
    for code in ("AMP001", "AMP003"):
        row = fixed_twice[(code, "adam", "first_update", "float16")]
        assert (row.value, row.verdict) == (1.0, NOT_REPRODUCED)
    # the mechanisms: no shrinkage at all is not "shrunk by the scale"
    row = fixed_twice[("AMP001", "sgd", "first_update", "float16")]
    assert row.prediction.expected and row.value == pytest.approx(1 / 65536) and row.verdict == NOT_REPRODUCED
    row = fixed_twice[("AMP003", "sgd", "logged_grad_norm", "float16")]
    assert row.prediction.expected and row.verdict == NOT_REPRODUCED
    # a loss that trains is not stuck
    assert fixed_twice[("AMP001", "sgd", "loss_moved", "float16")].verdict == NOT_REPRODUCED
    # AMP005's overflow claim used to read fixed.py alone (4 skipped steps, whatever buggy.py did)
    for pair in (fixed_twice, buggy_twice):
        row = pair[("AMP005", "adam-overflow", "applied_overflows", "float16")]
        assert row.value == 0 and row.verdict == NOT_REPRODUCED
    # surviving gradients are no coarser than themselves; the decay is not weaker than itself
    assert fixed_twice[("AMP002", "small-grad", "grad_rel_error", "float16")].verdict == NOT_REPRODUCED
    assert fixed_twice[("AMP005", "adam-l2", "weight_norm", "float16")].verdict == NOT_REPRODUCED
    assert fixed_twice[("AMP006", "fp32-function", "grad_rel_error", "bfloat16")].verdict == NOT_REPRODUCED


# The audit's targeted variants: the mistake removed, or its mechanism disarmed, some other way
# than by copying fixed.py. Each: the rule, edits to a copy of its scripts ({which: [(old, new,
# count)]}), and the claims that must then fail, (scenario, quantity, dtype): the reason every
# mechanism claim among them gives (None: any).
SCALER_OFF = ("    scaler = torch.amp.GradScaler(device)\n", "    scaler = torch.amp.GradScaler(device, enabled=False)\n")
NOT_HAPPENED = "the mechanism did not happen"
TARGETED = {
    # the rule's other fix, gated on the device, as buggy.py: it asks for no CUDA autocast on the
    # CPU, and every claim about the mistake fails (the gate closed), not only the gated one
    "AMP011 gated": (
        "AMP011",
        {"buggy": [("enabled=use_autocast):  # the mistake", 'enabled=use_autocast and device.type == "cuda"):  #', 1)]},
        {
            **{("gated", "cuda_region_elsewhere", dtype): None for dtype in ("float16", "bfloat16")},
            **{("sgd", "low_precision_output", dtype): NOT_HAPPENED for dtype in ("float16", "bfloat16")},
            **{("sgd", "max_diff_from_float32", dtype): NOT_HAPPENED for dtype in ("float16", "bfloat16")},
        },
    ),
    # the scaler off (scale 1): buggy.py and fixed.py step alike, and a ratio to the scale is
    # 1 / 1, which must not read as the mechanism confirmed
    "AMP001 scaler off": (
        "AMP001",
        {"buggy": [SCALER_OFF + (1,)]},
        {("sgd", "first_update", dtype): NOT_HAPPENED for dtype in ("float16", "bfloat16")},
    ),
    "AMP003 scaler off": (
        "AMP003",
        {"buggy": [SCALER_OFF + (1,)]},
        {
            **{("sgd", "applied_grad_norm", dtype): NOT_HAPPENED for dtype in ("float16", "bfloat16")},
            **{("sgd", "logged_grad_norm", dtype): NOT_HAPPENED for dtype in ("float16", "bfloat16")},
        },
    ),
    "AMP009 scaler off": (
        "AMP009",
        {"buggy": [SCALER_OFF + (3,)]},
        {
            **{("logged-norm", "logged_grad_norm", dtype): NOT_HAPPENED for dtype in ("float16", "bfloat16")},
            **{("penalty", "penalty_grad_norm", dtype): NOT_HAPPENED for dtype in ("float16", "bfloat16")},
        },
    ),
    "AMP019 scaler off": (
        "AMP019",
        {"buggy": [SCALER_OFF + (1,)]},
        {("sgd", "logged_loss", dtype): NOT_HAPPENED for dtype in ("float16", "bfloat16")},
    ),
    # a clip that never engages: the update is not clipped at all, in either script
    "AMP003 no clipping": (
        "AMP003",
        {which: [("MAX_NORM = 0.25", "MAX_NORM = 1e12", 1)] for which in ("buggy", "fixed")},
        {
            **{("sgd", "applied_grad_norm", dtype): NOT_HAPPENED for dtype in ("float16", "bfloat16")},
            **{("sgd", "first_update", dtype): None for dtype in ("float16", "bfloat16")},
        },
    ),
    # the stale cache cleared after each step, the step still inside the whole-loop region
    "AMP004 cache cleared": (
        "AMP004",
        {
            "buggy": [
                (
                    "            scaler.update()\n            after_step(model, before, loss, history)\n\n\ndef step_in_disabled_region",
                    "            scaler.update()\n            torch.clear_autocast_cache()\n"
                    "            after_step(model, before, loss, history)\n\n\ndef step_in_disabled_region",
                    1,
                )
            ]
        },
        {
            (scenario, quantity, dtype): None
            for scenario in ("sgd-whole-loop", "adam-whole-loop")
            for quantity in ("logged_loss_change", "true_loss")
            for dtype in ("float16", "bfloat16")
        },
    ),
    # the loss computed from float32 logits: no low precision, so no NaN is the low precision's
    "AMP013 float32 logits": (
        "AMP013",
        {"buggy": [("                z = model(x)\n", "                z = model(x).float()\n", 1)]},
        {
            ("hand-bce-confident", "precision_nonfinite", "float16"): None,
            ("hand-bce-confident", "precision_nonfinite", "bfloat16"): None,
            ("hand-bce-epsilon-confident", "precision_nonfinite", "float16"): None,
            ("hand-bce-moderate", "precision_nonfinite", "bfloat16"): None,
            ("log-sigmoid-confident", "precision_nonfinite", "float16"): None,
            ("log-softmax-confident", "precision_nonfinite", "float16"): None,
        },
    ),
    # a float64 island escapes autocast: it is not low precision
    "AMP012 float64 island": (
        "AMP012",
        {"buggy": [("            f = features.float()", "            f = features.double()", 1)]},
        {("small-activations", "island_low_precision", "float16"): None},
    ),
    # the bug kept, the targets small: nothing overflows, so there is no mechanism to measure
    "AMP007 no overflow": (
        "AMP007",
        {which: [('SCENARIOS = {"overflow": 1000.0}', 'SCENARIOS = {"overflow": 1.0}', 1)] for which in ("buggy", "fixed")},
        {("overflow", "skipped_after_resume", "float16"): NOT_HAPPENED},
    ),
    "AMP008 no overflow": (
        "AMP008",
        {which: [("TARGET_SIZE = 1000.0", "TARGET_SIZE = 1.0", 1)] for which in ("buggy", "fixed")},
        {("per-epoch", "skipped_steps", "float16"): NOT_HAPPENED},
    ),
    # the rule's other fix as buggy.py: a scaler per network, each updated once per iteration
    "AMP018 a scaler each": (
        "AMP018",
        {
            "buggy": [
                (
                    "    scaler = torch.amp.GradScaler(device, growth_interval=GROWTH_INTERVAL)\n",
                    "    scaler = torch.amp.GradScaler(device, growth_interval=GROWTH_INTERVAL)\n"
                    "    scaler_second = torch.amp.GradScaler(device, growth_interval=GROWTH_INTERVAL)\n",
                    1,
                ),
                ("scaler.scale(loss_second)", "scaler_second.scale(loss_second)", 1),
                ("stepped(scaler, opt_second, second)", "stepped(scaler_second, opt_second, second)", 1),
                ('        scaler.update()\n        history["steps"]', '        scaler_second.update()\n        history["steps"]', 1),
            ]
        },
        {
            ("sgd", "scale_doublings", "bfloat16"): None,
            ("adam", "scale_doublings", "bfloat16"): None,
            ("sgd", "scale_growths", "float16"): None,
            ("adam", "scale_growths", "float16"): None,
        },
    ),
}


@pytest.fixture(scope="module")
def targeted(verified, tmp_path_factory):
    """Per variant, the targeted claims judged on its edited pair (an unedited script's numbers
    are the shared run's): {label: [row]}."""
    root = tmp_path_factory.mktemp("targeted")
    specs, folders = [], {}
    for number, (label, (code, edits, claims)) in enumerate(TARGETED.items()):
        # each variant under a code of its own, so that two variants of one rule do not collide
        folders[label] = alias = f"{code}-{number}"
        (root / alias).mkdir()
        for which, changes in edits.items():
            text = (fixture_root() / code / f"{which}.py").read_text()
            for old, new, count in changes:
                assert text.count(old) == count, f"{label}: the edit {old!r} no longer matches {which}.py"
                text = text.replace(old, new)
            (root / alias / f"{which}.py").write_text(text)
            for dtype in ("float16", "bfloat16"):
                scenarios = sorted({scenario for (scenario, _, d) in claims if d == dtype})
                if scenarios:
                    specs.append(script_spec(alias, which, root / alias / f"{which}.py", "cpu", dtype, scenarios))
    runs, _ = run_scripts(specs, timeout=120)
    found = {}
    for label, (code, edits, claims) in TARGETED.items():
        outputs = dict(verified.outputs)
        outputs.update({(code,) + key[1:]: run for key, run in runs.items() if key[0] == folders[label]})
        entries = [entry for entry in verified.planned if _key_of(entry)[0] == code and _key_of(entry)[1:] in claims]
        found[label] = judge_all(entries, "cpu", outputs)
    return found


@pytest.mark.slow(seconds=40)
def test_each_claim_fails_when_its_cause_is_removed_another_way(targeted):
    for label, (code, _, claims) in TARGETED.items():
        rows = targeted[label]
        assert {_key(row)[1:] for row in rows} == set(claims), label
        for row in rows:
            assert row.verdict == NOT_REPRODUCED, (label, _key(row), row.verdict, row.reason, row.value)
            reason = claims[_key(row)[1:]]
            if reason and (row.prediction.happened or row.prediction.expected):
                assert row.reason and row.reason.startswith(reason), (label, _key(row), row.reason)


# Break each control with a small edit to a copy of its buggy.py: (old text, new text, count).
# Each edit makes the buggy run differ from the fixed one in the way the control rules out.
BROKEN = {
    "AMP002": [
        # ordinary gradients made tiny: zeros appear where the control says none do
        ('SCENARIOS = {"ordinary": 1.0,', 'SCENARIOS = {"ordinary": 1e-5,', 1),
        # a "bfloat16" run that is really float16: the tiny gradients underflow
        ("dtype=amp_dtype)", "dtype=torch.float16)", 1),
    ],
    "AMP004": [
        # the cache left on, or not cleared: the whole-loop controls freeze like the buggy run
        ("dtype=amp_dtype, cache_enabled=False)", "dtype=amp_dtype, cache_enabled=True)", 1),
        ("            torch.clear_autocast_cache()  # the next forward", "            pass  # the next forward", 1),
        # one region around the whole loop where the controls have one per iteration
        ('"sgd-per-iteration": ("sgd", "per_iteration")', '"sgd-per-iteration": ("sgd", "whole_loop")', 1),
        ('"adam-per-iteration": ("adam", "per_iteration")', '"adam-per-iteration": ("adam", "whole_loop")', 1),
        # a "bfloat16" Adafactor run whose region is really float16: NaN, far outside the 1% band
        (
            "            with torch.autocast(device_type=device, dtype=amp_dtype):\n"
            "                loss = nn.functional.mse_loss(model(x), y)\n                scaler.scale(loss).backward()  # the mistake",
            "            with torch.autocast(device_type=device, dtype=torch.float16):\n"
            "                loss = nn.functional.mse_loss(model(x), y)\n                scaler.scale(loss).backward()  # the mistake",
            1,
        ),
    ],
    "AMP005": [
        # an Adam that differs from the fixed one (twice the learning rate)
        ('"adam": (lambda params: torch.optim.Adam(params, lr=1e-3 * LR_SCALE)', '"adam": (lambda params: torch.optim.Adam(params, lr=2e-3 * LR_SCALE)', 1),
        ('"adam-overflow": (lambda params: torch.optim.Adam(params, lr=1e-3 * LR_SCALE)', '"adam-overflow": (lambda params: torch.optim.Adam(params, lr=2e-3 * LR_SCALE)', 1),
        # AdamW's decay lost, as Adam's L2 decay is: 2% off where the control allows 0.1%
        ("torch.optim.AdamW(params, lr=1e-3 * LR_SCALE, weight_decay=1.0)", "torch.optim.AdamW(params, lr=1e-3 * LR_SCALE, weight_decay=0.0)", 1),
        # no unscale_ before the plain step: scaler.update() raises
        ("            scaler.unscale_(optimizer)\n", "            pass\n", 1),
    ],
    "AMP006": [
        # a different built-in model
        ("nn.GELU()", "nn.ReLU()", 1),
        # with custom_fwd/custom_bwd the function's backward runs in float32 even inside the region
        ("    def forward(ctx, a, b):", '    @torch.amp.custom_fwd(device_type="cpu")\n    def forward(ctx, a, b):', 1),
        ("    def backward(ctx, grad):", '    @torch.amp.custom_bwd(device_type="cpu")\n    def backward(ctx, grad):', 1),
    ],
    "AMP011": [
        # a region that does switch on for the device: the losses are no longer float32's
        ('torch.autocast("cuda", dtype=amp_dtype', "torch.autocast(device.type, dtype=amp_dtype", 1),
    ],
    "AMP012": [
        # a "bfloat16" run that is really float16: the large features overflow
        ("dtype=amp_dtype)", "dtype=torch.float16)", 1),
    ],
    "AMP019": [
        # a buggy run that trains otherwise (twice the learning rate): the float32 loss moves apart
        ('"sgd": lambda params: torch.optim.SGD(params, lr=0.05 * LR_SCALE)', '"sgd": lambda params: torch.optim.SGD(params, lr=0.1 * LR_SCALE)', 1),
    ],
    "AMP013": [
        # a "bfloat16" run that is really float16: log(sigmoid) reaches log(0)
        ("dtype=amp_dtype)", "dtype=torch.float16)", 1),
        # the moderate logits made confident: the hand-written loss is NaN
        ('"hand-bce-moderate": ("hand-bce", 2.0, 1, 7.0)', '"hand-bce-moderate": ("hand-bce", 2.0, 1, 12.0)', 1),
        # a binary_cross_entropy that is not the with-logits loss (labels flipped)
        ("F.binary_cross_entropy(torch.sigmoid(z), y)", "F.binary_cross_entropy(torch.sigmoid(z), 1 - y)", 1),
    ],
    "AMP021": [
        # a "bfloat16" run that is really float16: -1e9 becomes -inf, the padded rows NaN
        ("dtype=amp_dtype)", "dtype=torch.float16)", 1),
        # a buggy run that trains otherwise: twice the learning rate, where the control says they train alike
        ("lr=0.05 * LR_SCALE)", "lr=0.1 * LR_SCALE)", 1),
    ],
    "AMP022": [
        # a "bfloat16" run that is really float16: 1e-8 is 0, the padded rows NaN
        ("dtype=amp_dtype)", "dtype=torch.float16)", 1),
    ],
}
# The claims the AMP006 custom_bwd edit must break besides the `sgd` control: the mechanism.
MECHANISMS_BROKEN = {
    ("AMP006", "fp32-function", "grad_rel_error", "float16"),
    ("AMP006", "fp32-function", "grad_rel_error", "bfloat16"),
    ("AMP006", "fp32-function-small-grad", "zero_grad_fraction", "float16"),
}


@pytest.fixture(scope="module")
def broken(verified, tmp_path_factory):
    """The controls and mechanisms judged on pairs whose buggy.py is an edited copy. Their
    fixed.py is untouched, so its numbers are the shared run's: only the edited buggy scripts
    run, all in one process, for the scenarios and dtypes in question."""
    root = tmp_path_factory.mktemp("broken")
    wanted = _controls(verified) | MECHANISMS_BROKEN
    specs = []
    for code, edits in BROKEN.items():
        (root / code).mkdir()
        text = (fixture_root() / code / "buggy.py").read_text()
        for old, new, count in edits:
            assert text.count(old) == count, f"{code}: the edit {old!r} no longer matches buggy.py"
            text = text.replace(old, new)
        (root / code / "buggy.py").write_text(text)
        for dtype in ("float16", "bfloat16"):
            scenarios = sorted({scenario for (each, scenario, _, d) in wanted if each == code and d == dtype})
            if scenarios:
                specs.append(script_spec(code, "buggy", root / code / "buggy.py", "cpu", dtype, scenarios))
    runs, _ = run_scripts(specs, timeout=120)
    outputs = dict(verified.outputs)
    outputs.update(runs)
    rows = judge_all([entry for entry in verified.planned if _key_of(entry) in wanted], "cpu", outputs)
    return {_key(row): row for row in rows}


def _key_of(entry):
    return (entry.rule.code, entry.prediction.scenario, entry.prediction.quantity, entry.dtype)


def test_every_control_fails_on_a_pair_that_breaks_it(broken, verified):
    assert set(broken) == _controls(verified) | MECHANISMS_BROKEN
    survivors = {key: (row.verdict, row.reason or row.value) for key, row in broken.items() if row.verdict != NOT_REPRODUCED}
    assert not survivors, survivors
    # Adafactor in a float16 region: NaN
    assert math.isnan(broken[("AMP004", "adafactor-per-iteration", "true_loss", "bfloat16")].value)
    # the cache is the mechanism: left on (or not cleared), the "controls" freeze like the buggy run
    assert broken[("AMP004", "sgd-whole-loop-no-cache", "true_loss", "float16")].value > 10
    assert broken[("AMP004", "sgd-whole-loop-cache-cleared", "true_loss", "float16")].value > 10
    # AdamW's decay switched off is 2% off, well outside the control's 0.1%
    assert broken[("AMP005", "adamw", "weight_norm", "float16")].value > 1.01
    # with custom_bwd the float32 function's gradients are exact again
    assert broken[("AMP006", "fp32-function", "grad_rel_error", "float16")].buggy == 0


@pytest.mark.slow(seconds=20)
def test_amplint_verify_through_the_cli_with_a_report(tmp_path):
    pytest.importorskip("torch")
    page = tmp_path / "verify.html"
    result = subprocess.run(
        [sys.executable, "-m", "amplint", "verify", "AMP006", "--dtype", "bfloat16", "--report", str(page)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    table = [line.split() for line in result.stdout.splitlines()]
    assert ["AMP006", "cpu", "bfloat16", "sgd", "true_loss"] in [cells[:5] for cells in table]
    assert ["AMP006", "cpu", "bfloat16", "fp32-function-small-grad", "zero_grad_fraction"] in [cells[:5] for cells in table]
    assert result.stdout.rstrip().endswith(
        "4 predictions: 1 effect confirmed, 1 control held, 0 effects not reproduced, 0 controls not held, 2 skipped, 0 errors"
    )
    assert f"wrote {page}" in result.stderr
    assert page.read_text().count('<figure class="prediction') == 4
