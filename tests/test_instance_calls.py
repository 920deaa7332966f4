"""Calls of instances: `obj(x)` runs its class's `__call__`, or `forward` for an `nn.Module`,
when the class is certain (one binding, to a constructor of a known class): a class of the
file whose method does AMP work, or one another linted module exports (issue 24, item 3)."""

import textwrap

import libcst as cst

from amplint.semantic import analyze, dotted_name
from amplint.semantic.calls import HelperCall
from amplint.semantic.foreign import is_module_class

from tests.test_project_classes import _lint


def _classified(source):
    """Each call's callee as written -> the unit it is followed into (None: not followed)."""
    model = analyze(cst.parse_module(textwrap.dedent(source)))
    found = {}
    for record in model.index.calls:
        item = model.classify(record)
        name = dotted_name(record.node.func)
        if isinstance(item, HelperCall):
            found[name] = item.callee.name if item.callee is not None else item.foreign.name
        else:
            found.setdefault(name, None)
    return found, model


STEP = """
import torch
from torch import nn


class TrainStep:
    def __init__(self, optimizer):
        self.optimizer = optimizer

    def __call__(self, loss, update=True):
        loss.backward()
        if update:
            self.optimizer.step()


class Head(nn.Module):
    def forward(self, x, optimizer):
        loss = x.sum()
        loss.backward()
        optimizer.step()
        return loss


class SubHead(Head):
    pass


class Plain(nn.Module):
    def forward(self, x):
        return x.relu()


class NotAModule:
    def forward(self, loss, optimizer):
        loss.backward()
        optimizer.step()
"""


def test_a_callable_class_instance_runs_its_call_method():
    found, model = _classified(STEP + """
def train(loss, optimizer):
    step = TrainStep(optimizer)
    step(loss, update=False)
""")
    assert found["step"] == "TrainStep.__call__"
    record = next(r for r in model.index.calls if dotted_name(r.node.func) == "step")
    call = model.classify(record)
    # The instance is bound: the first argument is the method's second parameter.
    assert call.bound_self and dotted_name(call.argument_for("loss")) == "loss"
    assert call.argument_for("update").value == "False"


def test_a_module_instance_runs_its_forward_also_through_a_base_of_the_file():
    found, _ = _classified(STEP + """
def train(x, optimizer, device):
    head = Head()
    sub = SubHead().to(device)
    head(x, optimizer)
    sub(x, optimizer)
""")
    assert found["head"] == "Head.forward"
    assert found["sub"] == "Head.forward"


def test_an_attribute_set_in_init_is_followed():
    found, _ = _classified(STEP + """
class Trainer:
    def __init__(self, optimizer):
        self.train_step = TrainStep(optimizer)

    def fit(self, loss):
        self.train_step(loss)
""")
    assert found["self.train_step"] == "TrainStep.__call__"


def test_uncertain_or_workless_instances_are_not_followed():
    found, _ = _classified(STEP + """
def train(x, loss, optimizer, fast, given):
    step = TrainStep(optimizer)
    if fast:
        step = TrainStep(None)
    plain = Plain()
    other = NotAModule()
    choice = TrainStep(optimizer) if fast else None
    step(loss)
    given(loss)
    plain(x)
    other(loss, optimizer)
    choice(loss)


class Elsewhere:
    def fit(self, loss):
        self.train_step(loss)  # set by no class of its own


class Setter:
    def __init__(self, optimizer):
        self.train_step = TrainStep(optimizer)
""")
    assert found["step"] is None  # bound twice
    assert found["given"] is None  # a parameter
    assert found["plain"] is None  # a forward without AMP work: nothing to follow
    assert found["other"] is None  # calling it does not run `forward`
    assert found["choice"] is None  # not a constructor call
    assert found["self.train_step"] is None


