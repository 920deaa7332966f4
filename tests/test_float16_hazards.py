"""The float16 hazards on values autocast lowered (`Float16Hazards`): the interface the project
pass calls (`hazards(unit, device, dtype)`), the contexts each hazard holds in, the file's own
regions (`in_file`), and what a module exports of them for the project's ambient pass."""

import json
import textwrap

import libcst as cst
import pytest

from amplint.analyses import EXPORTING
from amplint.analyses.float16_hazards import Float16Hazards, Hazard
from amplint.analyses.hazard_sites import OVERFLOWING_FILL, OVERFLOWING_WHERE, ROUNDED_EPSILON, WRITE_INTO_FLOAT32
from amplint.lint.engine import lint_text
from amplint.project.ambient import hazards_of
from amplint.project.summary import export_summary
from amplint.rules import ALL_RULES
from amplint.semantic import analyze, source_text

CONTEXTS = [("cuda", "float16"), ("cuda", "bfloat16"), ("cpu", "float16"), ("cpu", "bfloat16")]


def model(source):
    return analyze(cst.parse_module(textwrap.dedent(source)))


def hazards(source, function, device="cuda", dtype="float16"):
    found = model(source)
    unit = next(u for u in found.units if u.name == function)
    return [(h.code, source_text(h.node)) for h in found.facts(Float16Hazards).hazards(unit, device, dtype)]


def contexts(source, function):
    """{(code, node text): the contexts it holds in} over the four contexts."""
    found = {}
    for device, dtype in CONTEXTS:
        for hazard in hazards(source, function, device, dtype):
            found.setdefault(hazard, set()).add((device, dtype))
    return found


# A model module: no autocast in it; the training script of the project runs it under one.
MODEL = """
import math
import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads=8):
        super().__init__()
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x, mask, idx):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(mask, -1e9)
        ignored = torch.where(mask, scores, -1e9)
        out = scores.softmax(-1) @ v
        rms = out / torch.sqrt((out * out).mean(-1, keepdim=True) + 1e-8)
        n = out / (out.norm(dim=-1, keepdim=True) + 1e-8)
        cos = F.linear(F.normalize(x), F.normalize(self.proj.weight))
        theta = torch.acos(cos.clamp(-1 + 1e-4, 1 - 1e-4))
        pooled = torch.zeros(4, x.shape[-1])
        pooled.index_add_(0, idx, self.proj(out))
        return rms, n, theta, pooled


def safe(x, w, mask):
    scores = (x @ w).float()
    scores = scores.masked_fill(mask, -1e9)
    h = x @ w
    h = h.masked_fill(mask, torch.finfo(h.dtype).min)
    return h / (h.abs().amax(-1, keepdim=True) + 1e-6)
"""


def test_the_interface_a_hazard_of_each_kind_in_the_contexts_it_holds_in():
    found = contexts(MODEL, "Attention.forward")
    float16 = {("cuda", "float16"), ("cpu", "float16")}
    everywhere = set(CONTEXTS)
    assert found == {
        # -1e9 overflows float16 only; bfloat16 has float32's range
        (OVERFLOWING_FILL, "scores.masked_fill(mask, -1e9)"): float16,
        (OVERFLOWING_WHERE, "torch.where(mask, scores, -1e9)"): float16,
        # 1e-8 is 0 in float16; `norm` is on CUDA's float32 list, not CPU's
        (ROUNDED_EPSILON, "1e-8"): float16,
        # `1 - 1e-4` is 1.0 in both dtypes
        (ROUNDED_EPSILON, "1 - 1e-4"): everywhere,
        (WRITE_INTO_FLOAT32, "pooled.index_add_(0, idx, self.proj(out))"): everywhere,
    }
    # the two `1e-8`, each where it holds
    model_ = model(MODEL)
    unit = next(u for u in model_.units if u.name == "Attention.forward")
    cuda = model_.facts(Float16Hazards).hazards(unit, "cuda", "float16")
    cpu = model_.facts(Float16Hazards).hazards(unit, "cpu", "float16")
    assert sum(h.code == ROUNDED_EPSILON and source_text(h.node) == "1e-8" for h in cuda) == 1  # the RMS, not the norm
    assert sum(h.code == ROUNDED_EPSILON and source_text(h.node) == "1e-8" for h in cpu) == 2
    for hazard in cuda:
        assert isinstance(hazard, Hazard) and hazard.contexts == {("cuda", "float16")}
        assert hazard.devices == {"cuda"} and hazard.dtypes == {"float16"}
        assert hazard.message and hazard.help and "float16" in hazard.message
    fill = next(h for h in cuda if h.code == OVERFLOWING_FILL)
    assert "`scores`" in fill.message and "`-1e9`" in fill.message and "torch.finfo(scores.dtype).min" in fill.help


def test_nothing_where_the_value_is_upcast_first_or_the_constant_fits():
    assert all(hazards(MODEL, "safe", device, dtype) == [] for device, dtype in CONTEXTS)


