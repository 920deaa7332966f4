"""A package's `__init__.py` that re-exports from its modules (`amplint.project.reexports`): `from utils
import grad_norm` is the function of `utils/grads.py` when `utils/__init__.py` binds it from
there, as Python has it; the same findings as importing `utils.grads` directly."""

import pytest

from amplint.project.reexports import ReExports, reexported
from conftest import lint_project
from test_project_ema import EMA_UTILS as EMA

GRADS = """
def grad_norm(model):
    total = 0.0
    for p in model.parameters():
        if p.grad is not None:
            total += p.grad.norm().item() ** 2
    return total ** 0.5
"""

TRAIN = """
import torch
{import_line}


def train(model, loader, opt):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        {unscale}
        norm = {call}(model)
        scaler.step(opt)
        scaler.update()
        print(norm)
"""

EMA_TRAIN = """
import torch
from utils import ModelEMA


def main(model, optimizer, loader):
    model.half()
    ema = ModelEMA(model)
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        ema.update(model)
"""


def _train(import_line="from utils import grad_norm", call="grad_norm", unscale="pass"):
    return TRAIN.format(import_line=import_line, call=call, unscale=unscale)


_codes = lint_project  # (file, row, code) of each finding, and the findings


@pytest.mark.parametrize(
    "init, import_line, call",
    [
        ("from .grads import grad_norm\n", "from utils import grad_norm", "grad_norm"),
        ("from .grads import grad_norm as gn\n", "from utils import gn", "gn"),
        ("from .grads import (  # the helpers\n    grad_norm,\n)\n", "from utils import grad_norm", "grad_norm"),
        ("from .grads import *\n", "from utils import grad_norm", "grad_norm"),
        ("from utils.grads import grad_norm\n", "import utils", "utils.grad_norm"),
        # A chain: the package re-exports what its subpackage re-exports.
        ("from .inner import grad_norm\n", "from utils import grad_norm", "grad_norm"),
    ],
)
def test_a_helper_re_exported_by_a_package_is_the_helper(tmp_path, init, import_line, call):
    files = {"utils/__init__.py": init, "utils/grads.py": GRADS, "train.py": _train(import_line, call)}
    if ".inner" in init:
        files = {"utils/__init__.py": init, "utils/inner/__init__.py": "from .grads import grad_norm\n", "utils/inner/grads.py": GRADS, "train.py": _train(import_line, call)}
    for options in (["--no-cache"], [], []):  # cold, then warm twice
        rows, findings = _codes(tmp_path, files, *options)
        assert rows == [("train.py", 12, "AMP009")], options
        assert "(which reads `p.grad` in grads.py)" in findings[0]["message"]


def test_the_same_findings_as_importing_the_module(tmp_path):
    files = {"utils/__init__.py": "from .grads import grad_norm\n", "utils/grads.py": GRADS}
    through_package, _ = _codes(tmp_path / "a", {**files, "train.py": _train()}, "--no-cache")
    direct, _ = _codes(tmp_path / "b", {**files, "train.py": _train("from utils.grads import grad_norm")}, "--no-cache")
    assert through_package == direct == [("train.py", 12, "AMP009")]


@pytest.mark.parametrize(
    "init",
    [
        "from .grads import other_name\n",  # not the helper
        "from .grads import _grad_norm\n",
        "if False:\n    from .grads import grad_norm\n",  # not a top-level line
        "",  # nothing re-exported
    ],
)
def test_what_the_package_does_not_re_export_is_not_followed(tmp_path, init):
    files = {"utils/__init__.py": init, "utils/grads.py": GRADS, "train.py": _train()}
    assert _codes(tmp_path, files, "--no-cache")[0] == []


def test_unscaled_first_stays_clean(tmp_path):
    files = {"utils/__init__.py": "from .grads import grad_norm\n", "utils/grads.py": GRADS, "train.py": _train(unscale="scaler.unscale_(opt)")}
    assert _codes(tmp_path, files, "--no-cache")[0] == []


def test_a_class_re_exported_by_a_package_carries_its_facts(tmp_path):
    files = {"utils/__init__.py": "from .ema import ModelEMA\n", "utils/ema.py": EMA, "train.py": EMA_TRAIN}
    direct = {"utils/__init__.py": "", "utils/ema.py": EMA, "train.py": EMA_TRAIN.replace("from utils import", "from utils.ema import")}
    assert [code for _, _, code in _codes(tmp_path / "a", direct, "--no-cache")[0]] == ["AMP010"]
    assert _codes(tmp_path / "b", files, "--no-cache")[0] == _codes(tmp_path / "a", direct, "--no-cache")[0]


SCALER_WRAPPER = """
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

WRAPPED_TRAIN = """
import torch
from utils import AmpOptimizer


