"""Each rule's embedded examples are its tests: VALID stays silent, INVALID is flagged exactly."""

import re

import pytest

from amplint.lint.engine import lint_text
from amplint.lint.rule import DOC_SECTIONS
from amplint.rules import ALL_RULES

VALID = [(rule, i, source) for rule in ALL_RULES for i, source in enumerate(rule.VALID)]
INVALID = [(rule, i, example) for rule in ALL_RULES for i, example in enumerate(rule.INVALID)]


@pytest.mark.parametrize("rule, index, source", VALID, ids=[f"{r.code}-valid-{i}" for r, i, _ in VALID])
def test_valid_example_is_silent(rule, index, source):
    findings = [f for f in lint_text(source) if f.code == rule.code]
    assert findings == []


@pytest.mark.parametrize("rule, index, example", INVALID, ids=[f"{r.code}-invalid-{i}" for r, i, _ in INVALID])
def test_invalid_example_is_flagged_where_documented(rule, index, example):
    findings = [f for f in lint_text(example.source, rules=[rule])]
    assert [(f.row, f.column) for f in findings] == list(example.at)
    for finding in findings:
        assert finding.code == rule.code
        assert finding.name == rule.name
        assert len(finding.message) > 40


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_rule_metadata(rule):
    assert re.fullmatch(r"AMP\d{3}", rule.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    assert rule.summary() and not rule.summary().startswith("#")
    for title in DOC_SECTIONS:
        assert rule.section(title), f"{rule.code} documents no '{title}' section"
    assert rule.VALID and rule.INVALID, "every rule ships valid and invalid examples"
    page = rule.page()
    assert page.startswith(f"# {rule.code} {rule.name}")
    for prediction in rule.PREDICTIONS:
        assert prediction.claim in page


def test_rule_codes_and_names_are_unique_and_ordered():
    codes = [rule.code for rule in ALL_RULES]
    names = [rule.name for rule in ALL_RULES]
    assert len(set(codes)) == len(codes)
    assert len(set(names)) == len(names)
    assert codes == sorted(codes)


def test_a_one_sentence_message_splits_at_its_first_colon_outside_code():
    from amplint.lint.rule import Message

    assert Message.split("`a: b` is wrong: it costs c. Write d.") == Message("`a: b` is wrong", "It costs c. Write d.")
    assert Message.split("`x` is wrong") == Message("`x` is wrong")


@pytest.mark.parametrize("rule", ALL_RULES, ids=[r.code for r in ALL_RULES])
def test_every_finding_has_a_short_title_and_help(rule):
    for example in rule.INVALID:
        for finding in lint_text(example.source, [rule]):
            assert finding.help, f"{rule.code}: {finding.message}"
