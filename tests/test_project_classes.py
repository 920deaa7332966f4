"""Classes across linted modules: constructors, methods called on instances and inheritance,
resolved through imports, so that what a method or a constructor of another module does
counts where it is called (`amplint.semantic.foreign`: the class index of a summary)."""

import json
import textwrap

import pytest

from amplint.lint.engine import lint_source
from amplint.rules import ALL_RULES
from amplint.semantic.foreign import SUMMARY_VERSION, ExternalModules, load_summary
from conftest import lint_project, write_files


def _lint(root, files):
    """(file, row, code) of each finding of `amplint` run on `files`, written under `root`."""
    return lint_project(root, files, "--no-cache")


# --------------------------------------------------------------------------- gradient-norm helpers

# No AMP word in it: parsed because a linted module imports it.
GRAD_UTILS = """
import torch


def grad_norm(model):
    total = 0.0
    for p in model.parameters():
        if p.grad is not None:
            total += p.grad.norm(2).item() ** 2
    return total ** 0.5


class Monitor:
    def log_norm(self, model):
        total = 0.0
        for p in model.parameters():
            if p.grad is not None:
                total += p.grad.norm(2).item() ** 2
        return total
"""

GRAD_MAIN = """
import torch
from utils import grad_norm, Monitor


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    monitor = Monitor()
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        {before}
        scaler.unscale_(optimizer)
        {after}
        scaler.step(optimizer)
        scaler.update()
"""


def test_a_gradient_norm_helper_of_another_module_read_before_unscale(tmp_path):
    reads = "norm = grad_norm(model); logged = monitor.log_norm(model)"
    found, findings = _lint(tmp_path, {"utils.py": GRAD_UTILS, "main.py": GRAD_MAIN.format(before=reads, after="pass")})
    assert found == [("main.py", 12, "AMP009"), ("main.py", 12, "AMP009")]
    assert all("in utils.py" in f["message"] for f in findings)


def test_the_same_helpers_after_unscale_are_clean(tmp_path):
    reads = "norm = grad_norm(model); logged = monitor.log_norm(model)"
    found, _ = _lint(tmp_path, {"utils.py": GRAD_UTILS, "main.py": GRAD_MAIN.format(before="pass", after=reads)})
    assert found == []


def test_a_module_without_amp_words_is_analysed_only_when_a_linted_module_imports_it(tmp_path):
    from amplint.project.link import imported_deferred

    write_files(tmp_path, {"utils.py": GRAD_UTILS, "other.py": "def f():\n    return 1\n", "main.py": GRAD_MAIN.format(before="pass", after="pass")})
    paths = [str(tmp_path / name) for name in ("utils.py", "other.py", "main.py")]
    first = [lint_source(open(path).read(), path, ALL_RULES) for path in paths]
    assert first[0].skipped and first[0].summary is None
    assert imported_deferred(first) == [0]  # not other.py: no helper words; not when nothing imports it
    assert imported_deferred(first[:2]) == []
    alone = lint_source(open(paths[0]).read(), paths[0], ALL_RULES, whole=True)
    assert alone.findings == [] and set(alone.summary["functions"]) == {"grad_norm", "Monitor.log_norm"}


# --------------------------------------------------------------------------- inheritance

BASE = """
import torch


class Trainer:
    def __init__(self, model, optimizer, amp=True):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda", enabled=amp)

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def optimizer_step(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

    def train_step(self, x):
        with torch.autocast("cuda"):
            loss = self.model(x)
        self.backward(loss)
        self.optimizer_step()
"""

SUBCLASSES = """
import torch
from trainers.base import Trainer


class ClipTrainer(Trainer):
    def train_step(self, x):
        with torch.autocast("cuda"):
            loss = self.model(x)
        self.backward(loss)
        {unscale}
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer_step()


class LoggingTrainer(Trainer):
    def train_step(self, x):
        with torch.autocast("cuda"):
            loss = self.model(x)
        {indent}self.backward(loss)
        self.optimizer_step()
"""