def train(model, loader):
    optimizer = AmpOptimizer(torch.optim.AdamW(model.parameters()))
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        optimizer.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
"""


def test_a_scaler_wrapper_re_exported_by_a_package_holds_its_scaler(tmp_path):
    # The wrapper's scaler (its summary's `scalers`, by the origin's keys) comes with the class:
    # the clip between its backward and its step sees scaled gradients, as through utils.amp.
    files = {"utils/__init__.py": "from .amp import AmpOptimizer\n", "utils/amp.py": SCALER_WRAPPER, "train.py": WRAPPED_TRAIN}
    direct = {"utils/__init__.py": "", "utils/amp.py": SCALER_WRAPPER, "train.py": WRAPPED_TRAIN.replace("from utils import", "from utils.amp import")}
    assert _codes(tmp_path / "a", direct, "--no-cache")[0] == [("train.py", 11, "AMP003")]
    assert _codes(tmp_path / "b", files, "--no-cache")[0] == _codes(tmp_path / "a", direct, "--no-cache")[0]


def test_reexported_reads_top_level_from_imports():
    text = "from .a import x, y as z  # note\nfrom . import b\nimport os\nfrom .c import (\n    p,\n    q as r,\n)\nfrom .d import *\n    from .e import w\n"
    assert list(reexported(text)) == [
        ("a", 1, "x", "x"),
        ("a", 1, "y", "z"),
        ("", 1, "b", "b"),
        ("c", 1, "p", "p"),
        ("c", 1, "q", "r"),
        ("d", 1, "*", "*"),
    ]


def test_a_package_summary_is_the_same_object_while_its_sources_are():
    grads = {"version": 4, "functions": {"grad_norm": {"params": ["m"], "events": []}, "_private": {"params": [], "events": []}}}
    own = {"version": 4, "functions": {"local": {"params": [], "events": []}}, "scalers": {}, "classes": {}}
    reexports = ReExports({"u/__init__.py": [("gn", "u/grads.py", "grad_norm"), ("*", "u/grads.py", "*")]})
    first = reexports.apply({"u/grads.py": grads, "u/__init__.py": own})
    made = first["u/__init__.py"]
    assert set(made["functions"]) == {"local", "gn", "grad_norm"}
    assert made["functions"]["gn"]["home"] == "u/grads.py" and "home" not in grads["functions"]["grad_norm"]
    assert own["functions"].keys() == {"local"}  # its own summary is not changed
    assert reexports.apply({"u/grads.py": grads, "u/__init__.py": own})["u/__init__.py"] is made
    changed = {**grads, "functions": {}}
    assert reexports.apply({"u/grads.py": changed, "u/__init__.py": own})["u/__init__.py"] is not made


@pytest.mark.parametrize("init", ["from .lit import LitModel\n", "from .lit import *\n", "from .lit import LitModel as Model\n"])
def test_a_lightning_module_a_package_re_exports_is_trained_where_it_is_defined(tmp_path, init):
    from test_project_frameworks import LIT_MODEL, LIT_TRAIN, RAW_CLIP

    local = "Model" if " as " in init else "LitModel"
    files = {
        "models/__init__.py": init,
        "models/lit.py": LIT_MODEL.format(clip=RAW_CLIP),
        "train.py": LIT_TRAIN.format(imports=f"from models import {local}", precision='"16-mixed"', model=f"{local}()"),
    }
    rows, findings = _codes(tmp_path, files, "--no-cache")
    assert rows == [("models/lit.py", 15, "AMP003")]
    assert findings[0]["message"].endswith("(../train.py trains `LitModel` in float16)")
    # A Trainer in 32 bits trains nothing in float16.
    files["train.py"] = files["train.py"].replace('"16-mixed"', '"32-true"')
    assert _codes(tmp_path / "fp32", files, "--no-cache")[0] == []


def test_an_importer_sees_only_what_it_names_of_a_package():
    grads = {"version": 4, "functions": {"grad_norm": {"params": ["m"], "events": []}, "Ema.update": {"params": ["self"], "events": []}}}
    reexports = ReExports({"u/__init__.py": [("*", "u/grads.py", "*")]})
    package = reexports.apply({"u/grads.py": grads})["u/__init__.py"]
    seen = reexports.seen_by("u/__init__.py", "train.py", package, "from u import grad_norm\ngrad_norm(model)\n")
    assert set(seen["functions"]) == {"grad_norm"}
    again = reexports.seen_by("u/__init__.py", "train.py", {**package, "functions": dict(package["functions"])}, "from u import grad_norm\ngrad_norm(model)\n")
    assert again is seen  # the same view while what it names is unchanged: no new round
    assert reexports.seen_by("u/grads.py", "train.py", grads, "") is grads  # a module is seen whole


def test_a_package_alone_changing_starts_no_new_round():
    reexports = ReExports({"u/__init__.py": [("*", "u/grads.py", "*")]})
    first = {"u/__init__.py": {"version": 4}, "m.py": {"version": 4}}
    assert reexports.only_packages_changed(first, {**first, "u/__init__.py": {"version": 4}})
    assert not reexports.only_packages_changed(first, {**first, "m.py": {"version": 4}})
    assert not reexports.only_packages_changed(None, first)


def test_a_name_bound_by_name_wins_over_a_star_before_it():
    reexports = ReExports({"m/__init__.py": [("*", "m/other.py", "*"), ("LitModel", "m/lit.py", "LitModel")]})
    assert reexports.origin_of("m/__init__.py", "LitModel") == ("m/lit.py", "LitModel")
    assert reexports.origin_of("m/__init__.py", "Else") == ("m/other.py", "Else")
    assert reexports.origin_of("x.py", "LitModel") == ("x.py", "LitModel")
