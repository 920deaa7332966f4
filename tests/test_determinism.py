"""Same input, same output: the findings and their wording never depend on how Python happened
to order a set (string hashes change with PYTHONHASHSEED, object ids with memory layout).
The flow analysis keeps its states in sets; a node reached in several states is reported once,
with the message of the first state, so the states are put in an order of their own first."""

import pytest

from conftest import REPO, run_amplint


@pytest.mark.slow(seconds=12)
def test_findings_do_not_depend_on_the_hash_seed():
    # The fixtures and the whole-script cases: every rule, helpers, several states per node
    # (fixtures/AMP005/buggy.py:64 once had one of two messages, by the seed).
    paths = [str(REPO / "fixtures"), str(REPO / "tests" / "cases")]
    outputs = {
        seed: run_amplint("--no-cache", "-j", "1", "--output-format", "json-lines", *paths, env={"PYTHONHASHSEED": seed})
        for seed in ("0", "1", "2", "3")
    }
    assert outputs["0"].stdout, outputs["0"].stderr
    assert {result.stdout for result in outputs.values()} == {outputs["0"].stdout}
