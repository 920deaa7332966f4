"""An EMA class of one module constructed with a float16 model in another (AMP010 across
modules): the module that defines the class exports what its constructor copies and which
method decays the copy in place (`Precision.export`, the summary's `facts`), and the module
that casts the model and builds the EMA reports it at the construction."""

import json
import textwrap

from amplint.lint.engine import lint_source
from amplint.rules import ALL_RULES
from amplint.semantic.foreign import ExternalModules, LookupRecorder, load_summary
from conftest import lint_project, write_files


def _run(root, *options):
    return lint_project(root, {}, *options)


def _lint(root, files, *options):
    """(file, row, code) of each AMP010 finding of `amplint` run on `files`, and the findings."""
    rows, findings = lint_project(root, files, "--no-cache", *options)
    return [row for row in rows if row[2] == "AMP010"], [f for f in findings if f["code"] == "AMP010"]


# No AMP word in it (no `.half(`, no autocast): analysed because a linted module imports it.
EMA_UTILS = """
import copy

import torch


class ModelEMA:
    def __init__(self, model, decay=0.9999):
        self.ema = copy.deepcopy(model).eval()
        self.decay = decay

    def update(self, model):
        with torch.no_grad():
            for e, p in zip(self.ema.parameters(), model.parameters()):
                e.mul_(self.decay).add_(p.detach(), alpha=1 - self.decay)
"""

TRAIN = """
import torch
from utils import ModelEMA


def main(model, optimizer, loader):
    {before}
    ema = ModelEMA(model)
    {after}
    for x, y in loader:
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        ema.update(model)
"""


def _train(before="pass", after="pass"):
    return TRAIN.format(before=before, after=after)


def test_an_ema_class_of_another_module_built_from_a_float16_model(tmp_path):
    rows, findings = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": _train(before="model.half()")})
    assert rows == [("train.py", 7, "AMP010")]
    message = findings[0]["message"]
    assert "`ModelEMA(model)` copies `model` after `model.half()` cast it to float16" in message
    assert "`ModelEMA`, utils.py:6" in message and "`copy.deepcopy(model).eval()`" in message
    assert "`ema.update(model)` then decays it in place" in message


def test_the_same_ema_built_before_the_cast_or_from_a_model_cast_back_is_clean(tmp_path):
    # Built before the cast: the copy is float32.
    rows, _ = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": _train(after="model.half()")})
    assert rows == []
    # Cast back to float32 before it is built.
    rows, _ = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": _train(before="model.half()\n    model.float()")})
    assert rows == []


def test_bfloat16_and_an_unknown_model_are_not_flagged(tmp_path):
    rows, _ = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": _train(before="model.to(torch.bfloat16)")})
    assert rows == []  # AMP010 leaves bfloat16 alone
    # Another module is cast; the EMA copies one we know nothing of.
    unknown = _train(before="teacher.half()").replace("ModelEMA(model)", "ModelEMA(build_student())")
    rows, _ = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": unknown})
    assert rows == []


def test_a_dtype_that_may_be_float16_says_may(tmp_path):
    before = "dtype = torch.float16 if args.fp16 else torch.float32\n    model.to(dtype=dtype)"
    train = _train(before=before).replace("def main(model, optimizer, loader)", "def main(model, optimizer, loader, args)")
    rows, findings = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": train})
    assert rows == [("train.py", 8, "AMP010")]
    assert "float16 (one of the dtypes it can be)" in findings[0]["message"] and "so that copy may be float16 too" in findings[0]["message"]


def test_an_inference_only_cast_after_training_is_clean(tmp_path):
    train = """
    import torch
    from utils import ModelEMA


    def main(model, optimizer, loader):
        ema = ModelEMA(model)
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
            ema.update(model)
        model.half()
        frozen = ModelEMA(model)
        torch.save(frozen.ema.state_dict(), "ema.pt")
    """
    rows, _ = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": train})
    assert rows == []