def test_a_subclass_in_another_module_runs_the_methods_of_its_base(tmp_path):
    files = {"trainers/__init__.py": "", "trainers/base.py": BASE, "custom.py": SUBCLASSES.format(unscale="pass", indent="    ")}
    found, findings = _lint(tmp_path, files)
    # The clip between the base's scaled backward and its step; the base's backward under autocast.
    assert found == [("custom.py", 11, "AMP003"), ("custom.py", 19, "AMP006")]
    message = next(f["message"] for f in findings if f["code"] == "AMP006")
    assert "`self.scaler.scale(loss).backward()` in base.py" in message


def test_a_subclass_that_unscales_before_clipping_is_clean(tmp_path):
    files = {
        "trainers/__init__.py": "",
        "trainers/base.py": BASE,
        "custom.py": SUBCLASSES.format(unscale="self.scaler.unscale_(self.optimizer)", indent=""),
    }
    found, _ = _lint(tmp_path, files)
    assert found == []


MIDDLE = """
import torch
from base import Trainer


class MyTrainer(Trainer):
    def evaluate(self, x):
        with torch.no_grad(), torch.autocast("cuda"):
            return self.model(x)
"""

RUN = """
import torch
from custom import MyTrainer


def run(model, optimizer, loader):
    worker = MyTrainer(model, optimizer)
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
            {inside}
        {outside}
        worker.optimizer_step()
"""


def test_methods_inherited_through_a_module_in_between(tmp_path):
    # custom.py's own code exports nothing: it exports what MyTrainer inherits once it is
    # linted with base.py's summary, and run.py finds it there. (A module with no AMP words
    # at all is not parsed, so it exports nothing: amplint.project.link.)
    files = {"base.py": BASE, "custom.py": MIDDLE, "run.py": RUN.format(inside="worker.backward(loss)", outside="pass")}
    found, _ = _lint(tmp_path, files)
    assert found == [("run.py", 10, "AMP006")]
    (tmp_path / "run.py").unlink()
    found, _ = _lint(tmp_path, {"run.py": RUN.format(inside="pass", outside="worker.backward(loss)")})
    assert found == []


# --------------------------------------------------------------------------- constructors

PROBE = """
import torch


class GradientProbe:
    # Measures the gradients of one batch when built.
    def __init__(self, model, batch):
        self.loss = model(batch)
        self.loss.backward()
        self.norms = [p.grad.norm() for p in model.parameters()]
"""

PROBE_MAIN = """
import torch
from probe import GradientProbe


def check(model, batch):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        {inside}
    {outside}
"""


def test_a_constructor_of_another_module_runs_where_the_class_is_called(tmp_path):
    found, findings = _lint(tmp_path, {"probe.py": PROBE, "main.py": PROBE_MAIN.format(inside="GradientProbe(model, batch)", outside="pass")})
    assert found == [("main.py", 7, "AMP006")]
    assert "in probe.py" in findings[0]["message"]
    found, _ = _lint(tmp_path, {"main.py": PROBE_MAIN.format(inside="pass", outside="GradientProbe(model, batch)")})
    assert found == []


# --------------------------------------------------------------------------- a GradScaler per call

ENGINE = """
import torch


def train_one_epoch(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def train_with(model, loader, optimizer, scaler):
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


class Loop:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer

    def run_epoch(self, loader):
        scaler = torch.amp.GradScaler("cuda")
        for x in loader:
            with torch.autocast("cuda"):
                loss = self.model(x)
            scaler.scale(loss).backward()
            scaler.step(self.optimizer)
            scaler.update()
"""

EPOCHS = """
import torch
from engine import train_one_epoch, train_with, Loop


def main(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loop = Loop(model, optimizer)
    for epoch in range(epochs):
        train_one_epoch(model, loader, optimizer)
        loop.run_epoch(loader)


def evaluate(model, loader):
    with torch.no_grad(), torch.autocast("cuda"):
        return [model(x) for x in loader]
"""

FOLDS = """
import torch
from engine import train_one_epoch, train_with, Loop


def main(model, loader, epochs):
    # Right: one scaler for the whole run.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        train_with(model, loader, optimizer, scaler)
    # A fresh run per fold: the optimizer (and the loop holding it) is new too.
    for fold in range(5):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_one_epoch(model, loader, optimizer)
        Loop(model, optimizer).run_epoch(loader)
    # Called once.
    train_one_epoch(model, loader, optimizer)
"""


