"""The naming conventions amplint falls back on where the code does not say what a thing is."""

import pytest

from amplint.semantic.pytorch.vocabulary import clip_unscales_itself, is_framework_receiver, looks_like_optimizer


@pytest.mark.parametrize("name", ["opt", "optimizer", "self.optimizer", "optD", "opt_g", "d_optim", "model_opt", "optimizerG"])
def test_optimizer_names(name):
    assert looks_like_optimizer(name)
    # The pre-check asks `looks_like_optimizer` only of names with "opt" in them.
    assert "opt" in name.lower()


def test_no_name_without_opt_looks_like_an_optimizer():
    import itertools
    import string

    letters = "opt_imzerdgDG" + string.digits[:3]
    for size in range(1, 5):
        for name in map("".join, itertools.product(letters, repeat=size)):
            assert not looks_like_optimizer(name) or "opt" in name.lower(), name


@pytest.mark.parametrize("name", ["scheduler", "lr_scheduler", "ema", "pbar", "env", "scaler", "self.sched", "options", "adopt"])
def test_not_optimizer_names(name):
    assert not looks_like_optimizer(name)


@pytest.mark.parametrize("name", ["accelerator", "self.accelerator", "fabric", "model_engine", "engine", "trainer"])
def test_framework_receivers(name):
    assert is_framework_receiver(name)


@pytest.mark.parametrize("name, unscales", [("accelerator", True), ("self.fabric", True), ("model", False), ("self.model", False)])
def test_clips_that_unscale_first(name, unscales):
    assert clip_unscales_itself(name) is unscales