def test_an_ema_class_that_keeps_its_own_dtype_or_never_decays_in_place_is_clean(tmp_path):
    variants = {
        # casts its copy to float32 itself
        "float": EMA_UTILS.replace("copy.deepcopy(model).eval()", "copy.deepcopy(model).float()"),
        # assigns each parameter anew in float32
        "reassigned": EMA_UTILS.replace(
            "        self.decay = decay\n",
            "        self.decay = decay\n        for p in self.ema.parameters():\n            p.data = p.data.float()\n",
        ),
        # copies the weights, decays nothing
        "copy": EMA_UTILS.replace(
            "                e.mul_(self.decay).add_(p.detach(), alpha=1 - self.decay)", "                e.copy_(p.detach())"
        ),
    }
    for name, utils in variants.items():
        assert utils != EMA_UTILS, name
        rows, _ = _lint(tmp_path, {"utils.py": utils, "train.py": _train(before="model.half()")})
        assert rows == [], name


def test_an_ema_built_but_never_updated_is_clean(tmp_path):
    train = _train(before="model.half()").replace("        ema.update(model)\n", "")
    rows, _ = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": train})
    assert rows == []


VALIDATE = """
import torch
from utils import ModelEMA


def main(model, optimizer, loader):
    ema = ModelEMA(model)
    for epoch in range(10):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
            ema.update(model)
        ema.ema.half()
        evaluate(ema.ema)
        {after}
"""


def test_the_copy_of_an_ema_of_another_module_cast_for_validation_then_decayed(tmp_path):
    # yolov5 #9016: validation halved `ema.ema`, and the next epoch decayed it in float16.
    rows, findings = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": VALIDATE.format(after="pass")})
    assert rows == [("train.py", 12, "AMP010")]
    message = findings[0]["message"]
    assert "`ema.ema.half()` casts the copy that `ModelEMA` (utils.py:6) keeps in `self.ema`" in message
    assert "`ema.update(model)` then decays it in place" in message


def test_the_copy_cast_back_after_validation_or_cast_once_training_is_over_is_clean(tmp_path):
    rows, _ = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": VALIDATE.format(after="ema.ema.float()")})
    assert rows == []
    after_training = VALIDATE.format(after="pass").replace("        ema.ema.half()\n        evaluate(ema.ema)\n", "") + "    ema.ema.half()\n    export(ema.ema)\n"
    rows, _ = _lint(tmp_path, {"utils.py": EMA_UTILS, "train.py": after_training})
    assert rows == []


# yolov5 / ultralytics: a deep copy of the unwrapped model, its state dict decayed with `*=`.
YOLO_EMA = """
import math
from copy import deepcopy

import torch
import torch.nn as nn


def de_parallel(model):
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


class ModelEMA:
    \"\"\"Keeps a moving average of everything in the model state_dict.\"\"\"

    def __init__(self, model, decay=0.9999, tau=2000, updates=0):
        self.ema = deepcopy(de_parallel(model)).eval()  # FP32 EMA
        self.updates = updates
        self.decay = lambda x: decay * (1 - math.exp(-x / tau))
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        self.updates += 1
        d = self.decay(self.updates)
        msd = de_parallel(model).state_dict()
        for k, v in self.ema.state_dict().items():
            if v.dtype.is_floating_point:
                v *= d
                v += (1 - d) * msd[k].detach()
"""

YOLO_TRAIN = """
import torch
from utils.torch_utils import ModelEMA


class Trainer:
    def __init__(self, model, device):
        self.model = model.to(device).half()
        self.optimizer = FP16_Optimizer(torch.optim.SGD(self.model.parameters(), lr=0.01))
        self.ema = ModelEMA(self.model)

    def train_step(self, x):
        self.optimizer.backward(self.model(x).sum())
        self.optimizer.step()
        self.ema.update(self.model)
"""


