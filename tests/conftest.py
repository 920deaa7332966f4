import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# A float16 training loop that clips before unscale_: one AMP003 finding, at 8:5.
BUGGY = textwrap.dedent(
    """\
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """
)


def run_amplint(*args, cwd=None, input=None, env=None):
    """Run the real command in a subprocess, as a user or CI would."""
    full_env = dict(os.environ)
    full_env.pop("NO_COLOR", None)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "amplint", *args],
        cwd=cwd,
        input=input,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


@pytest.fixture
def amplint():
    return run_amplint


@pytest.fixture(scope="session")
def verified():
    """One real `amplint verify --dtype all` on CPU, shared by every test that needs measurements:
    each prediction at every dtype it is about (one fixture process per rule, ~20 s)."""
    pytest.importorskip("torch")
    from amplint.harness.runner import ALL_DTYPES, verify
    from amplint.rules import ALL_RULES

    return verify(ALL_RULES, "cpu", ALL_DTYPES)
