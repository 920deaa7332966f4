"""The GradScaler protocol where real trainers put it (issue 36): the values the file fixes
for a guard (`amplint.semantic.constants`), a loss-scaler wrapper of another module whose
update runs every Nth call. The whole-script shapes are cases in tests/cases
(optimizers_*, unscale_*, guard_*, scaler_wrapper_*, resume_*, ignite_checkpoint_*,
scaled_loss_*, clip_threshold_*)."""

import textwrap

import libcst as cst
import pytest

from amplint.semantic import analyze
from conftest import lint_project


def _tests(source):
    """The model of `source` and every `if` test in it, by its code."""
    module = cst.parse_module(textwrap.dedent(source))
    model = analyze(module)
    tests = {}
    for unit in model.units:
        for record in unit.calls:
            for frame in record.frames:
                test = getattr(frame, "test", None)
                if test is not None:
                    tests[(unit.name, module.code_for_node(test))] = (test, unit)
    return model, tests


def _truth(source, function, test):
    model, tests = _tests(source)
    node, unit = tests[(function, test)]
    return model.branches.truth(node, unit)


def test_a_default_no_call_of_the_file_overrides_fixes_the_test():
    source = """
        class Trainer:
            def step(self, loss, update=False):
                if update:
                    self.scaler.update()
            def fit(self):
                self.step(1.0)
                self.step(2.0)
    """
    assert _truth(source, "Trainer.step", "update") is False


def test_a_constant_every_call_passes_fixes_the_test_and_a_variable_does_not():
    fixed = """
        def step(loss, idx=None):
            if idx is None:
                scaler.update()
        step(1.0, idx=None)
        step(2.0)
    """
    assert _truth(fixed, "step", "idx is None") is True
    varying = """
        def step(loss, idx=None):
            if idx is None:
                scaler.update()
        for i, opt in enumerate(optimizers):
            step(1.0, idx=i)
    """
    assert _truth(varying, "step", "idx is None") is None


def test_an_attribute_set_once_in_init_is_the_value_the_constructions_give_it():
    source = """
        class Trainer:
            def __init__(self, accum=1):
                self.accum = accum
            def fit(self, i):
                if (i + 1) % self.accum == 0:
                    self.scaler.update()
        trainer = Trainer()
    """
    assert _truth(source, "Trainer.fit", "(i + 1) % self.accum == 0") is True


@pytest.mark.parametrize(
    "elsewhere",
    [
        "trainer.accum = 4",  # written on the object by another part of the file
        "class Child(Trainer):\n    pass",  # a subclass's constructor may pass anything
        "trainer2 = Trainer(accum=args.accum)",  # a construction the file does not fix
    ],
)
def test_an_attribute_the_file_may_set_otherwise_stays_unknown(elsewhere):
    source = textwrap.dedent("""
        class Trainer:
            def __init__(self, accum=1):
                self.accum = accum
            def fit(self, i):
                if (i + 1) % self.accum == 0:
                    self.scaler.update()
        trainer = Trainer()
    """) + elsewhere + "\n"
    assert _truth(source, "Trainer.fit", "(i + 1) % self.accum == 0") is None


def test_a_module_setting_and_a_parameter_without_calls_stay_unknown():
    source = """
        USE_AMP = False
        def step(loss, update=False):
            if USE_AMP:
                scaler.update()
            if update:
                scaler.update()
    """
    assert _truth(source, "step", "USE_AMP") is None
    assert _truth(source, "step", "update") is None


def test_a_call_of_the_same_name_on_an_unknown_object_makes_a_method_parameter_unknown():
    source = """
        class Trainer:
            def step(self, loss, update=False):
                if update:
                    self.scaler.update()
            def fit(self):
                self.step(1.0)
        def run(runner):
            runner.step(1.0, update=True)
    """
    assert _truth(source, "Trainer.step", "update") is None