def test_a_yolov5_style_ema_in_a_package_built_in_a_trainer(tmp_path):
    rows, findings = _lint(tmp_path, {"utils/__init__.py": "", "utils/torch_utils.py": YOLO_EMA, "train.py": YOLO_TRAIN})
    assert rows == [("train.py", 9, "AMP010")]
    assert "`deepcopy(de_parallel(model)).eval()`" in findings[0]["message"] and "(`v *= d`)" in findings[0]["message"]
    # The float32 master weights of apex do not help the EMA: it copies the float16 model.
    assert "`self.ema.update(self.model)`" in findings[0]["message"]


# timm's ModelEmaV3: the decay in a method that `update` calls, `lerp_` over the state dict.
TIMM_EMA = """
from copy import deepcopy

import torch
import torch.nn as nn


class ModelEmaV3(nn.Module):
    def __init__(self, model, decay=0.9999, device=None):
        super().__init__()
        self.module = deepcopy(model)
        self.module.eval()
        self.decay = decay
        self.device = device
        if device is not None:
            self.module.to(device=device)

    @torch.no_grad()
    def update(self, model, step=None):
        self.apply_update_(model, self.decay)

    def apply_update_(self, model, decay):
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values()):
            if ema_v.is_floating_point():
                ema_v.lerp_(model_v.to(device=self.device), weight=1. - decay)
            else:
                ema_v.copy_(model_v.to(device=self.device))


class ModelEma:
    def __init__(self, model, decay=0.9999):
        self.ema = deepcopy(model)
        self.ema.eval()
        self.decay = decay

    def update(self, model):
        with torch.no_grad():
            msd = model.state_dict()
            for k, ema_v in self.ema.state_dict().items():
                model_v = msd[k].detach()
                ema_v.copy_(ema_v * self.decay + (1. - self.decay) * model_v)
"""

TIMM_TRAIN = """
import torch
import model_ema as ema_utils


def train_one_epoch(model, loader, optimizer, model_ema=None):
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        if model_ema is not None:
            model_ema.update(model, step=1)


def main(model, loader, args):
    model.to(torch.float16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model_ema = ema_utils.{cls}(model, decay=args.decay)
    for epoch in range(10):
        train_one_epoch(model, loader, optimizer, model_ema=model_ema)
"""


def test_timm_style_emas_updated_in_a_helper(tmp_path):
    for cls in ("ModelEmaV3", "ModelEma"):
        rows, findings = _lint(tmp_path, {"model_ema.py": TIMM_EMA, "train.py": TIMM_TRAIN.replace("{cls}", cls)})
        # The model trained in float16 (line 14), and the EMA copied from it.
        assert rows == [("train.py", 14, "AMP010"), ("train.py", 16, "AMP010")], cls
        assert f"`{cls}`, model_ema.py:" in findings[1]["message"]
    # V3 runs its `lerp_` from `update` through `apply_update_`; V1 copies a product back.
    assert "(`ema_v.copy_(...)`)" in findings[1]["message"]


SHADOW_EMA = """
import torch


class ShadowEMA:
    def __init__(self, model, decay=0.999):
        self.decay = decay
        self.shadow = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}

    @torch.no_grad()
    def step(self, model):
        for n, p in model.named_parameters():
            if n in self.shadow:
                self.shadow[n].mul_(self.decay).add_(p.detach(), alpha=1 - self.decay)
"""


def test_a_dict_of_shadow_copies_in_another_module(tmp_path):
    train = _train(before="model.half()").replace("from utils import ModelEMA", "from ema import ShadowEMA")
    train = train.replace("ModelEMA(model)", "ShadowEMA(model=model)").replace("ema.update(model)", "ema.step(model)")
    rows, findings = _lint(tmp_path, {"ema.py": SHADOW_EMA, "train.py": train})
    assert rows == [("train.py", 7, "AMP010")]
    assert "copies of `model`'s tensors" in findings[0]["message"]


