"""Ambient autocast (`amplint.project.ambient`): which functions run under which autocast,
found by following calls down from the regions, across files; a hazard of model code is
reported there with the way in, and only where a region reaches it."""

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


def test_the_regions_own_file_is_left_to_its_rules():
    results = [FileResult("/p/train.py", ambient={"regions": [_region([[["Net.forward"], "model", 0]])], "units": {"Net.forward": {"calls": [], "hazards": [HAZARD]}}})]
    assert Ambient(results).findings() == {}


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
    assert region["contexts"] == [["cuda", "float16"]] and region["at"] == [7, 6]
    # `model(x)`: an instance of an imported class called as a module; `criterion` is what a
    # factory returned: not certain, not followed.
    assert region["calls"] == [[["models", 0, "Net", "forward"], "model", 0]]


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
