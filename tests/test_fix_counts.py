"""What `--fix`, `--diff`, `--fix-only` and `--show-fixes` count (issue 21, item 6): findings
settled, one each, even where one fix settles several or a finding takes two rounds; warnings
called warnings."""

import pytest

from conftest import BUGGY

# One fix rewrites the import and every use of a name: four AMP014 warnings, two fixes.
IMPORTED = """\
import torch
from torch.cuda.amp import GradScaler, autocast

a = GradScaler()
b = GradScaler()
with autocast():
    pass
with autocast(dtype=torch.bfloat16):
    pass
"""
# A call inside a call: the outer one's fix first, the inner one's in the next round.
NESTED = """\
import torch
with torch.cuda.amp.autocast(), torch.cuda.amp.autocast():
    x = torch.cuda.amp.GradScaler(torch.cuda.amp.GradScaler())
"""


@pytest.mark.parametrize("source", [IMPORTED, NESTED], ids=["merged", "nested"])
def test_fix_counts_each_warning_once(amplint, project, source):
    root = project({"old.py": source})
    result = amplint("--no-cache", "--fix", "--show-fixes", "old.py", cwd=root)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "Found 4 warnings (4 fixed, 0 remaining).",
        "Fixed 4 warnings:",
        "- old.py:",
        "    4 × AMP014 (deprecated-amp-api)",
    ]
    assert "torch.cuda.amp" not in (root / "old.py").read_text()


def test_diff_and_fix_only_count_the_same(amplint, project):
    root = project({"old.py": IMPORTED})
    diff = amplint("--no-cache", "--diff", "old.py", cwd=root)
    assert diff.returncode == 1 and diff.stderr == "Would fix 4 warnings.\n"
    fixed = amplint("--no-cache", "--fix-only", "old.py", cwd=root)
    assert (fixed.returncode, fixed.stdout) == (0, "Fixed 4 warnings.\n")


def test_errors_and_warnings_fixed_together(amplint, project):
    root = project({"train.py": BUGGY + "old = torch.cuda.amp.GradScaler()\n"})
    result = amplint("--no-cache", "--fix", "--show-fixes", "train.py", cwd=root)
    assert result.stdout.splitlines() == [
        "Found 1 error and 1 warning (2 fixed, 0 remaining).",
        "Fixed 1 error and 1 warning:",
        "- train.py:",
        "    1 × AMP003 (clip-before-unscale)",
        "    1 × AMP014 (deprecated-amp-api)",
    ]


def test_files_not_linted_are_counted(amplint, project):
    root = project({"broken.py": "x = (\n", "also_broken.py": "y = )\n"})
    result = amplint("--no-cache", ".", cwd=root)
    assert (result.returncode, result.stdout) == (2, "No findings, but 2 files could not be linted.\n")


# The backward's fix (round one) brings out the clip that does not unscale (round two).
SECOND_ROUND = """\
import torch

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cuda")
for x in range(10):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""


def test_a_finding_a_fix_brought_out_is_counted_and_shown(amplint, project):
    root = project({"train.py": SECOND_ROUND})
    result = amplint("--no-cache", "--fix", "--show-fixes", "train.py", cwd=root)
    assert result.stdout.splitlines() == [
        "Found 2 errors (2 fixed, 0 remaining).",
        "Fixed 2 errors:",
        "- train.py:",
        "    1 × AMP001 (unscaled-backward)",
        "    1 × AMP003 (clip-before-unscale)",
    ]
    assert "scaler.unscale_(optimizer)" in (root / "train.py").read_text()
    diff = amplint("--no-cache", "--diff", "train.py", cwd=project({"train.py": SECOND_ROUND}))
    assert diff.stderr == "Would fix 2 errors.\n"
