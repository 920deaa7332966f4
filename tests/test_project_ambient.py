"""Ambient autocast (`amplint.project.ambient`): which functions run under which autocast,
found by following calls down from the regions, across files; a hazard of model code is
reported there with the way in, and only where a region reaches it."""

import json
import os

import pytest

from amplint.lint.diagnostics import FileResult
from amplint.project.ambient import Ambient

HAZARD = {"code": "AMP013", "row": 13, "column": 18, "end_row": 13, "end_column": 40, "message": "a hazard", "help": "Fix it.", "contexts": [["cuda", "float16"]]}


def _region(calls, contexts=(("cuda", "float16"),)):
    return {"at": [8, 10], "unit": "<module>", "text": "`torch.autocast(\"cuda\")`", "contexts": [list(c) for c in contexts], "calls": calls}


def test_a_region_reaches_model_code_in_other_files_with_each_context():
    results = [
        FileResult("/p/train.py", ambient={"regions": [_region([[["models", 0, "Net", "forward"], "model", 0]], [("cuda", "float16"), ("cuda", "bfloat16")])], "units": {}}),
        FileResult("/p/models.py", ambient={"regions": [], "units": {"Net.forward": {"calls": [[["Block.forward"], "self.block", 0]]}, "Block.forward": {"calls": [], "hazards": [HAZARD]}}}),
    ]
    found = Ambient(results)
    assert found.contexts_of(("/p/models.py", "Block.forward")) == [("cuda", "bfloat16"), ("cuda", "float16")]
    assert [hop[3] for hop in found.chain(("/p/models.py", "Block.forward"), ("cuda", "float16"))] == ["model", "self.block"]
    findings = found.findings()
    # The hazard holds under float16 only: one finding, through the float16 context.
    assert [(f.path, f.row, f.code) for f in findings["/p/models.py"]] == [("/p/models.py", 13, "AMP013")]
    assert "train.py:8" in findings["/p/models.py"][0].help and "(float16, CUDA)" in findings["/p/models.py"][0].help


def test_nothing_is_reached_without_a_region():
    results = [
        FileResult("/p/train.py", ambient={"regions": [], "units": {"main": {"calls": [[["models", 0, "Net", "forward"], "model", 0]]}}}),
        FileResult("/p/models.py", ambient={"regions": [], "units": {"Net.forward": {"calls": [], "hazards": [HAZARD]}}}),
    ]
    assert Ambient(results).findings() == {}


def test_a_bfloat16_region_does_not_reach_a_float16_hazard():
    results = [
        FileResult("/p/train.py", ambient={"regions": [_region([[["models", 0, "Net", "forward"], "model", 0]], [("cuda", "bfloat16")])], "units": {}}),
        FileResult("/p/models.py", ambient={"regions": [], "units": {"Net.forward": {"calls": [], "hazards": [HAZARD]}}}),
    ]
    assert Ambient(results).findings() == {}


def test_a_function_that_switches_autocast_off_itself_takes_no_callers_autocast():
    results = [
        FileResult("/p/train.py", ambient={"regions": [_region([[["models", 0, "Net", "forward"], "model", 0]])], "units": {}}),
        FileResult("/p/models.py", ambient={"regions": [], "units": {"Net.forward": {"calls": [[["fp32_part"], "fp32_part", 0]]}, "fp32_part": {"own": True, "calls": [], "hazards": [HAZARD]}}}),
    ]
    found = Ambient(results)
    assert found.contexts_of(("/p/models.py", "Net.forward")) == [("cuda", "float16")]
    assert found.contexts_of(("/p/models.py", "fp32_part")) == []
    assert found.findings() == {}


def test_what_the_files_own_rules_report_is_not_reported_twice():
    from amplint.lint.diagnostics import Finding

    own = Finding(path="/p/train.py", row=13, column=18, end_row=13, end_column=40, code="AMP013", name="x", url=None, message="a hazard", help=None, severity="error")
    facts = {"regions": [_region([[["Net.forward"], "model", 0]])], "units": {"Net.forward": {"calls": [], "hazards": [HAZARD]}}}
    assert Ambient([FileResult("/p/train.py", findings=[own], ambient=facts)]).findings() == {}
    # What they do not reach (a model passed as a parameter), the project pass reports.
    assert [f.row for f in Ambient([FileResult("/p/train.py", ambient=facts)]).findings()["/p/train.py"]] == [13]