WRAPPER = """
import torch


class LossScaler:
    def __init__(self, accum=1):
        self.scaler = torch.amp.GradScaler("cuda")
        self.accum = accum
        self.calls = 0

    def __call__(self, loss, optimizer, parameters=None, clip_grad=None):
        self.scaler.scale(loss).backward()
        self.calls += 1
        if clip_grad is not None:
            self.scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
        if self.calls % self.accum == 0:
            self.scaler.step(optimizer)
            self.scaler.update()
            optimizer.zero_grad()
"""

TRAIN = """
import torch
from scaling import LossScaler

loss_scaler = LossScaler(accum=4)
for x, y in loader:
    with torch.autocast("cuda"):
        loss = model(x, y)
    loss_scaler(loss, optimizer, model.parameters(), clip_grad={clip})
"""


def test_a_wrapper_of_another_module_that_updates_every_nth_call_unscales_every_call(tmp_path):
    found, findings = lint_project(tmp_path, {"scaling.py": WRAPPER, "train.py": TRAIN.format(clip="1.0")}, "--no-cache")
    assert found == [("train.py", 8, "AMP015")]
    assert "only when `self.calls % self.accum == 0`" in findings[0]["message"]


def test_the_same_wrapper_called_without_a_clip_unscales_nothing(tmp_path):
    found, _ = lint_project(tmp_path, {"scaling.py": WRAPPER, "train.py": TRAIN.format(clip="None")}, "--no-cache")
    assert found == []


CHECKPOINT_HELPERS = """
import torch


def save_checkpoint(path, epoch, model, optimizer, scaler):
    torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scaler": scaler.state_dict()}, path)


def load_checkpoint(path, model, optimizer{scaler_parameter}):
    ckpt = torch.load(path, map_location="cpu")
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"]){scaler_restore}
    return ckpt["epoch"] + 1
"""

RESUMING = """
import torch
from utils.checkpoint import load_checkpoint, save_checkpoint


def main(args, model, loader):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    start = load_checkpoint(args.resume, model, optimizer{scaler_argument}) if args.resume else 0
    for epoch in range(start, args.epochs):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        save_checkpoint("last.pt", epoch, model, optimizer, scaler)
"""


def test_checkpoint_helpers_of_another_module_that_save_the_scaler_and_restore_only_the_optimizer(tmp_path):
    # The helpers' summaries say what each does with the scaler it is handed: saved, and a
    # resume that never restores it (the loss scale starts again at 65536).
    helpers = CHECKPOINT_HELPERS.replace("{scaler_parameter}", "").replace("{scaler_restore}", "")
    found, _ = lint_project(tmp_path / "half", {"utils/__init__.py": "", "utils/checkpoint.py": helpers, "train.py": RESUMING.replace("{scaler_argument}", "")}, "--no-cache")
    assert found == [("train.py", 8, "AMP007")]  # the resume
    both = CHECKPOINT_HELPERS.replace("{scaler_parameter}", ", scaler=None").replace("{scaler_restore}", '\n    if scaler is not None:\n        scaler.load_state_dict(ckpt["scaler"])')
    found, _ = lint_project(tmp_path / "both", {"utils/__init__.py": "", "utils/checkpoint.py": both, "train.py": RESUMING.replace("{scaler_argument}", ", scaler")}, "--no-cache")
    assert found == []


FACADE = """
import torch


class AmpOptimizer:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""

FACADE_TRAINER = """
import torch
from amp_optim import AmpOptimizer


class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = AmpOptimizer(torch.optim.AdamW(model.parameters()))

    def fit(self, loader):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x, y)
            self.opt.backward(loss)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
"""


def test_a_scaler_facade_of_another_module_held_on_an_attribute(tmp_path):
    # Its scaler is known only by its summary's key (no construction in this file): AMP018
    # asks about it without an internal error, and the clip between backward and step is AMP003.
    found, _ = lint_project(tmp_path, {"amp_optim.py": FACADE, "engine.py": FACADE_TRAINER}, "--no-cache")
    assert found == [("engine.py", 15, "AMP003")]
