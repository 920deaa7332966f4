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
