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


def test_the_work_counted_for_a_file_is_the_same_every_time(meter_steps):
    """The per-file limit counts steps (amplint.work); the count must not depend on the run.
    `x *= y` is read as the value `(x, y)`: built anew at each visit, a node could share the id
    of one freed before it and hit another statement's cached answer (and count fewer steps)."""
    from amplint.lint import engine
    from amplint.rules import ALL_RULES

    source = "import torch\nscaler = torch.amp.GradScaler('cuda')\n" + "".join(
        f"def step{i}(model, optimizer, loader, hyp, nc):\n"
        f"    for x in loader:\n"
        f"        hyp['cls'] *= nc / 80 * 3\n"
        f"        with torch.autocast('cuda'):\n"
        f"            loss = model(x)\n"
        f"        loss *= 4.0\n"
        f"        loss /= 2\n"
        f"        scaler.scale(loss).backward()\n"
        f"        scaler.step(optimizer)\n"
        f"        scaler.update()\n"
        for i in range(40)
    )
    spent = meter_steps
    for _ in range(6):
        engine.lint_source(source, "train.py", list(ALL_RULES))
    assert len(spent) == 6 and len(set(spent)) == 1, spent