def test_the_ema_module_exports_what_its_constructor_copies():
    result = lint_source(textwrap.dedent(EMA_UTILS).lstrip(), "utils.py", ALL_RULES, whole=True)
    summary = json.loads(json.dumps(result.summary))  # plain JSON, for a cache
    entry = summary["facts"]["precision"]["ModelEMA"]
    assert entry["line"] == 6
    assert entry["averages"] == [
        {
            "param": "model",
            "position": 0,
            "path": [],
            "attribute": "self.ema",
            "copy": "`copy.deepcopy(model).eval()`",
            "update": "`e.mul_(self.decay)`",
            "methods": ["update"],
        }
    ]
    assert load_summary("utils.py", summary).facts["precision"]["ModelEMA"] == entry
    # The words a rule looks for in the importing file include the decay it runs there.
    assert "e.mul_(self.decay)" in ExternalModules("train.py", {"utils.py": summary}).words()
    # A module without such a class exports no facts (and, without AMP work, no summary).
    plain = lint_source("import copy\nclass A:\n    def __init__(self, m):\n        self.m = copy.deepcopy(m)\n", "a.py", ALL_RULES, whole=True)
    assert plain.summary is None


def test_an_importer_notes_the_class_it_would_look_up():
    recorder = LookupRecorder("train.py")
    source = textwrap.dedent(_train(before="model.half()")).lstrip()
    from amplint.semantic import analyze
    import libcst as cst
    from amplint.analyses.precision import Precision

    model = analyze(cst.parse_module(source), recorder)
    assert list(model.facts(Precision).averaged_elsewhere_in_low_precision()) == []
    assert ("utils", 0, "ModelEMA") in recorder.lookups


def test_a_cached_run_is_invalidated_when_the_ema_module_changes(tmp_path):
    files = {"utils.py": EMA_UTILS, "train.py": _train(before="model.half()")}
    write_files(tmp_path, files)
    cache = ["--cache-dir", str(tmp_path / "cache")]
    first, _ = _run(tmp_path, *cache)
    second, _ = _run(tmp_path, *cache)
    assert [r for r in first if r[2] == "AMP010"] == [r for r in second if r[2] == "AMP010"] == [("train.py", 7, "AMP010")]
    # The EMA now keeps a float32 copy: the importer's cached result must not stand.
    write_files(tmp_path, {"utils.py": EMA_UTILS.replace("copy.deepcopy(model).eval()", "copy.deepcopy(model).float()")})
    third, _ = _run(tmp_path, *cache)
    assert [r for r in third if r[2] == "AMP010"] == []
    write_files(tmp_path, {"utils.py": EMA_UTILS})
    fourth, _ = _run(tmp_path, *cache)
    assert [r for r in fourth if r[2] == "AMP010"] == [("train.py", 7, "AMP010")]


def test_a_module_of_ema_classes_is_found_by_its_text():
    """A module without AMP words is analysed for its importers when they name a class whose
    `__init__` copies and whose text decays (`catalogue.helper_names`), not for any copy."""
    from amplint.lint.catalogue import helper_names

    assert helper_names(textwrap.dedent(EMA_UTILS)) == {"ModelEMA"}
    assert helper_names(textwrap.dedent(SHADOW_EMA)) == {"ShadowEMA"}
    copies_only = "import copy\nclass Keep:\n    def __init__(self, m):\n        self.m = copy.deepcopy(m)\n"
    assert helper_names(copies_only) == frozenset()
    elsewhere = "import copy\ndef snapshot(m):\n    return copy.deepcopy(m)\nclass A:\n    def step(self, e):\n        e.mul_(0.9)\n"
    assert helper_names(elsewhere) == frozenset()


# yolov5 #9016 as it was: the validation helper of a third module halves the EMA copy it is
# handed (`val.run(model=ema.ema)`), and the next epoch decays the copy in float16.
VAL = """
import torch


def run(model, loader, half={default}):
    model.half() if half else model.float()
    model.eval()
    with torch.no_grad():
        for x in loader:
            model(x.half() if half else x.float())
    {after}
"""

