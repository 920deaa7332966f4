"""Linting modules that import each other: helpers of other linted modules count where they
are called, and what a function does is exported as plain JSON."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from amplint.lint.engine import lint_source
from amplint.rules import ALL_RULES
from amplint.semantic.foreign import ExternalModules, load_summary

OPTIM_UTILS = """
import torch


def clip_and_step(model, optimizer, scaler, max_norm=1.0):
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()


def backward(loss):
    loss.backward()


def optimizer_step(optimizer):
    optimizer.step()
    optimizer.zero_grad()


def step_and_log(scaler, optimizer):
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()


class Stepper:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, optimizer):
        self.scaler.step(optimizer)
        self.scaler.update()
"""

TRAIN = """
import torch

from .optim_utils import backward, clip_and_step, optimizer_step, step_and_log, Stepper
from . import optim_utils


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        loss.backward()
        clip_and_step(model, optimizer, scaler)


def train_inside(model, loader, optimizer):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for x in loader:
            loss = model(x)
            backward(loss)
            optimizer_step(optimizer)


def train_with_a_stepper(model, loader, optimizer):
    stepper = Stepper()
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        loss.backward()
        stepper.step(optimizer)


def train_right(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        optim_utils.clip_and_step(model, optimizer, scaler)


def train_optional_scaler(model, loader, optimizer, scaler=None):
    # The helper's `scaler is not None` is this caller's: its plain step never sees scaled gradients.
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        step_and_log(scaler, optimizer)
"""


def _project(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "optim_utils.py").write_text(OPTIM_UTILS)
    (package / "train.py").write_text(TRAIN)
    return package


def _lint(*args, cwd):
    done = subprocess.run(
        [sys.executable, "-m", "amplint", "--isolated", "--output-format", "json", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
    )
    return done.returncode, json.loads(done.stdout)


def test_helpers_of_other_linted_modules_count_where_they_are_called(tmp_path):
    _project(tmp_path)
    code, findings = _lint("pkg", cwd=tmp_path)
    assert code == 1
    found = sorted((os.path.relpath(f["filename"], tmp_path).replace(os.sep, "/"), f["location"]["row"], f["code"]) for f in findings)
    assert found == [
        ("pkg/train.py", 13, "AMP001"),  # stepped by clip_and_step's scaler.step()
        ("pkg/train.py", 21, "AMP006"),  # backward(loss) runs loss.backward() under autocast
        ("pkg/train.py", 22, "AMP004"),  # optimizer_step() steps inside a region that spans the loop
        ("pkg/train.py", 30, "AMP001"),  # Stepper().step() steps its own GradScaler
    ]
    messages = {f["location"]["row"]: f"{f['message']}. {f['help']}" for f in findings}
    assert "`scaler.step(optimizer)` in optim_utils.py" in messages[13]


def test_alone_the_importing_file_shows_only_what_its_own_code_does(tmp_path):
    # `stepper.step(optimizer)` steps with an optimizer argument, which only a scaler does;
    # the other three need optim_utils.py to be linted too.
    package = _project(tmp_path)
    code, findings = _lint(str(package / "train.py"), cwd=tmp_path)
    assert [(f["location"]["row"], f["code"]) for f in findings] == [(30, "AMP001")]


def test_a_module_exports_what_its_functions_do_as_json():
    result = lint_source(textwrap.dedent(OPTIM_UTILS), "optim_utils.py", ALL_RULES)
    summary = json.loads(json.dumps(result.summary))  # plain JSON, for a cache
    functions = summary["functions"]
    assert set(functions) == {"clip_and_step", "backward", "optimizer_step", "step_and_log", "Stepper.step"}
    facts = {(text, tuple(names), value) for sequence in functions["step_and_log"]["sequences"] for text, names, value in sequence["facts"]}
    assert facts == {("scaler", ("scaler",), True), ("scaler", ("scaler",), False)}
    kinds = [event["kind"] for event in functions["clip_and_step"]["events"]]
    assert kinds == ["scaler.unscale_", "clip", "scaler.step", "scaler.update"]
    step = functions["clip_and_step"]["events"][2]
    assert step["receiver"]["key"] == "param:scaler" and step["argument"]["key"] == "param:optimizer"
    assert functions["backward"]["events"][0]["tensor_param"] == "loss"
    assert functions["Stepper.step"]["method"] is True
    assert any(s["enabled"] is True for s in summary["scalers"].values())


def test_a_way_through_names_its_events_by_their_place_and_loads_them_whole():
    result = lint_source(textwrap.dedent(OPTIM_UTILS), "optim_utils.py", ALL_RULES)
    summary = json.loads(json.dumps(result.summary))
    raw = summary["functions"]["step_and_log"]
    table = raw["events"] + raw.get("sequence_events", [])
    ways = raw["sequences"]
    assert ways and all(type(place) is int for way in ways for place in way["events"])
    # Written once each: the ways through name the function's own events, not copies of them.
    assert "sequence_events" not in raw and {place for way in ways for place in way["events"]} == set(range(len(raw["events"])))
    loaded = load_summary("optim_utils.py", summary).functions["step_and_log"]
    assert [[event.text for event in events] for _, events in loaded.sequences] == [[table[place]["text"] for place in way["events"]] for way in ways]
    # An event only a way through has (the way knows more of it) comes after the function's own.
    extended = json.loads(json.dumps(summary))
    function = extended["functions"]["step_and_log"]
    function["sequence_events"] = [{**function["events"][0], "text": "`only_here()`"}]
    function["sequences"][0]["events"] = [len(function["events"]), 0]
    texts = [event.text for event in load_summary("optim_utils.py", extended).functions["step_and_log"].sequences[0][1]]
    assert texts == ["`only_here()`", function["events"][0]["text"]]
    # A place that is not in the table is a summary amplint did not write: an error, never a guess.
    broken = json.loads(json.dumps(summary))
    broken["functions"]["step_and_log"]["sequences"][0]["events"] = [len(table)]
    with pytest.raises(ValueError):
        load_summary("optim_utils.py", broken)
    broken["functions"]["step_and_log"]["sequences"][0]["events"] = [True]
    with pytest.raises(ValueError):
        load_summary("optim_utils.py", broken)


def test_only_files_that_name_a_function_of_an_imported_summary_are_linted_again(tmp_path):
    from amplint.project.link import link

    package = _project(tmp_path)
    (package / "names_none.py").write_text(
        "import torch\nfrom .optim_utils import LIMIT\n\n\ndef infer(model, x):\n    with torch.autocast('cuda'):\n        return model(x)\n"
    )
    (package / "alias.py").write_text(
        "import torch\nfrom .optim_utils import optimizer_step as go\n\n\ndef f(model):\n"
        "    opt = torch.optim.Adafactor(model.parameters())\n    with torch.autocast('cuda'):\n        go(opt)\n"
    )
    paths = [str(package / name) for name in ("optim_utils.py", "train.py", "names_none.py", "alias.py")]
    first = [lint_source((package / os.path.basename(p)).read_text(), p, ALL_RULES) for p in paths]
    relinted = []

    def relint(jobs):
        relinted.extend(os.path.basename(path) for path, _ in jobs)
        return [lint_source(open(path).read(), path, ALL_RULES, external=ExternalModules(path, used), whole=True) for path, used in jobs]

    results = link(first, relint)
    assert sorted(relinted) == ["alias.py", "train.py"]
    assert results[2] is first[2]
    # ... and the alias still counts where it is called: AMP004 on `go(opt)` (an Adafactor step
    # under float16 autocast).
    assert [(f.row, f.code) for f in results[3].findings] == [(8, "AMP004")]
    # Without the text, every imported summary is used.
    relinted.clear()
    link(first, relint, read=lambda path: None)
    assert sorted(relinted) == ["alias.py", "names_none.py", "train.py"]


def test_import_words_are_the_names_of_top_level_imports():
    from amplint.lint.catalogue import import_words

    source = "import os, torch.nn as nn\nfrom .train_loop import AMPTrainer, SimpleTrainer\nfrom pkg import (\n    utils,\n)\n\ndef f():\n    import json\n"
    assert import_words(source) == ("AMPTrainer", "SimpleTrainer", "nn", "os", "pkg", "torch", "train_loop", "utils")


def test_an_absolute_import_names_the_nearest_file_above_the_importer():
    from amplint.project.import_paths import PathIndex

    root = os.path.join(os.sep, "repo")
    paths = [os.path.join(root, *p) for p in (("val.py",), ("classify", "val.py"), ("segment", "val.py"), ("tools", "utils.py"), ("utils.py",), ("tools", "train.py"))]
    index = PathIndex(paths)
    assert index.path_of(os.path.join(root, "train.py"), "val", 0) == os.path.join(root, "val.py")
    assert index.path_of(os.path.join(root, "classify", "train.py"), "val", 0) == os.path.join(root, "classify", "val.py")
    assert index.path_of(os.path.join(root, "classify", "train.py"), "classify.val", 0) == os.path.join(root, "classify", "val.py")
    # The script's own directory first, as on sys.path.
    assert index.path_of(os.path.join(root, "tools", "train.py"), "utils", 0) == os.path.join(root, "tools", "utils.py")
    assert index.path_of(os.path.join(root, "main.py"), "utils", 0) == os.path.join(root, "utils.py")
    # Nothing above the importer: not decided.
    assert index.path_of(os.path.join(os.sep, "elsewhere", "main.py"), "val", 0) is None
