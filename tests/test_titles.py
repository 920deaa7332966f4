"""Titles quote code on one line and elide long code, as ruff does (issue 21, item 7)."""

import textwrap

import pytest

from amplint.lint.engine import lint_text
from amplint.lint.rule import Message, Report
from amplint.lint.titles import LIMIT, bounded, elide

# A real AMP010 title from the corpus (diffusers): 384 characters, most of them the optimizer's arguments.
OPTIMIZER = (
    "optimizer_class(disc_params_to_optimize, lr=args.disc_learning_rate, betas=(args.adam_beta1, "
    "args.adam_beta2), weight_decay=args.adam_weight_decay, eps=args.adam_epsilon)"
)


@pytest.mark.parametrize(
    "code, shown",
    [
        ("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)", "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"),
        (OPTIMIZER, "optimizer_class(...)"),
        ("torch.cuda.amp.autocast(enabled=(isinstance(optimizer, AMPOptimizer)))", "torch.cuda.amp.autocast(...)"),
        # The call is the last one of a chain, whatever brackets its strings hold.
        ("Model(" + "a, " * 10 + ").to(device, dtype=')', name='" + "x" * 30 + "')", "Model(" + "a, " * 10 + ").to(...)"),
        # Not a call: the first characters.
        ("(" + "a, " * 30 + ")", "(" + "a, " * 18 + "a,..."),
        ("x" * 80, "x" * (LIMIT - 3) + "..."),
    ],
)
def test_elide(code, shown):
    assert elide(code) == shown
    assert len(elide(code)) <= LIMIT


def test_bounded_elides_each_span_and_keeps_the_prose():
    title = f"`model.half()` casts `model` to float16, and `optimizer` (`{OPTIMIZER}`) then updates those float16 parameters"
    assert bounded(title) == (
        "`model.half()` casts `model` to float16, and `optimizer` (`optimizer_class(...)`) then updates those float16 parameters"
    )
    assert bounded("`f(\n    a,\n    b)` does x\n  and y") == "`f( a, b)` does x and y"


def test_a_report_title_is_bounded_and_its_help_kept_whole():
    report = Report(node=None, message=Message(f"`{OPTIMIZER}` is wrong", f"Write `{OPTIMIZER}` differently."))
    assert report.message == "`optimizer_class(...)` is wrong"
    assert report.help == f"Write `{OPTIMIZER}` differently."


def test_a_long_optimizer_is_elided_in_the_amp010_title():
    source = textwrap.dedent(
        f"""\
        import torch

        model = Net().cuda().half()
        optimizer_class = torch.optim.AdamW
        optimizer = {OPTIMIZER.replace("disc_params_to_optimize", "model.parameters()")}
        for x, y in loader:
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        """
    )
    titles = [finding.message for finding in lint_text(source) if finding.code == "AMP010"]
    assert titles, "AMP010 should fire on this example"
    assert all(len(title) < 200 and "\n" not in title for title in titles)
    assert any("`optimizer_class(...)`" in title for title in titles)


@pytest.mark.parametrize(
    "optimizer, eps",
    [("torch.optim.SGD(model.parameters(), lr=0.1)", None), ("torch.optim.AdamW(model.parameters())", "AdamW"),
     ("torch.optim.RMSprop(model.parameters())", "RMSprop"), ("Lion(model.parameters())", None)],
)
def test_help_names_the_optimizer_the_user_has(optimizer, eps):
    """AMP010's help speaks of eps only for an optimizer that divides by one (not SGD's)."""
    source = textwrap.dedent(
        f"""\
        import torch
        model = Net().cuda().half()
        optimizer = {optimizer}
        for x, y in loader:
            model(x).sum().backward()
            optimizer.step()
        """
    )
    (finding,) = [f for f in lint_text(source) if f.code == "AMP010"]
    if eps is None:
        assert "eps" not in finding.help
    else:
        assert f"`{eps}`'s default eps is 0 in float16" in finding.help