def test_a_grad_scaler_built_by_another_modules_function_every_epoch(tmp_path):
    found, findings = _lint(tmp_path, {"engine.py": ENGINE, "main.py": EPOCHS})
    assert found == [("main.py", 9, "AMP008"), ("main.py", 10, "AMP008")]
    assert '(`torch.amp.GradScaler("cuda")` in engine.py)' in findings[0]["message"]


def test_a_scaler_built_once_or_per_fresh_run_is_clean(tmp_path):
    found, _ = _lint(tmp_path, {"engine.py": ENGINE, "main.py": FOLDS})
    assert found == []


FACTORY = """
import torch


def build_scaler(enabled=True):
    return torch.amp.GradScaler("cuda", enabled=enabled)
"""

FACTORY_EPOCHS = """
import torch
from scalers import build_scaler


def main(model, loader, epochs, optimizer):
    {before}
    for epoch in range(epochs):
        {built}
        for x, y in loader:
            with torch.autocast("cuda", dtype={dtype}):
                loss = model(x, y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
"""


def test_a_grad_scaler_another_modules_function_returns_every_epoch(tmp_path):
    main = FACTORY_EPOCHS.format(before="pass", built="scaler = build_scaler()", dtype="torch.float16")
    found, findings = _lint(tmp_path, {"scalers.py": FACTORY, "main.py": main})
    assert found == [("main.py", 8, "AMP008")]
    assert '`build_scaler()` builds a new GradScaler on every call (`torch.amp.GradScaler("cuda", enabled=enabled)` in scalers.py)' in findings[0]["message"]
    assert "Call it once, before the loop." in findings[0]["help"]


@pytest.mark.parametrize(
    "before, built, dtype",
    [
        ("scaler = build_scaler()", "pass", "torch.float16"),  # once, before the loop
        ("pass", "scaler = build_scaler(enabled=False)", "torch.float16"),  # disabled by the caller
        ("pass", "scaler = build_scaler()", "torch.bfloat16"),  # bfloat16 only: never overflows
        # A fresh run each time: the optimizer is new in the same iteration.
        ("pass", "scaler = build_scaler()\n        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)", "torch.float16"),
    ],
)
def test_a_returned_scaler_built_once_or_for_a_fresh_run_is_clean(tmp_path, before, built, dtype):
    main = FACTORY_EPOCHS.format(before=before, built=built, dtype=dtype)
    assert _lint(tmp_path, {"scalers.py": FACTORY, "main.py": main})[0] == []


# --------------------------------------------------------------------------- checkpointers

CHECKPOINTER = """
import torch


class Checkpointer:
    def __init__(self, model, optimizer, path{scaler_param}):
        self.model = model
        self.optimizer = optimizer
        self.path = path{scaler_attribute}

    def save(self, epoch):
        torch.save({{"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(){scaler_state}, "epoch": epoch}}, self.path)
"""

CHECKPOINTED = """
import torch
from checkpoint import Checkpointer


def train(model, loader, optimizer, epochs):
    scaler = torch.amp.GradScaler("cuda")
    ckpt = Checkpointer(model, optimizer, "ckpt.pt"{scaler})
    for epoch in range(epochs):
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        ckpt.save(epoch)
"""


def test_a_checkpointer_of_another_module_handed_the_optimizer_but_not_the_scaler(tmp_path):
    files = {
        "checkpoint.py": CHECKPOINTER.format(scaler_param="", scaler_attribute="", scaler_state=""),
        "train.py": CHECKPOINTED.format(scaler=""),
    }
    found, findings = _lint(tmp_path, files)
    # At the call that saves, as the summary of checkpoint.py (no AMP word in it) says.
    assert found == [("train.py", 16, "AMP007")]
    assert "`ckpt.save(epoch)`, which saves `self.optimizer.state_dict()` in checkpoint.py" in findings[0]["message"]
    files = {
        "checkpoint.py": CHECKPOINTER.format(
            scaler_param=", scaler=None", scaler_attribute="\n        self.scaler = scaler", scaler_state=', "scaler": self.scaler.state_dict()'
        ),
        "train.py": CHECKPOINTED.format(scaler=", scaler=scaler"),
    }
    found, _ = _lint(tmp_path, files)
    assert found == []