# --------------------------------------------------------------------------- what a file says


def _facts(source, path="/p/train.py"):
    import textwrap

    from amplint.lint.engine import lint_source
    from amplint.rules import ALL_RULES

    return lint_source(textwrap.dedent(source), path, ALL_RULES, whole=True).ambient


def test_a_region_says_what_it_calls_and_in_which_contexts():
    facts = _facts(
        """
        import torch
        from models import Net, make_loss

        model = Net().cuda()
        criterion = make_loss()
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
            loss = criterion(out, y)
        """
    )
    (region,) = facts["regions"]
    # Where it is: the first `torch.autocast` call of its function (found from the text only
    # for a finding's chain), not a position printed for every region of every file.
    assert region["contexts"] == [["cuda", "float16"]] and region["call"] == ["torch.autocast", 0] and "at" not in region
    # `model(x)`: an instance of an imported class called as a module; `criterion`, what the
    # factory `make_loss` returns, which the project pass looks up in its file's facts.
    assert region["calls"] == [[["models", 0, "Net", "forward"], "model", 0], [["models", 0, "make_loss", "<returned>"], "criterion", 0]]


def test_a_factory_of_another_file_returns_the_classes_its_returns_build(amplint, project):
    factory = "from .net import Net\n\n\ndef build_model(cfg):\n    if cfg.small:\n        model = Net(32)\n    else:\n        model = Net(64)\n    return model\n"
    train = TRAIN.replace("DTYPE", "torch.float16").replace("from models import Net", "from models import build_model").replace("model = Net(64).cuda()", "model = build_model(cfg).cuda()")
    root = project({"train.py": train, "models/__init__.py": "from .build import build_model\n", "models/build.py": factory, "models/net.py": MODEL})
    (item,) = json.loads(amplint("--no-cache", "--output-format", "json", ".", cwd=root).stdout)
    assert (os.path.relpath(item["filename"], root), item["location"]["row"], item["code"]) == ("models/net.py", 13, "AMP020")
    # A factory that picks from a registry: nothing is guessed.
    registry = factory.replace("return model", "return REGISTRY[cfg.name](cfg)")
    root = project({"models/build.py": registry})
    assert amplint("--no-cache", ".", cwd=root).stdout == "All checks passed!\n"


def test_calls_through_attributes_containers_and_self():
    facts = _facts(
        """
        from torch import nn
        from .attention import Attention


        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.attn = Attention()
                self.mlp = nn.Sequential(nn.Linear(4, 4), Gate())

            def forward(self, x):
                return self.mlp(self.attn(x))


        class Gate(nn.Module):
            def forward(self, x):
                return x


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([Block() for _ in range(2)])

            def forward(self, x):
                for blk in self.blocks:
                    x = blk(x)
                return self.head(x)

            def head(self, x):
                return x
        """,
        "/p/models/net.py",
    )
    units = facts["units"]
    assert units["Block.forward"]["calls"] == [[["attention", 1, "Attention", "forward"], "self.attn", 0], [["Gate.forward"], "self.mlp", 0]]
    assert units["Net.forward"]["calls"] == [[["Block.forward"], "blk", 0], [["Net.head"], "self.head", 0]]


def test_a_model_accelerate_prepares_runs_under_its_autocast():
    facts = _facts(
        """
        from accelerate import Accelerator
        from model import Net

        accelerator = Accelerator(mixed_precision="fp16")
        model = Net()
        model, optimizer = accelerator.prepare(model, optimizer)
        """
    )
    (seed,) = facts["regions"]
    assert seed["contexts"] == [["cuda", "float16"]] and seed["calls"] == [[["model", 0, "Net", "forward"], "accelerator.prepare", 0]]
    bf16 = _facts("from accelerate import Accelerator\nfrom model import Net\naccelerator = Accelerator(mixed_precision='bf16')\nmodel = accelerator.prepare(Net())\n")
    assert bf16["regions"][0]["contexts"] == [["cpu", "bfloat16"], ["cuda", "bfloat16"]]
    assert _facts("from accelerate import Accelerator\nfrom model import Net\naccelerator = Accelerator()\nmodel = accelerator.prepare(Net())\n") is None