def test_torch_nn_module_spellings_count_as_modules():
    for base, imports in (("torch.nn.Module", "import torch"), ("Module", "from torch.nn import Module"), ("nn.Module", "import torch.nn as nn")):
        found, _ = _classified(f"""
{imports}


class Head({base}):
    def forward(self, loss, optimizer):
        loss.backward()
        optimizer.step()


def train(loss, optimizer):
    head = Head()
    head(loss, optimizer)
""")
        assert found["head"] == "Head.forward", base


def test_exported_classes_say_whether_they_are_modules():
    summary = {
        "classes": {
            "Rotary": {"bases": [["nn.Module", ["torch.nn", 0, "Module"]]], "methods": ["forward"]},
            "Sub": {"bases": [["Rotary", None]], "methods": []},
            "Scaler": {"bases": [], "methods": ["__call__"]},
        }
    }
    assert is_module_class(summary, "Rotary")
    assert is_module_class(summary, "Sub")
    assert not is_module_class(summary, "Scaler")
    assert not is_module_class(None, "Rotary")


WRAPPER = """
import torch


class NativeScaler:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, need_update=True):
        self._scaler.scale(loss).backward()
        {body}
"""
UNSCALE_EVERY_CALL = """if clip_grad is not None:
            self._scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
        if need_update:
            self._scaler.step(optimizer)
            self._scaler.update()"""
UNSCALE_ON_UPDATE = """if need_update:
            if clip_grad is not None:
                self._scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()"""
WRAPPER_LOOP = """
import torch
from scaler_wrap import NativeScaler


def train_one_epoch(model, loader, optimizer, accum_steps=4, clip_grad=1.0):
    loss_scaler = NativeScaler()
    for i, (x, y) in enumerate(loader):
        need_update = (i + 1) % accum_steps == 0
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum() / accum_steps
        loss_scaler(loss, optimizer, clip_grad=clip_grad, parameters=model.parameters(), need_update=need_update)
        if need_update:
            optimizer.zero_grad()
"""


def test_a_scaler_wrapper_of_another_module_that_unscales_every_call(tmp_path):
    # timm 4cd7fb88: the wrapper's `__call__` unscales on every call, updates only when
    # `need_update`; the loop calls it every micro-batch (AMP015 at the call).
    found, _ = _lint(tmp_path / "buggy", {"scaler_wrap.py": WRAPPER.format(body=UNSCALE_EVERY_CALL), "train.py": WRAPPER_LOOP})
    assert found == [("train.py", 11, "AMP015")]
    found, _ = _lint(tmp_path / "fixed", {"scaler_wrap.py": WRAPPER.format(body=UNSCALE_ON_UPDATE), "train.py": WRAPPER_LOOP})
    assert found == []


def test_a_scaler_wrapper_held_back_with_a_constant_is_not_a_skipped_update(tmp_path):
    loop = WRAPPER_LOOP.replace("need_update=need_update", "need_update=True")
    found, _ = _lint(tmp_path, {"scaler_wrap.py": WRAPPER.format(body=UNSCALE_EVERY_CALL), "train.py": loop})
    assert found == []


MODULES = """
import torch
from torch import nn


class SelfTraining(nn.Module):
    def __init__(self, optimizer):
        super().__init__()
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def forward(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()


class Stepper:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def forward(self, loss):
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
"""


def test_an_imported_module_instance_runs_its_forward_under_the_callers_autocast(tmp_path):
    found, _ = _lint(
        tmp_path,
        {
            "parts.py": MODULES,
            "train.py": """
            import torch
            from parts import SelfTraining, Stepper


            def train(model, loader, optimizer):
                head = SelfTraining(optimizer)
                stepper = Stepper(optimizer)
                for x in loader:
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        loss = model(x).sum()
                        head(loss)
                        stepper(loss)
            """,
        },
    )
    # `stepper(loss)` does not run `Stepper.forward`: it is no nn.Module.
    assert found == [("train.py", 11, "AMP004"), ("train.py", 11, "AMP006")]