def test_every_code_is_a_rules_and_the_rules_report_what_the_family_finds():
    codes = {rule.code: rule for rule in ALL_RULES}
    for code in (OVERFLOWING_FILL, OVERFLOWING_WHERE, ROUNDED_EPSILON, WRITE_INTO_FLOAT32):
        assert code in codes
    script = MODEL + """

def train(x, mask, idx):
    model = Attention(64)
    with torch.autocast("cuda", dtype=torch.float16):
        return model(x, mask, idx)
"""
    found = sorted((f.code, f.row) for f in lint_text(textwrap.dedent(script), [codes[c] for c in ("AMP020", "AMP021", "AMP022", "AMP023")]))
    assert found == [("AMP020", 18), ("AMP021", 19), ("AMP022", 21), ("AMP022", 24), ("AMP023", 26)]


@pytest.mark.parametrize(
    "region, expected",
    [
        # bfloat16: only what is real for bfloat16 (the `1 - 1e-4` bound, the float32 buffer)
        ('torch.autocast("cuda", dtype=torch.bfloat16)', [("AMP022", 24), ("AMP023", 26)]),
        # autocast switched off: nothing is lowered
        ('torch.autocast("cuda", enabled=False)', []),
        # a device the code does not show, with its default dtype: unknown, no claim
        ("torch.autocast(device_type=dev)", []),
    ],
)
def test_the_regions_own_dtype_decides(region, expected):
    script = MODEL + f"""

def train(x, mask, idx, dev):
    model = Attention(64)
    with {region}:
        return model(x, mask, idx)
"""
    rules = [rule for rule in ALL_RULES if rule.code in ("AMP020", "AMP021", "AMP022", "AMP023")]
    assert sorted((f.code, f.row) for f in lint_text(textwrap.dedent(script), rules)) == expected


def test_no_region_reaching_the_code_no_finding_in_the_file():
    rules = [rule for rule in ALL_RULES if rule.code in ("AMP020", "AMP021", "AMP022", "AMP023")]
    # the module's forward may run under its caller's autocast, in a dtype no one knows here
    assert lint_text(textwrap.dedent(MODEL) + "\nimport contextlib\nwith torch.autocast('cuda'):\n    pass\n", rules) == []


def test_the_summary_exports_each_functions_hazards_with_their_contexts_and_positions():
    found = model(MODEL)
    exported = Float16Hazards.export(found, "model.py")
    assert list(exported) == ["Attention.forward"]  # `safe` has none
    entries = exported["Attention.forward"]["hazards"]
    assert [(e["code"], e["row"], e["column"]) for e in entries] == [
        ("AMP020", 18, 18),
        ("AMP021", 19, 19),
        ("AMP022", 21, 69),
        ("AMP022", 22, 53),
        ("AMP022", 24, 49),
        ("AMP023", 26, 9),
    ]
    first = entries[0]
    assert set(first) - {"by_dtype"} == {"code", "row", "column", "end_row", "end_column", "message", "help", "contexts"}
    assert first["contexts"] == [["cpu", "float16"], ["cuda", "float16"]]
    assert entries[3]["contexts"] == [["cpu", "float16"]]  # `norm` is float32 on CUDA
    assert (first["end_row"], first["end_column"]) == (18, 48)
    # the positions are the findings' own
    script = MODEL + "\n\ndef train(x, mask, idx):\n    model = Attention(64)\n    with torch.autocast('cpu', dtype=torch.float16):\n        return model(x, mask, idx)\n"
    rules = [rule for rule in ALL_RULES if rule.code in ("AMP020", "AMP021", "AMP022", "AMP023")]
    linted = sorted((f.code, f.row, f.column, f.end_row, f.end_column) for f in lint_text(textwrap.dedent(script), rules))
    assert linted == sorted((e["code"], e["row"], e["column"], e["end_row"], e["end_column"]) for e in entries)
    # plain JSON, the same every time
    assert json.loads(json.dumps(exported)) == exported == Float16Hazards.export(model(MODEL), "model.py")


def test_the_ambient_facts_carry_them_not_the_summary_and_a_module_without_hazards_computes_no_positions(monkeypatch):
    # The project's ambient pass reads them; no importer's analysis does, so they stay out of
    # the summary (a new hazard in a model file does not relint the files that import it).
    assert hazards_of(model(MODEL))["Attention.forward"][0]["code"] == "AMP020"
    assert Float16Hazards not in EXPORTING
    summary = export_summary(model(MODEL), "model.py") or {}
    assert "hazards" not in json.dumps(summary.get("facts", {}))
    import libcst.metadata

    def refuse(*args, **kwargs):
        raise AssertionError("positions computed for a module without hazards")

    monkeypatch.setattr(libcst.metadata, "MetadataWrapper", refuse)
    quiet = model(
        """
        import torch
        def f(x, w, mask):
            h = (x @ w).float()
            return h.masked_fill(mask, -1e9) / (h.sum() + 1e-8)
        """
    )
    assert Float16Hazards.export(quiet, "quiet.py") == {}


def test_the_project_pass_knows_every_hazard_code():
    # `ambient.HAZARD_CODES` is written out (the engine imports it without LibCST): it must
    # stay the hazard sites' codes, or a `# noqa` of a new one would not be judged.
    from amplint.analyses.hazard_sites import BANNED_LOSS
    from amplint.project.ambient import HAZARD_CODES

    assert sorted(HAZARD_CODES) == sorted({OVERFLOWING_FILL, OVERFLOWING_WHERE, ROUNDED_EPSILON, WRITE_INTO_FLOAT32, BANNED_LOSS})