def test_autocast_switched_off_leads_nowhere():
    facts = _facts(
        """
        import torch
        from models import Net

        model = Net()
        with torch.autocast("cuda"):
            with torch.autocast("cuda", enabled=False):
                out = model(x)
        """
    )
    assert facts is None or not any(region["calls"] for region in facts["regions"])


# --------------------------------------------------------------------------- end to end

MODEL = '''\
import torch
import torch.nn as nn


class Attention(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, mask):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1)
        scores = scores.masked_fill(mask, -1e9)
        return scores.softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = Attention(dim)

    def forward(self, x, mask):
        return x + self.attn(x, mask)


class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.block = Block(dim)

    def forward(self, x, mask):
        return self.block(x, mask)
'''

TRAIN = '''\
import torch
from models import Net


def train(loader, dtype=torch.float16):
    model = Net(64).cuda()
    opt = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    for x, mask, y in loader:
        with torch.autocast("cuda", dtype=DTYPE):
            loss = (model(x, mask) - y).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
'''


def _project(project, dtype="torch.float16", model=MODEL):
    # The model files say nothing of autocast or scalers: the pre-check alone would pass them by.
    return project({"train.py": TRAIN.replace("DTYPE", dtype), "models/__init__.py": "from .net import Net\n", "models/net.py": model})


def test_model_code_in_another_package_is_reported_with_the_way_in(amplint, project):
    root = _project(project)
    result = amplint("--no-cache", "--concise", ".", cwd=root)
    assert result.stdout.splitlines()[0].startswith("models/net.py:13:18: AMP020 `scores.masked_fill(mask, -1e9)` raises under float16 autocast")
    (item,) = json.loads(amplint("--no-cache", "--output-format", "json", ".", cwd=root).stdout)
    assert "It runs under ../train.py:10 `torch.autocast(\"cuda\", dtype=torch.float16)` (float16, CUDA) -> `model(...)` -> `Net.forward`" in item["help"]
    assert [(os.path.relpath(r["filename"], root), r["location"]["row"]) for r in item["related"]] == [
        ("train.py", 10),  # the region
        ("train.py", 11),  # model(x, mask)
        ("models/net.py", 32),  # self.block(x, mask)
        ("models/net.py", 23),  # self.attn(x, mask)
    ]
    # The same from the cache, and with the files given one by one.
    assert amplint("--concise", ".", cwd=root).stdout == amplint("--concise", ".", cwd=root).stdout == result.stdout
    assert amplint("--no-cache", "--concise", "train.py", "models/net.py", "models/__init__.py", cwd=root).stdout == result.stdout


def test_a_warm_run_takes_the_ambient_findings_from_the_cache(amplint, project, monkeypatch):
    """The ways are worked out when a file is linted; a run over unchanged files takes the
    results they made, chain and all, from the cache (the warm run's largest cost before)."""
    from amplint.project import ambient

    root = _project(project)
    cold = amplint("--no-cache", "--output-format", "json", ".", cwd=root).stdout
    assert amplint("--output-format", "json", ".", cwd=root).stdout == cold  # fills the cache

    def worked_out(*args, **kwargs):
        raise AssertionError("a warm run worked the ambient findings out again")

    monkeypatch.setattr(ambient, "report", worked_out)
    assert amplint("--output-format", "json", ".", cwd=root).stdout == cold
    # A change to either end lints again, and finds the ways again.
    net = root / "models" / "net.py"
    net.write_text(net.read_text() + "\n")
    monkeypatch.undo()
    assert json.loads(amplint("--output-format", "json", ".", cwd=root).stdout)[0]["code"] == "AMP020"