# The scaler built in another module (`build_scaler()`), the checkpointer in a third, under a
# name no checkpointing word is in: only the summaries say that `state.write(path)` saves
# the optimizer's state.
SCALERS = """
import torch


def build_scaler(enabled=True):
    return torch.amp.GradScaler("cuda", enabled=enabled)


def build_off():
    return torch.amp.GradScaler("cuda", enabled=False)
"""

RUN_STATE = """
import torch


class RunState:
    def __init__(self, model, optimizer=None, scaler=None):
        self.model = model
        self.optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.1)
        self.scaler = scaler

    def write(self, path, **extra):
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        state.update({name: obj.state_dict() for name, obj in extra.items()})
        self._dump(state, path)

    def _dump(self, state, path):
        torch.save(state, path)
"""

RUN_STATE_USED = """
import torch
from scalers import build_scaler, build_off
from run_state import RunState


def train(model, loader, optimizer, epochs):
    scaler = {scaler}
    state = RunState(model, {handed})
    {later}
    for epoch in range(epochs):
        for x in loader:
            with torch.autocast("cuda", dtype=torch.{dtype}):
                loss = model(x)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        state.write("last.pt"{extra})
"""

# The checkpointer kept on the trainer of the importing module, used in another method.
TRAINER_USES = """
import torch
from run_state import RunState


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda")
        self.state = RunState(self.model, optimizer=self.optimizer{scaler})

    def epoch(self, loader):
        for x in loader:
            with torch.autocast("cuda"):
                loss = self.model(x)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        self.state.write("last.pt")
"""


def _run_state(**fields):
    values = {"scaler": "build_scaler()", "handed": "optimizer", "later": "", "dtype": "float16", "extra": ""}
    values.update(fields)
    return {"scalers.py": SCALERS, "run_state.py": RUN_STATE, "train.py": RUN_STATE_USED.format(**values)}


def test_a_checkpointer_method_of_another_module_saves_what_its_constructor_was_handed(tmp_path):
    found, findings = _lint(tmp_path, _run_state())
    assert found == [("train.py", 18, "AMP007")]
    message = findings[0]["message"]
    assert '`state.write("last.pt")`, which saves `self.optimizer.state_dict()` in run_state.py' in message
    assert '`build_scaler()`, which builds `torch.amp.GradScaler("cuda", enabled=enabled)` in scalers.py' in message
    # A GradScaler built in the file itself; the optimizer passed by keyword.
    found, _ = _lint(tmp_path, _run_state(scaler='torch.amp.GradScaler("cuda")', handed="optimizer=optimizer"))
    assert found == [("train.py", 18, "AMP007")]


def test_an_instance_kept_on_self_saves_what_its_constructor_was_handed(tmp_path):
    files = {"scalers.py": SCALERS, "run_state.py": RUN_STATE, "train.py": TRAINER_USES.format(scaler="")}
    found, _ = _lint(tmp_path, files)
    assert found == [("train.py", 19, "AMP007")]
    files["train.py"] = TRAINER_USES.format(scaler=", scaler=self.scaler")
    found, _ = _lint(tmp_path, files)
    assert found == []


def test_a_checkpointer_handed_the_scaler_or_a_run_without_one_is_clean(tmp_path):
    twins = {
        "handed positionally": _run_state(handed="optimizer, scaler"),
        "handed by keyword": _run_state(handed="optimizer=optimizer, scaler=scaler"),
        "set on the instance later": _run_state(later="state.scaler = scaler"),
        "handed to the save": _run_state(extra=", scaler=scaler"),
        "bfloat16 only": _run_state(dtype="bfloat16"),
        "disabled where it is built": _run_state(scaler="build_off()"),
        "disabled by the caller": _run_state(scaler="build_scaler(enabled=False)"),
        "not handed the optimizer": _run_state(handed=""),
    }
    for why, files in twins.items():
        found, _ = _lint(tmp_path, files)
        assert found == [], why


# A base trainer of another module that builds its own GradScaler; a subclass in the
# importing module that uses it, or checkpoints without it. Nothing here builds a scaler
# the subclass's module could checkpoint: no finding is new.
OWN_SCALER_BASE = """
import torch


class BaseTrainer:
    def __init__(self, model, optimizer, amp=True):
        self.model = model
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler("cuda", enabled=amp)

    def save(self, path):
        torch.save({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scaler": self.scaler.state_dict()}, path)
"""

