"""The `Training` fact family (`amplint.analyses.training`): whether a backward's gradients
reach an optimizer, whether loss scaling serves a unit's step, and which backwards run on
what an autocast region computed."""

import textwrap

import libcst as cst

from amplint.analyses.training import Training
from amplint.semantic import EventKind, analyze


def facts(source):
    model = analyze(cst.parse_module(textwrap.dedent(source)))
    return model, model.facts(Training)


def backwards(model):
    return [o for unit in model.units for o in model.occurrences_in(unit) if o.kind is EventKind.BACKWARD and not o.via]


def test_a_backward_that_an_optimizer_steps_on_reaches_it():
    model, training = facts(
        """
        import torch
        for x in loader:
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
        """
    )
    (backward,) = backwards(model)
    assert training.reaches_optimizer(backward)


def test_a_saliency_map_does_not_reach_an_optimizer():
    model, training = facts(
        """
        import torch
        def saliency(model, x):
            x.requires_grad_(True)
            model(x).max().backward()
            return x.grad.abs()
        """
    )
    (backward,) = backwards(model)
    assert not training.reaches_optimizer(backward)


def test_scaling_serves_a_method_whose_class_holds_the_scaler():
    model, training = facts(
        """
        import torch
        class Trainer:
            def __init__(self):
                self.scaler = torch.amp.GradScaler("cuda")
            def step(self, loss):
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
            def forward(self, x):
                with torch.autocast("cuda"):
                    return self.model(x)
        """
    )
    forward = next(unit for unit in model.units if unit.name == "Trainer.forward")
    assert training.scaling_serves(forward)


def test_no_scaler_serves_a_plain_loop():
    model, training = facts(
        """
        import torch
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x).sum()
            loss.backward()
            optimizer.step()
        """
    )
    assert not training.scaling_serves(model.units[0])


def test_backwards_fed_by_a_region_follow_what_it_assigned():
    model, training = facts(
        """
        import torch
        for x in loader:
            with torch.autocast("cuda"):
                out = model(x)
            loss = out.sum()
            loss.backward()
            other.backward()
        """
    )
    (region,) = model.autocast_regions
    assert [o.event.node.func.value.value for o in training.backwards_fed_by(region)] == ["loss"]