def test_hazards_are_worked_out_only_in_the_files_a_region_leads_into(project, monkeypatch):
    """A file with AMP words is linted before any way is known: its facts say its hazards
    are to come, and only a file a region's way goes into has them worked out (again, as it
    was linted, with the same summaries), once."""
    from amplint.lint import engine
    from amplint.rules import ALL_RULES
    from amplint.run.driver import Job, Runner

    inference = '\n\ndef predict(model, x):\n    with torch.autocast("cuda", dtype=torch.bfloat16):\n        return model(x)\n'
    root = _project(project, model=MODEL + inference)
    project({"models/unused.py": MODEL + inference})  # the same hazard, on no region's way
    asked = []
    real = engine.hazards_of
    monkeypatch.setattr(engine, "hazards_of", lambda model: asked.append(model) or real(model))
    names = ("train.py", "models/__init__.py", "models/net.py", "models/unused.py")
    with Runner(isolate=False) as runner:
        results = dict(zip(names, runner.lint_project([Job(str(root / name), tuple(r.code for r in ALL_RULES)) for name in names])))
    assert [f.code for f in results["models/net.py"].findings] == ["AMP020"]
    assert not results["models/unused.py"].findings and results["models/unused.py"].ambient["later"]
    assert "later" not in results["models/net.py"].ambient and len(asked) == 1


LIT_MODEL = """\
import torch


class Net(torch.nn.Module):
    def forward(self, x, mask):
        scores = x @ x.transpose(-1, -2)
        return scores.masked_fill(mask, -1e9)
"""

LIT_TRAIN = """\
import lightning as L
import torch

from model import Net


class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = Net()

    def training_step(self, batch, batch_idx):
        x, mask = batch
        return self.net(x, mask).sum()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())


def main():
    trainer = L.Trainer(precision="16-mixed")
    model = Lit()
    trainer.fit(model)
"""


def test_a_region_opened_in_another_function_is_placed_where_it_is_opened(amplint, project):
    """A Trainer's precision in `main` runs `training_step` under autocast: the chain starts at
    the Trainer's line, not at a call counted in the hook (which has none of that name)."""
    root = project({"train.py": LIT_TRAIN, "model.py": LIT_MODEL})
    (item,) = json.loads(amplint("--no-cache", "--output-format", "json", ".", cwd=root).stdout)
    assert item["code"] == "AMP020" and "train.py:21 " in item["help"]
    assert (os.path.basename(item["related"][0]["filename"]), item["related"][0]["location"]["row"]) == ("train.py", 21)


@pytest.mark.parametrize("directive", ["# noqa: AMP020", "# NOQA: AMP020", "# noqa: amp020"])
def test_a_noqa_of_a_hazard_in_any_case_is_judged_by_the_hazards(amplint, project, directive):
    """Whether a `# noqa` for a hazard suppresses something is the hazards' to say, however the
    directive is written (amplint.lint.noqa reads it in any case): never an unused AMP100."""
    model = LIT_MODEL.replace("-1e9)", "-1e9)  " + directive) + '\n\ndef infer(model, x):\n    with torch.autocast("cuda", dtype=torch.bfloat16):\n        return model(x)\n'
    root = project({"model.py": model})
    assert amplint("--no-cache", "--extend-select", "AMP100", ".", cwd=root).stdout == "All checks passed!\n"


def test_no_way_in_no_finding(amplint, project):
    # bfloat16 keeps float32's range: -1e9 fits.
    assert amplint("--no-cache", ".", cwd=_project(project, "torch.bfloat16")).stdout == "All checks passed!\n"


def test_a_region_switched_off_reaches_nothing(amplint, project):
    root = project({"train.py": TRAIN.replace("DTYPE", "torch.float16").replace('dtype=torch.float16)', 'dtype=torch.float16, enabled=False)'), "models/__init__.py": "from .net import Net\n", "models/net.py": MODEL})
    assert amplint("--no-cache", ".", cwd=root).stdout == "All checks passed!\n"


def test_the_model_line_noqa_suppresses_it_and_is_used_even_when_linted_alone(amplint, project):
    root = _project(project, model=MODEL.replace("-1e9)\n", "-1e9)  # noqa: AMP020\n"))
    assert amplint("--no-cache", ".", cwd=root).stdout == "All checks passed!\n"
    # Alone, no region reaches it; the directive is not unused: a run over the project uses it.
    assert amplint("--no-cache", "models/net.py", cwd=root).stdout == "All checks passed!\n"
    # On a line with no hazard, it suppresses nothing.
    stale = _project(project, model=MODEL.replace("self.qkv(x).chunk(3, dim=-1)\n", "self.qkv(x).chunk(3, dim=-1)  # noqa: AMP020\n"))
    assert "AMP100" in amplint("--no-cache", "--concise", "models/net.py", cwd=stale).stdout


