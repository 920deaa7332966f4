"""The text pre-check never skips a file a rule would flag: whatever the rules find in a file
that the pre-check would skip must be nothing."""

from pathlib import Path

import pytest

from amplint.lint.engine import _lint_source, might_use_amp
from amplint.rules import ALL_RULES

CASES = sorted((Path(__file__).parent / "cases").glob("*.py"))
EXAMPLES = [(rule, example.source) for rule in ALL_RULES for example in rule.INVALID]


def _findings_without_precheck(source, rules):
    import amplint.lint.engine as engine

    original = engine.might_use_amp
    engine.might_use_amp = lambda *_: True
    try:
        return _lint_source(source, "<case>", rules, None, whole=True).findings
    finally:
        engine.might_use_amp = original


@pytest.mark.parametrize("rule, source", EXAMPLES, ids=[f"{r.code}-{i}" for i, (r, _) in enumerate(EXAMPLES)])
def test_every_flagged_example_passes_its_rules_precheck(rule, source):
    assert might_use_amp(source, [rule])


@pytest.mark.parametrize("script", CASES, ids=[p.stem for p in CASES])
def test_a_skipped_case_has_nothing_to_find(script):
    source = script.read_text()
    if might_use_amp(source, ALL_RULES):
        return
    assert _findings_without_precheck(source, ALL_RULES) == []


def test_the_precheck_skips_files_without_amp_words():
    assert not might_use_amp("import numpy as np\nscaler = StandardScaler().fit(x)\n")
    assert might_use_amp("accelerator = Accelerator(mixed_precision='fp16')\n")