TRAIN_VALIDATES = """
import torch
import val
from utils import ModelEMA


def main(model, optimizer, loader, epochs):
    scaler = torch.amp.GradScaler("cuda")
    ema = ModelEMA(model)
    for epoch in range(epochs):
        for x in loader:
            with torch.autocast("cuda"):
                loss = model(x).sum()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            ema.update(model)
        val.run(model=ema.ema, loader=loader{extra})
"""


def _validates(default="True", after="pass", extra=""):
    return {"utils.py": EMA_UTILS, "val.py": VAL.format(default=default, after=after), "train.py": TRAIN_VALIDATES.format(extra=extra)}


def test_the_copy_of_an_ema_halved_by_a_validation_helper_of_a_third_module(tmp_path):
    rows, findings = _lint(tmp_path, _validates())
    assert rows == [("train.py", 17, "AMP010")]
    message = findings[0]["message"]
    assert "`val.run(model=ema.ema, loader=loader)` (`model.half()` in val.py) casts the copy that `ModelEMA` (utils.py:6)" in message
    # `half=amp`: it may be float16.
    rows, _ = _lint(tmp_path, _validates(extra=", half=amp"))
    assert rows == [("train.py", 17, "AMP010")]


def test_a_validation_helper_that_casts_back_or_is_told_not_to_cast_is_clean(tmp_path):
    twins = {
        "told not to": _validates(extra=", half=False"),
        "not by default": _validates(default="False"),
        "cast back for training": _validates(after="model.float()"),
        "a copy cast": {**_validates(), "val.py": VAL.format(default="True", after="pass").replace("model.half() if half else model.float()", "model = copy.deepcopy(model).half()")},
        "switched the other way round": {**_validates(extra=", half=False"), "val.py": VAL.format(default="True", after="pass").replace("model.half() if half else model.float()", "model.float() if not half else model.half()")},
        "switched by more than the parameter": {**_validates(default="False"), "val.py": VAL.format(default="False", after="pass").replace("model.half() if half else model.float()", "if half and torch.cuda.is_available():\n        model.half()")},
        "a switch that may be unpacked": _validates(extra=", **val_cfg"),
        "arguments unpacked before the switch": {**_validates(), "train.py": TRAIN_VALIDATES.format(extra="").replace("val.run(model=ema.ema, loader=loader)", "val.run(ema.ema, *val_args)")},
    }
    for why, files in twins.items():
        rows, _ = _lint(tmp_path, files)
        assert rows == [], why


def test_a_module_exports_which_parameter_its_functions_leave_cast():
    summary = lint_source(textwrap.dedent(VAL.format(default="True", after="pass")).lstrip(), "val.py", ALL_RULES, whole=True).summary
    assert summary["facts"]["precision"]["run"] == {
        "line": 4,
        "casts": [
            {"param": "model", "position": 0, "dtypes": ["float16"], "when": "half", "when_position": 2, "when_default": True, "cast": "model.half()"}
        ],
        "words": [".half(", "float16"],
    }
    summary = lint_source(textwrap.dedent(VAL.format(default="True", after="model.float()")), "val.py", ALL_RULES, whole=True).summary
    assert "precision" not in ((summary or {}).get("facts") or {})


def test_an_import_names_the_module_beside_the_importer_not_another_of_the_same_name(tmp_path):
    # `import val` in train.py is ./val.py, which casts the copy back; classify/val.py, which
    # does not, is the only `val.py` with a summary. Imports resolve among every linted file.
    files = _validates()
    files["classify/val.py"] = files["val.py"]
    files["val.py"] = VAL.format(default="True", after="model.float()")
    rows, _ = _lint(tmp_path / "casts-back-beside", files)
    assert rows == []
    # The other way round: the one beside it casts, and is the one imported.
    files = _validates()
    files["classify/val.py"] = VAL.format(default="True", after="model.float()")
    rows, _ = _lint(tmp_path / "casts-beside", files)
    assert rows == [("train.py", 17, "AMP010")]
