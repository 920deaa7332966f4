"""The contract between the linter and the harness, checked without running any fixture.

Every buggy fixture is reported by its rule, and only by the rules it is meant to show;
every fixed fixture lints clean with every rule; every prediction names a scenario both
scripts of its pair accept. Nothing here imports torch.
"""

import ast
import re
from pathlib import Path

import pytest

from amplint.lint.engine import lint_source
from amplint.harness.runner import fixture_root
from amplint.rules import ALL_RULES

FIXTURES = Path(str(fixture_root()))
RULES_BY_CODE = {rule.code: rule for rule in ALL_RULES}

# What each buggy fixture shows. A region wrapped around the step necessarily holds the
# backward too, so the step-inside-autocast fixture is also a backward-inside-autocast one.
SHOWS = {
    "AMP001": {"AMP001"},
    "AMP002": {"AMP002"},
    "AMP003": {"AMP003"},
    "AMP004": {"AMP004", "AMP006"},
    "AMP005": {"AMP005"},
    "AMP006": {"AMP006"},
    "AMP007": {"AMP007"},
    "AMP008": {"AMP008"},
    "AMP009": {"AMP009"},
    "AMP010": {"AMP010"},
    "AMP011": {"AMP011"},
    "AMP012": {"AMP012"},
    "AMP013": {"AMP013"},
    "AMP015": {"AMP015"},
    "AMP016": {"AMP016"},
    "AMP018": {"AMP018"},
    "AMP019": {"AMP019"},
    "AMP021": {"AMP021"},
    "AMP022": {"AMP022"},
}

FIXTURE_CODES = sorted(path.name for path in FIXTURES.iterdir() if (path / "buggy.py").is_file())


def lint(path: Path):
    result = lint_source(path.read_text(), str(path), ALL_RULES)
    assert result.error is None, result.error
    return result.findings


def declared_scenarios(path: Path):
    """The keys of the fixture's module-level `SCENARIOS` dict: what `--scenario` accepts."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SCENARIOS" for t in node.targets):
            assert isinstance(node.value, ast.Dict), f"{path}: SCENARIOS is not a dict literal"
            return [ast.literal_eval(key) for key in node.value.keys]
    raise AssertionError(f"{path} defines no SCENARIOS")


def test_every_rule_with_predictions_has_a_fixture_pair_and_every_pair_a_rule():
    with_predictions = sorted(rule.code for rule in ALL_RULES if rule.PREDICTIONS)
    assert FIXTURE_CODES == with_predictions
    assert sorted(SHOWS) == FIXTURE_CODES
    for code in FIXTURE_CODES:
        assert (FIXTURES / code / "fixed.py").is_file()


@pytest.mark.parametrize("code", FIXTURE_CODES)
def test_buggy_fixture_is_reported_by_the_rules_it_shows(code):
    reported = {finding.code for finding in lint(FIXTURES / code / "buggy.py")}
    assert reported == SHOWS[code]


@pytest.mark.parametrize("code", FIXTURE_CODES)
def test_fixed_fixture_lints_clean(code):
    findings = lint(FIXTURES / code / "fixed.py")
    assert findings == [], "\n".join(f"{f.row}:{f.column} {f.code} {f.message}" for f in findings)


@pytest.mark.parametrize("code", FIXTURE_CODES)
def test_buggy_and_fixed_take_the_same_scenarios_and_cover_every_prediction(code):
    buggy = declared_scenarios(FIXTURES / code / "buggy.py")
    fixed = declared_scenarios(FIXTURES / code / "fixed.py")
    assert buggy == fixed
    for prediction in RULES_BY_CODE[code].PREDICTIONS:
        assert prediction.scenario in buggy, f"{code}: no scenario {prediction.scenario!r} in the fixtures"


@pytest.mark.parametrize("code", FIXTURE_CODES)
@pytest.mark.parametrize("which", ["buggy", "fixed"])
def test_fixture_says_what_it_is_and_how_to_run_it(code, which):
    docstring = ast.get_docstring(ast.parse((FIXTURES / code / f"{which}.py").read_text()))
    assert docstring and docstring.startswith(f"{code}, {which}:")
    assert f"python fixtures/{code}/{which}.py --device cpu" in docstring


INCIDENTAL_OPTIONS = {"--seed", "--lr-scale", "--steps-scale"}


@pytest.mark.parametrize("code", FIXTURE_CODES)
@pytest.mark.parametrize("which", ["buggy", "fixed"])
def test_fixture_takes_the_incidental_details_verify_perturbs(code, which):
    """`amplint verify --perturb` passes --seed, --lr-scale and --steps-scale to every script: a
    script must take them and let them reach every seed and learning rate it sets (the test
    suite's perturbation run then checks that the measurements change)."""
    source = (FIXTURES / code / f"{which}.py").read_text()
    options = {
        node.args[0].value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument" and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    assert INCIDENTAL_OPTIONS <= options
    assert not re.search(r"manual_seed\(\d", source), "a seed written as a number: --seed cannot change it"
    fixed_rates = [rate for rate in re.findall(r"\blr=[^,)]*", source) if "LR_SCALE" not in rate]
    assert not fixed_rates, f"learning rates --lr-scale cannot change: {fixed_rates}"