OWN_SCALER_SUBCLASS = """
import torch
from base_trainer import BaseTrainer


class Trainer(BaseTrainer):
    def step(self, x):
        with torch.autocast("cuda"):
            loss = self.model(x)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def snapshot(self, path):
        torch.save({"optimizer": self.optimizer.state_dict()}, path)

    def end_epoch(self, path):
        self.save(path)
"""


def test_a_subclass_of_a_trainer_that_owns_its_scaler_gets_no_new_finding(tmp_path):
    found, _ = _lint(tmp_path, {"base_trainer.py": OWN_SCALER_BASE, "train.py": OWN_SCALER_SUBCLASS})
    assert [code for _, _, code in found if code == "AMP007"] == []


def test_a_changed_checkpointer_is_seen_by_its_importer_through_the_cache(tmp_path):
    """The importer's cached result is keyed by the summaries it was linted with: a
    checkpointer that stops saving the optimizer's state clears its finding."""
    cache = tmp_path / "cache"
    root = tmp_path / "project"

    def lint(files):
        return lint_project(root, files, "--cache-dir", str(cache))[0]

    files = _run_state()
    assert lint(files) == [("train.py", 18, "AMP007")]
    assert lint(files) == [("train.py", 18, "AMP007")]  # warm
    files["run_state.py"] = RUN_STATE.replace(', "optimizer": self.optimizer.state_dict()', "")
    assert lint(files) == []
    files["run_state.py"] = RUN_STATE
    assert lint(files) == [("train.py", 18, "AMP007")]


def test_a_summary_says_what_state_functions_and_methods_save():
    source = textwrap.dedent(RUN_STATE) + textwrap.dedent(
        """
        class Resumer:
            def __init__(self, optimizer, lr_scheduler):
                self.optimizer = optimizer
                self.lr_scheduler = lr_scheduler

            def reset(self):
                self.optimizer = None

            def load(self, state):
                self.optimizer.load_state_dict(state["optimizer"])
                self.lr_scheduler.load_state_dict(state["lr_scheduler"])

            def keep(self):
                return copy.deepcopy(self.optimizer.state_dict())


        def save_checkpoint(model, optimizer, path):
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, path)
        """
    ) + textwrap.dedent(SCALERS)
    state = lint_source(source, "ckpt.py", ALL_RULES, whole=True).summary["state"]
    # The optimizers' and the scalers' state only: no other object's decides a finding.
    assert state["RunState.write"]["saves"] == ["self.optimizer", "self.scaler"]
    # `self.optimizer = optimizer or default` holds what is passed.
    assert state["RunState.__init__"]["sets"] == {"optimizer": "optimizer", "scaler": "scaler"}
    assert state["Resumer.load"]["restores"] == ["self.optimizer"]
    # Set to None elsewhere too, `self.optimizer` may not hold what the constructor was handed.
    assert "Resumer.__init__" not in state
    assert "Resumer.keep" not in state  # a copy kept in memory
    assert state["save_checkpoint"]["saves"] == ["param:optimizer"]
    assert state["build_scaler"]["scaler"] == '`torch.amp.GradScaler("cuda", enabled=enabled)`'
    assert state["build_scaler"]["enabled"] == "enabled"
    assert "build_off" not in state  # built with enabled=False


def test_a_checkpointing_module_is_analysed_when_an_importer_names_its_class_or_function():
    from amplint.lint.catalogue import state_names

    assert state_names(textwrap.dedent(RUN_STATE)) == {"RunState"}
    assert state_names("def save_checkpoint(m, opt, path):\n    torch.save(opt.state_dict(), path)\n") == {"save_checkpoint"}
    assert state_names("def f(m):\n    return m.state_dict\n") == frozenset()


# --------------------------------------------------------------------------- the summary


