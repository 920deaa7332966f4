"""Docs are generated from the rule metadata; these fail when README or docs/rules.md drift."""

from amplint.docs import TABLE_END, TABLE_START, rules_page, rules_table
from conftest import REPO


def test_readme_rule_table_matches_the_rules():
    readme = (REPO / "README.md").read_text()
    table = readme.split(TABLE_START)[1].split(TABLE_END)[0].strip()
    assert table == rules_table(), "run `python -m amplint.docs` to regenerate"


def test_docs_rules_page_matches_the_rules():
    assert (REPO / "docs" / "rules.md").read_text() == rules_page(), "run `python -m amplint.docs` to regenerate"


def test_readme_opens_with_the_two_setup_commands():
    readme = (REPO / "README.md").read_text()
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert block[0].startswith("pip install . && amplint fixtures/")
    assert block[1].startswith("pip install torch==2.13.0 -e '.[test,harness]' && python -m pytest")
    ci = (REPO / ".ci" / "run").read_text()
    assert "pip install torch==2.13.0 -e '.[test,harness]' && python -m pytest" in ci
