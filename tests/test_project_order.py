"""The order a run analyses its files in (`amplint.project.order`): each module after the
linted modules it imports, so that an importer is linted once, with their summaries; only an
import cycle (or an import the text does not show) makes a file be linted again."""

import os
import textwrap

import pytest

from amplint.project.import_paths import PathIndex
from amplint.project.order import components, import_graph, imports_named, waves
from amplint.run.driver import Job, Runner


def test_imports_named_are_what_an_analysis_lists():
    text = "import os, pkg.mod as m\nfrom . import utils\nfrom ..steps import (a,\n    b as c)\n"
    # (`c`, the name `b` is bound to, is looked for as a module too: a harmless extra.)
    assert imports_named(text) == [("", 1), ("os", 0), ("pkg.mod", 0), ("steps", 2), ("steps.a", 2), ("steps.b", 2), ("steps.c", 2), ("utils", 1)]


def test_the_graph_resolves_imports_among_the_files_given():
    texts = {
        "/p/train.py": "from utils import clip\nimport models\nimport torch\n",
        "/p/utils.py": "from .steps import step\n",
        "/p/steps.py": "import torch\n",
        "/p/models/__init__.py": "from .net import Net\n",
    }
    paths = [*texts, "/p/models/net.py"]
    graph = import_graph(texts, PathIndex(paths))
    assert graph == {
        "/p/train.py": {"/p/utils.py", "/p/models/__init__.py"},
        "/p/utils.py": {"/p/steps.py"},
        "/p/steps.py": set(),
        "/p/models/__init__.py": set(),  # net.py is not one the pre-check lets through
    }


def test_waves_put_every_module_after_what_it_imports():
    graph = {"train": {"utils", "models"}, "utils": {"steps"}, "steps": set(), "models": {"steps"}, "alone": set()}
    assert waves(graph) == [["alone", "steps"], ["models", "utils"], ["train"]]


def test_an_import_cycle_is_one_component_in_one_wave():
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}, "d": set()}
    assert components(graph) == [["a", "b"], ["c"], ["d"]]
    assert waves(graph) == [["a", "b", "d"], ["c"]]


STEPS = """
import torch


def clip(model):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
"""

TRAIN = """
import torch

from steps import clip


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x)
        scaler.scale(loss).backward()
        clip(model)
        scaler.step(optimizer)
        scaler.update()
"""


class _Counting(Runner):
    """A runner that notes every job it lints (cache misses and hits alike)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.jobs = []

    def lint(self, jobs, cancel=None):
        self.jobs.extend((os.path.basename(job.path), bool(job.imported)) for job in jobs)
        return super().lint(jobs, cancel)


def _project(tmp_path, files):
    for name, text in files.items():
        (tmp_path / name).write_text(textwrap.dedent(text))
    return [str(tmp_path / name) for name in files]


@pytest.mark.parametrize("order", [("train.py", "steps.py"), ("steps.py", "train.py")])
def test_an_importer_is_linted_once_with_the_summaries_of_what_it_imports(tmp_path, order):
    paths = _project(tmp_path, {name: {"steps.py": STEPS, "train.py": TRAIN}[name] for name in order})
    codes = ("AMP003",)
    with _Counting(isolate=False) as runner:
        results = runner.lint_project([Job(path, codes) for path in paths])
    assert runner.jobs == [("steps.py", False), ("train.py", True)]
    by_name = {os.path.basename(r.path): r for r in results}
    # The helper's clip runs before any unscale_: reported at the call in train.py.
    assert [(f.code, f.row) for f in by_name["train.py"].findings] == [("AMP003", 13)]


def test_an_import_cycle_is_linted_again_until_nothing_changes(tmp_path):
    steps = STEPS + "\n\nfrom train import train  # a cycle\n"
    paths = _project(tmp_path, {"steps.py": steps, "train.py": TRAIN})
    with _Counting(isolate=False) as runner:
        results = runner.lint_project([Job(path, ("AMP003",)) for path in paths])
    names = [name for name, _ in runner.jobs]
    assert names.count("train.py") >= 2  # first without the helper's summary, then with it
    by_name = {os.path.basename(r.path): r for r in results}
    assert [(f.code, f.row) for f in by_name["train.py"].findings] == [("AMP003", 13)]


def test_a_warm_run_takes_every_result_from_the_cache(tmp_path):
    from amplint.run.cache import Cache

    paths = _project(tmp_path, {"steps.py": STEPS, "train.py": TRAIN})
    jobs = [Job(path, ("AMP003",)) for path in paths]
    cache_dir = tmp_path / "cache"
    with Runner(isolate=False, cache=Cache(str(cache_dir), fingerprint="test-build")) as runner:
        cold = runner.lint_project(jobs)
    with _Counting(isolate=False, cache=Cache(str(cache_dir), fingerprint="test-build")) as runner:
        warm = runner.lint_project(jobs)
    assert runner.jobs == [] and runner.linted == 0
    assert [(r.path, r.findings) for r in warm] == [(r.path, r.findings) for r in cold]