def test_a_summary_indexes_classes_their_bases_and_what_they_inherit(tmp_path):
    write_files(tmp_path, {"base.py": BASE, "custom.py": MIDDLE, "engine.py": ENGINE})
    base_path, custom_path, engine_path = (str(tmp_path / name) for name in ("base.py", "custom.py", "engine.py"))
    base = lint_source((tmp_path / "base.py").read_text(), base_path, ALL_RULES).summary
    assert base["version"] == SUMMARY_VERSION
    assert base["classes"] == {"Trainer": {"bases": [], "methods": ["__init__", "backward", "optimizer_step", "train_step"]}}
    # Alone, custom.py exports nothing; linted with base.py's summary, what MyTrainer inherits.
    assert lint_source((tmp_path / "custom.py").read_text(), custom_path, ALL_RULES, whole=True).summary is None
    custom = lint_source(
        (tmp_path / "custom.py").read_text(), custom_path, ALL_RULES, external=ExternalModules(custom_path, {base_path: base}), whole=True
    ).summary
    custom = json.loads(json.dumps(custom))  # plain JSON, for a cache
    assert custom["classes"] == {"MyTrainer": {"bases": [["Trainer", ["base", 0, "Trainer"]]], "methods": ["evaluate"]}}
    assert set(custom["functions"]) == {"MyTrainer.backward", "MyTrainer.optimizer_step", "MyTrainer.train_step"}
    assert custom["functions"]["MyTrainer.backward"] == base["functions"]["Trainer.backward"]
    # ... with the scaler those methods name, so that modules importing custom.py know it.
    assert set(custom["scalers"]) == set(base["scalers"])
    engine = lint_source((tmp_path / "engine.py").read_text(), engine_path, ALL_RULES).summary
    functions = engine["functions"]
    assert functions["train_one_epoch"]["fresh_scalers"] == [
        {"name": "scaler", "text": '`torch.amp.GradScaler("cuda")`', "optimizer": "param:optimizer", "optimizer_text": "optimizer"}
    ]
    assert functions["Loop.run_epoch"]["fresh_scalers"][0]["optimizer"] == "self"
    assert "fresh_scalers" not in functions["train_with"]  # handed its scaler


def test_a_summary_of_another_version_is_not_used():
    summary = lint_source(textwrap.dedent(BASE), "base.py", ALL_RULES).summary
    assert load_summary("base.py", summary) is not None
    assert load_summary("base.py", {**summary, "version": SUMMARY_VERSION - 1}) is None


def test_a_file_is_linted_again_for_a_method_only_where_its_class_is_named():
    from amplint.project.link import _names_one_of

    functions = ["clip_and_step", "Trainer.step", "Probe.__init__"]
    assert _names_one_of("clip_and_step(model)", functions)
    assert not _names_one_of("scheduler.step()", functions)  # `step`, but no Trainer
    assert _names_one_of("t = Trainer(m)\nt.step()", functions)
    assert _names_one_of("class Mine(base.Trainer):\n    pass", functions)  # inherits every method
    assert not _names_one_of("trainer = make_trainer()\nTrainer", ["Trainer.step"])
    assert _names_one_of("Probe(model, batch)", functions)  # its constructor
    # A class statement, not a word that ends in `class`; the first line of the file too.
    assert _names_one_of("class Mine(\n    base.Trainer,\n):\n    pass", ["Trainer.fit"])
    assert not _names_one_of("Trainer\nsubclass Mine(Trainer)", ["Trainer.fit"])
    assert not _names_one_of("Trainer\nmy_class Mine(Trainer)", ["Trainer.fit"])
    assert _names_one_of("x = 1;class Mine(Trainer): pass", ["Trainer.fit"])


def test_a_scaler_built_per_call_for_bfloat16_only_is_not_exported():
    engine = ENGINE.replace('torch.autocast("cuda")', 'torch.autocast("cuda", dtype=torch.bfloat16)')
    summary = lint_source(textwrap.dedent(engine), "engine.py", ALL_RULES).summary
    assert not any("fresh_scalers" in function for function in summary["functions"].values())


def test_the_helpers_of_a_module_without_amp_words_are_found_by_their_text():
    from amplint.lint.catalogue import helper_names

    assert helper_names(textwrap.dedent(GRAD_UTILS)) == {"grad_norm", "log_norm", "Monitor"}
    assert helper_names("def f(x):\n    return torch.autograd.grad(x, y)\n") == frozenset()  # not a `.grad` read
    assert helper_names("def clip(m):\n    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)\n") == {"clip"}


