"""The step meter counts all the work that grows with a file, in every rule (amplint.work;
reliability round 4, N4): a file twice or four times as large takes at most as many more
operations as it takes more steps. Work the meter left uncounted (AMP016 scanned the module
for every autocast call it judged, AMP014 every name bound up the scope chain for every
deprecated use, and the layer's lookups of a name bound many times) grew with the square of
the file while the steps grew linearly: 16,000 generated lines reached the CPU safety net at
60% of the step limit, a verdict that depended on the machine.

The operations are counted, not timed: the Python function calls of the lint (cProfile's
count), the same on any machine under any load. Nothing here measures time."""

import cProfile
import pstats

import pytest

from amplint.lint.engine import lint_source
from amplint.rules import ALL_RULES

# How much faster than the steps the operations may grow from 1x to 2x and 4x: the steps
# weigh different work differently, so linear work keeps the ratio near 1, while uncounted
# quadratic work doubles it at 4x.
TOLERANCE = 1.25


def examples(rule, copies):
    """The rule's own examples, flagged and silent, `copies` times over, as one module."""
    sources = [example.source for example in rule.INVALID] + list(rule.VALID)
    return "\n".join([source for source in sources if "__future__" not in source] * copies)


def module_lines(rule, count):
    """The report's reproducer: a library module of `aN = torch.cuda.amp.autocast()` lines."""
    return "import torch\n" + "".join(f"a{i} = torch.cuda.amp.autocast()\n" for i in range(count))


def functions(rule, count):
    head = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    return head + "".join(
        f"def f{i}(opt, loss, model, x):\n    ctx = torch.autocast('cuda')\n    with torch.autocast('cuda'):\n        loss = model(x)\n"
        f"    scaler.scale(loss).backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    scaler.step(opt)\n"
        for i in range(count)
    )


def methods(rule, count):
    head = "import torch\n\nclass Trainer:\n    def __init__(self):\n        self.scaler = torch.amp.GradScaler('cuda')\n        self.ema = None\n\n"
    return head + "".join(
        f"    def step{i}(self, loader, model, opt):\n        for x, y in loader:\n"
        "            with torch.autocast('cuda', dtype=torch.float16):\n                loss = model(x)\n"
        "            self.scaler.scale(loss).backward()\n            if self.clip:\n                self.scaler.unscale_(opt)\n"
        "                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "            self.scaler.step(opt)\n            self.scaler.update()\n            model.half()\n            self.ema = model\n"
        for i in range(count)
    )


# (what, how, the 1x size)
GENERATED = [("examples", examples, 1), ("module lines", module_lines, 400), ("functions", functions, 10), ("methods", methods, 8)]


@pytest.fixture
def counted(meter_steps):
    """counted(source, rules): (steps, operations) of one lint of `source`."""
    spent = meter_steps

    def count(source, rules):
        spent.clear()
        profile = cProfile.Profile()
        profile.enable()
        try:
            result = lint_source(source, "generated.py", rules, analysis_limit=100)
        finally:
            profile.disable()
        assert result.error is None, result.error
        return (spent[-1] if spent else 0), sum(calls for _, calls, _, _, _ in pstats.Stats(profile).stats.values())

    return count


@pytest.mark.slow(seconds=4)
@pytest.mark.parametrize("rule", ALL_RULES, ids=[rule.code for rule in ALL_RULES])
def test_steps_grow_as_the_work_does(counted, rule):
    for what, generate, size in GENERATED:
        (steps, operations), *larger = [counted(generate(rule, size * times), [rule]) for times in (1, 2, 4)]
        for times, (more_steps, more_operations) in zip((2, 4), larger):
            if steps == 0:  # not analysed (nothing the rule looks for): a syntax check, linear
                assert more_steps == 0 and more_operations <= TOLERANCE * times * operations, (what, times)
                continue
            step_growth, operation_growth = more_steps / steps, more_operations / operations
            assert operation_growth <= TOLERANCE * step_growth, (
                f"{what} x{times}: the steps grew x{step_growth:.2f}, the operations x{operation_growth:.2f}"
            )