def test_the_model_file_alone_has_no_finding(amplint, project):
    assert amplint("--no-cache", "models/net.py", cwd=_project(project)).stdout == "All checks passed!\n"


def test_only_the_selected_codes(amplint, project):
    root = _project(project)
    assert amplint("--no-cache", "--select", "AMP001", ".", cwd=root).stdout == "All checks passed!\n"
    assert amplint("--no-cache", "--ignore", "AMP020", ".", cwd=root).stdout == "All checks passed!\n"


ENGINE = '''\
import torch


def train_one_epoch(model, loader, optimizer, scaler):
    for x, mask, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = (model(x, mask) - y).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
'''

MAIN = '''\
import torch
from engine import train_one_epoch
from models import Net


def main(loader, scaler):
    model = Net(64).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    for epoch in range(10):
        train_one_epoch(model, loader, optimizer, scaler)
'''


def test_a_region_that_calls_a_parameter_runs_what_another_file_passes(amplint, project):
    # engine.py opens the region around `model(...)`, a parameter; main.py (no AMP words)
    # passes a Net for it; the Net's code is in a third place.
    root = project({"engine.py": ENGINE, "main.py": MAIN, "models/__init__.py": "from .net import Net\n", "models/net.py": MODEL})
    (item,) = json.loads(amplint("--no-cache", "--output-format", "json", ".", cwd=root).stdout)
    assert (os.path.relpath(item["filename"], root), item["location"]["row"], item["code"]) == ("models/net.py", 13, "AMP020")
    assert "`model(...)` (what ../main.py passes for `model`) -> `Net.forward`" in item["help"]
    # Nobody passes a model the code shows: nothing is guessed.
    unknown = project({"main.py": MAIN.replace("model = Net(64).cuda()", "model = build(cfg)")})
    assert amplint("--no-cache", ".", cwd=unknown).stdout == "All checks passed!\n"


def test_in_one_file_a_model_passed_to_the_function_with_the_region(amplint, project):
    script = MODEL + "\n\n" + ENGINE.replace("import torch\n", "") + "\n\ndef main(loader, scaler):\n    train_one_epoch(Net(64), loader, None, scaler)\n"
    root = project({"train.py": script})
    assert [line.split(" ")[:2] for line in amplint("--no-cache", "--concise", ".", cwd=root).stdout.splitlines()[:-1]] == [["train.py:13:18:", "AMP020"]]


LOSSES = '''\
import torch.nn as nn


class GanLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.criterion = nn.BCELoss()

    def forward(self, probability, target):
        return self.criterion(probability, target)
'''

LOSS_TRAIN = '''\
import torch
from losses import GanLoss


def train(model, loader, device):
    criterion = GanLoss()
    for x, y in loader:
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = criterion(torch.sigmoid(model(x)), y)
        loss.backward()
'''


def test_a_loss_module_that_autocast_refuses_on_cuda(amplint, project):
    # CUDA's autocast raises on binary_cross_entropy, whatever the dtype: AMP013, in the loss file.
    root = project({"losses.py": LOSSES, "train.py": LOSS_TRAIN.replace("torch.autocast(device,", 'torch.autocast("cuda",')})
    (item,) = json.loads(amplint("--no-cache", "--output-format", "json", ".", cwd=root).stdout)
    assert (item["filename"].endswith("losses.py"), item["location"]["row"], item["code"]) == (True, 10, "AMP013")
    assert "raises under bfloat16 autocast on CUDA" in item["message"]
    # CPU's autocast runs it in float32; and the logits form is safe on both.
    cuda = LOSS_TRAIN.replace("torch.autocast(device,", 'torch.autocast("cuda",')
    for files in ({"train.py": LOSS_TRAIN.replace("torch.autocast(device,", 'torch.autocast("cpu",')}, {"train.py": cuda, "losses.py": LOSSES.replace("BCELoss", "BCEWithLogitsLoss")}):
        assert amplint("--no-cache", ".", cwd=project(files)).stdout == "All checks passed!\n"