def test_a_checkpointer_of_a_linted_module_that_saves_no_optimizer_state_is_not_taken_by_its_name(tmp_path):
    # `Checkpointer(model, opt)` is handed the optimizer, but its module (linted with this
    # one) shows that `save` keeps only the model: its summary decides, not its name.
    helpers = '''
    import torch


    def step(optimizer, scaler, loss):
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


    class Checkpointer:
        def __init__(self, model, optimizer):
            self.model = model
            self.optimizer = optimizer

        def save(self, path):
            torch.save({"model": self.model.state_dict()}, path)
    '''
    train = '''
    import torch
    from helpers import step, Checkpointer

    model = torch.nn.Linear(4, 4).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    ck = Checkpointer(model, opt)
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        step(opt, scaler, loss)
    ck.save("last.pt")
    '''
    found, _ = _lint(tmp_path, {"helpers.py": helpers, "train.py": train})
    assert found == []
    saving = helpers.replace('{"model": self.model.state_dict()}', '{"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}')
    found, _ = _lint(tmp_path, {"helpers.py": saving, "train.py": train})
    assert found == [("train.py", 12, "AMP007")]


# --------------------------------------------------------------------------- a scaler an instance holds

# detectron2's AMPTrainer (#3686): a trainer of another module builds its own GradScaler
# unless it is handed one, and keeps it on `self.grad_scaler`; the importing module
# checkpoints the optimizer and never the trainer, so a resumed run starts again at 65536.
AMP_TRAINER = """
import torch


class AMPTrainer:
    def __init__(self, model, optimizer, grad_scaler=None, amp=True):
        self.model = model
        self.optimizer = optimizer
        if grad_scaler is None:
            grad_scaler = torch.amp.GradScaler("cuda", enabled=amp)
        self.grad_scaler = grad_scaler

    def run_step(self, x):
        with torch.autocast("cuda", dtype=torch.{dtype}):
            loss = self.model(x).sum()
        self.optimizer.zero_grad()
        self.grad_scaler.scale(loss).backward()
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()

    def state_dict(self):
        return {{"grad_scaler": self.grad_scaler.state_dict()}}

    def save(self, path):
        torch.save(self._everything(), path)

    def _everything(self):
        return {{"optimizer": self.optimizer.state_dict(), "scaler": self.state_dict()}}
"""

HOLDER_USED = """
import torch
from amp_trainer import AMPTrainer


def main(model, loader, max_iter, amp):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = {constructor}
    for it, x in enumerate(loader):
        trainer.run_step(x)
        if it % 1000 == 0:
            torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict(){extra}}}, "ckpt.pt")
    {later}
"""


def _holder(dtype="float16", constructor="AMPTrainer(model, optimizer)", extra="", later=""):
    used = HOLDER_USED.format(constructor=constructor, extra=extra, later=later)
    return {"amp_trainer.py": AMP_TRAINER.format(dtype=dtype), "train.py": used}


def test_a_scaler_an_instance_of_another_modules_class_holds_is_checkpointed_with_the_optimizer(tmp_path):
    found, findings = _lint(tmp_path, _holder())
    assert found == [("train.py", 11, "AMP007")]
    message = findings[0]["message"]
    assert "not `trainer.grad_scaler`'s (`AMPTrainer(model, optimizer)`, which builds `torch.amp.GradScaler(\"cuda\", enabled=amp)` in amp_trainer.py)" in message
    # Chosen by configuration, as detectron2's DefaultTrainer does: it may be the AMP trainer.
    found, _ = _lint(tmp_path, _holder(constructor="(AMPTrainer if amp else Trainer)(model, optimizer)"))
    assert found == [("train.py", 11, "AMP007")]


def test_a_file_without_amp_words_that_makes_a_trainer_holding_a_scaler_is_linted_cold_and_warm(tmp_path):
    # train.py has no AMP word: skipped on its own, linted because it imports and names AMPTrainer.
    cache = tmp_path / "cache"
    for _ in ("cold", "warm"):
        found, _ = lint_project(tmp_path / "project", _holder(), "--cache-dir", str(cache))
        assert found == [("train.py", 11, "AMP007")]
    # Naming the class without importing it from its module is no reason to parse the file.
    files = _holder()
    files["train.py"] = files["train.py"].replace("from amp_trainer import AMPTrainer", "from trainers import AMPTrainer")
    found, _ = lint_project(tmp_path / "other", files, "--no-cache")
    assert found == []


