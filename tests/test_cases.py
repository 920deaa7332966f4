"""Whole training scripts beside their expected findings (TorchFix style): `name.py` + `name.txt`.

`name.txt` lists `row:col CODE` per finding; an empty file means the script must lint clean.
Adding a case is adding two files.
"""

from pathlib import Path

import pytest

from amplint.lint.engine import lint_text

CASES = sorted((Path(__file__).parent / "cases").glob("*.py"))


@pytest.mark.parametrize("script", CASES, ids=[p.stem for p in CASES])
def test_case(script):
    expected = [line.strip() for line in script.with_suffix(".txt").read_text().splitlines() if line.strip()]
    found = [f"{f.row}:{f.column} {f.code}" for f in lint_text(script.read_text(), path=str(script))]
    assert found == expected


def test_there_are_clean_and_flagged_cases():
    expectations = [p.with_suffix(".txt").read_text().strip() for p in CASES]
    assert sum(1 for e in expectations if not e) >= 10
    assert sum(1 for e in expectations if e) >= 10


def test_seed_mistakes_each_get_their_rule_and_nothing_else():
    by_name = {p.stem: p for p in CASES}
    expected = {
        "seed_full_pattern": set(),
        "seed_mistake_unscaled_backward": {"AMP001"},
        "seed_mistake_fp16_without_scaler": {"AMP002"},
        "seed_mistake_clip_while_scaled": {"AMP003"},
        "seed_mistake_whole_loop_in_autocast": {"AMP004", "AMP006"},
    }
    for name, codes in expected.items():
        assert {f.code for f in lint_text(by_name[name].read_text())} == codes, name