def test_a_scaler_an_instance_holds_is_clean_when_the_instance_may_keep_it(tmp_path):
    twins = {
        "the trainer's state saved": _holder(extra=', "trainer": trainer.state_dict()'),
        "the scaler's state saved": _holder(extra=', "scaler": trainer.grad_scaler.state_dict()'),
        "a method that saves it called": _holder(later='trainer.save("last.pt")'),
        "the trainer handed on": _holder(later='checkpointer = Checkpointer(model, trainer=trainer)'),
        "handed a scaler of the caller": _holder(constructor="AMPTrainer(model, optimizer, grad_scaler=scaler)"),
        "disabled by the caller": _holder(constructor="AMPTrainer(model, optimizer, amp=False)"),
        "bfloat16 only": _holder(dtype="bfloat16"),
        "disabled by default": _holder_class("grad_scaler=None, amp=True", "grad_scaler=None, amp=False"),
        "enabled as the instance says": _holder_class("enabled=amp)", "enabled=self.amp)"),
        "arguments unpacked": _holder_class(
            "grad_scaler=None, amp=True):\n        self.model = model\n        self.optimizer = optimizer\n        if grad_scaler is None:\n            grad_scaler = torch.amp.GradScaler(\"cuda\", enabled=amp)\n        self.grad_scaler = grad_scaler\n",
            "amp=True):\n        self.model = model\n        self.optimizer = optimizer\n        self.grad_scaler = torch.amp.GradScaler(\"cuda\", enabled=amp)\n",
            constructor="AMPTrainer(model, optimizer, **cfg)",
        ),
        "the instance handed on by its constructor": _holder_class("        self.grad_scaler = grad_scaler\n", "        self.grad_scaler = grad_scaler\n        self.checkpointer = Checkpointer(trainer=self)\n"),
        "the instance handed on by a method called": _holder_class("    def save(self, path):\n", "    def end_epoch(self):\n        save_everything(self, 'last.pt')\n\n    def save(self, path):\n", later="trainer.end_epoch()"),
        "an inherited method called": _holder_class("class AMPTrainer:", "class AMPTrainer(BaseTrainer):", later="trainer.train()"),
    }
    for why, files in twins.items():
        found, _ = _lint(tmp_path, files)
        assert found == [], why


def _holder_class(old, new, **fields):
    """`_holder(**fields)` with the trainer class's text changed (`old` -> `new`)."""
    files = _holder(**fields)
    assert old in files["amp_trainer.py"]
    files["amp_trainer.py"] = files["amp_trainer.py"].replace(old, new)
    return files


def test_a_scaler_an_instance_holds_counts_only_where_a_checkpoint_is_connected(tmp_path):
    files = _holder()
    files["train.py"] = """
    import torch
    from amp_trainer import AMPTrainer


    def warmup(model, optimizer, loader):
        trainer = AMPTrainer(model, optimizer)
        for x in loader:
            trainer.run_step(x)


    def save(optimizer):
        torch.save({"optimizer": optimizer.state_dict()}, "ckpt.pt")
    """
    found, _ = _lint(tmp_path, files)
    assert found == []


def test_a_summary_says_which_attribute_of_an_instance_holds_the_scaler_it_builds():
    summary = lint_source(textwrap.dedent(AMP_TRAINER.format(dtype="float16")), "amp_trainer.py", ALL_RULES, whole=True).summary
    held = summary["facts"]["held_scalers"]["AMPTrainer"]
    assert held == {
        "attribute": "grad_scaler",
        "scaler": '`torch.amp.GradScaler("cuda", enabled=amp)`',
        "enabled": "amp",
        "given": "grad_scaler",
        "enabled_default": True,
        "kept_by": ["_everything", "save", "state_dict"],
        "methods": ["__init__", "_everything", "run_step", "save", "state_dict"],
        "params": ["self", "model", "optimizer", "grad_scaler", "amp"],
        "words": ["GradScaler"],
    }
    # bfloat16 only: nothing to keep.
    summary = lint_source(textwrap.dedent(AMP_TRAINER.format(dtype="bfloat16")), "amp_trainer.py", ALL_RULES, whole=True).summary
    assert "held_scalers" not in summary.get("facts", {})
