"""The second pre-check (`amplint.lint.evidence`): what the CPython tree shows decides whether a file
with AMP words is parsed. It must never keep a rule from a finding: every example and case a
rule flags has the rule's marks, a deferred file has nothing to find on its own, and a
deferred file another module's code needs is analysed after all."""

import ast
import json
import os
import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amplint.lint import evidence
from amplint.lint.engine import lint_source, rules_matching_words
from amplint.rules import ALL_RULES
from amplint.semantic import analyze
from amplint.semantic.foreign import imports_of
from conftest import run_amplint

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((REPO / "tests" / "cases").glob("*.py")) + sorted((REPO / "fixtures").glob("*/*.py"))
EXAMPLES = [(rule, example.source) for rule in ALL_RULES for example in rule.INVALID]


def marks(source):
    return evidence.marks(ast.parse(textwrap.dedent(source)))


@pytest.mark.parametrize("rule, source", EXAMPLES, ids=[f"{r.code}-{i}" for i, (r, _) in enumerate(EXAMPLES)])
def test_every_flagged_example_has_its_rules_marks(rule, source):
    assert evidence.satisfied(rule.needs, marks(source)), (rule.code, sorted(marks(source)))


@pytest.mark.parametrize("script", SCRIPTS, ids=[f"{p.parent.name}/{p.stem}" for p in SCRIPTS])
def test_every_finding_of_a_script_has_its_rules_words_and_marks(script):
    source = script.read_text()
    found = marks(source)
    by_code = {rule.code: rule for rule in ALL_RULES}
    whole = lint_source(source, str(script), ALL_RULES, whole=True)
    for finding in whole.findings:
        rule = by_code[finding.code]
        if rule.code == "AMP100":
            continue
        assert rule in rules_matching_words(source, [rule]) and evidence.satisfied(rule.needs, found), finding
    if lint_source(source, str(script), ALL_RULES).deferred:
        assert [f for f in whole.findings if f.code != "AMP100"] == []


ALL_EXAMPLES = [source for rule in ALL_RULES for source in rule.VALID] + [source for _, source in EXAMPLES]


@pytest.mark.parametrize(
    "source",
    [p.read_text() for p in SCRIPTS] + ALL_EXAMPLES,
    ids=[f"{p.parent.name}/{p.stem}" for p in SCRIPTS] + [f"example-{i}" for i in range(len(ALL_EXAMPLES))],
)
def test_a_file_that_exports_a_summary_has_an_event_mark(source):
    """`may_export` decides which deferred files are analysed for the modules that import
    them: a file whose functions export events (or whose classes export facts) must have one
    of EXPORTS."""
    source = textwrap.dedent(source)
    if lint_source(source, "m.py", ALL_RULES, whole=True).summary:
        assert marks(source) & evidence.EXPORTS, sorted(marks(source))


@pytest.mark.parametrize("script", SCRIPTS, ids=[f"{p.parent.name}/{p.stem}" for p in SCRIPTS])
def test_imports_read_from_cpythons_tree_are_the_semantic_layers(script):
    source = script.read_text()
    assert evidence.imports(ast.parse(source)) == imports_of(analyze(cst.parse_module(source)).index)


def test_imports_at_any_depth_and_relative():
    source = """
    import torch.nn as nn, os
    from . import utils
    from ..pkg.optim import step as s
    try:
        from apex import amp
    except ImportError:
        def f():
            from .helpers import *
    """
    assert evidence.imports(ast.parse(textwrap.dedent(source))) == imports_of(analyze(cst.parse_module(textwrap.dedent(source))).index)


@pytest.mark.parametrize(
    "source, present, absent",
    [
        ("loss.backward()", {evidence.BACKWARD}, {evidence.FRAMEWORK_BACKWARD}),
        ("scaler.scale(loss).backward()", {evidence.BACKWARD, evidence.SCALE}, set()),
        ("accelerator.backward(loss)", {evidence.FRAMEWORK_BACKWARD}, {evidence.BACKWARD}),
        ("self.manual_backward(loss)", {evidence.FRAMEWORK_BACKWARD}, {evidence.BACKWARD}),
        ("torch.autograd.backward(loss)", {evidence.BACKWARD}, set()),
        ("optimizer.step()", {evidence.STEP}, set()),
        ("opts[0].step()", {evidence.STEP}, set()),
        ("scaler.step(opt)", {evidence.STEP}, set()),
        ("lr_scheduler.step(); self.noise_scheduler.step(out, t, x); ema.step(); pbar.step()", set(), {evidence.STEP}),
        ("torch.nn.utils.clip_grad_norm_(params, 1.0)", {evidence.CLIP}, {evidence.UNSCALE}),
        ("accelerator.clip_grad_norm_(params, 1.0)", {evidence.CLIP, evidence.UNSCALE}, set()),
        ("scaler.unscale_(opt)", {evidence.UNSCALE, evidence.SCALE}, set()),
        ("self.scaler.scale(loss)", {evidence.SCALE, evidence.SCALE_CALL}, set()),
        ("scale_lora_layers(enc, s); unscale_lora_layers(enc, s); x = self.scheduler.scale_model_input(x, t)", {evidence.SCALE}, {evidence.SCALE_CALL}),
        ("n = p.grad.norm()", {evidence.GRADIENT}, set()),
        ("g = torch.autograd.grad(out, x)", {evidence.GRADIENT}, set()),
        ("from torch.autograd import grad", {evidence.GRADIENT}, set()),
        ("with torch.autocast('cuda'): pass", {evidence.AUTOCAST}, set()),
        ("from torch.cuda.amp import autocast as ac", {evidence.AUTOCAST}, set()),
        ('"""Run with torch.autocast and a GradScaler: loss.backward(); optimizer.step()."""', set(), {evidence.AUTOCAST, evidence.GRAD_SCALER, evidence.BACKWARD, evidence.STEP}),
        ("# torch.autocast, GradScaler, loss.backward()\nx = 1", set(), {evidence.AUTOCAST, evidence.GRAD_SCALER, evidence.BACKWARD}),
        ("s = torch.amp.GradScaler('cuda')", {evidence.GRAD_SCALER}, set()),
        ("from torch.distributed.fsdp import ShardedGradScaler", {evidence.GRAD_SCALER}, set()),
        ("y = a @ b", {evidence.PRODUCT}, set()),
        ("y = F.linear(x.float(), w.float())", {evidence.PRODUCT, evidence.FLOAT32_CAST}, set()),
        ("x = x.to(torch.float32)", {evidence.FLOAT32_CAST}, {evidence.PRODUCT}),
        ("p = torch.special.expit(z); l = p.log()", {evidence.PROBABILITY, evidence.LOG}, set()),
        ("loss = nn.BCELoss()(p, y)", {evidence.BCE}, set()),
        ("model.half(); opt = torch.optim.SGD(model.parameters())", {evidence.HALF, evidence.OPTIMIZER}, set()),
        ("opt = OPTIMIZERS[name](model.parameters())", {evidence.OPTIMIZER}, set()),
        ("from trt import Optimizer\nonnx_opt_graph = Optimizer(graph)", set(), {evidence.OPTIMIZER}),
        ("for group in optimizer.param_groups: group['lr'] *= 0.1", set(), {evidence.AVERAGE}),
        ("for e in ema.parameters(): e.mul_(d)", {evidence.AVERAGE}, set()),
        ("latents *= sigma", set(), {evidence.AVERAGE}),
        ("for k, v in ema.state_dict().items(): v *= d", {evidence.AVERAGE}, set()),
        # A module's float32 island: a product of a cast, directly or through a name a block
        # around it assigns; not a cast in a branch the product is outside of, not `.to(device)`,
        # not a cast after the product, and nothing without a class that defines `forward`.
        ("class R(nn.Module):\n def forward(self, p):\n  inv = self.f.float()\n  return inv @ p.float()", {evidence.MODULE_ISLAND}, set()),
        ("class R(nn.Module):\n def __init__(self):\n  self.register_buffer('f', torch.ones(2, dtype=torch.float32))\n def forward(self, t):\n  t = t.type_as(self.f)\n  if s: return torch.einsum('i,j->ij', t, self.f)", {evidence.MODULE_ISLAND}, set()),
        ("def rope(p, f):\n return f.to(torch.float32) @ p.float()\nclass R(nn.Module):\n def forward(self, p):\n  return rope(p, self.f)", {evidence.MODULE_ISLAND}, set()),
        ("class R(nn.Module):\n def forward(self, q, k):\n  q: torch.Tensor = q.float()\n  return q @ k.float()", {evidence.MODULE_ISLAND}, set()),
        ("class R(nn.Module):\n def forward(self, t):\n  return t.float().matmul(self.inv_freq.float())", {evidence.MODULE_ISLAND}, set()),
        ("class R(nn.Module):\n def forward(self, q, k):\n  return torch.einsum('ij,jk->ik', [q.float(), k.float()])", {evidence.MODULE_ISLAND}, set()),
        ("class R(nn.Module):\n if NEW:\n  def forward(self, q, k):\n   return q.float() @ k.float()", {evidence.MODULE_ISLAND}, set()),
        ("class A(nn.Module):\n def forward(self, q, k):\n  if self.upcast:\n   q = q.float()\n  return q @ k", set(), {evidence.MODULE_ISLAND}),
        ("class A(nn.Module):\n def forward(self, q, k):\n  q = q.to(device)\n  s = (q @ k).float()\n  return s.softmax(-1)", set(), {evidence.MODULE_ISLAND}),
        ("def scores(q, k):\n return q.float() @ k.float()", set(), {evidence.MODULE_ISLAND}),
        # ... nor an island no forward calls, one under an autocast of the file's own, nor a
        # `type_as` of a tensor the function made in low precision (`softmax(s.float()).type_as(s)`).
        ("class R(nn.Module):\n def forward(self, p):\n  return p\n def fuse(self, a, b):\n  return a.float() @ b.float()", set(), {evidence.MODULE_ISLAND}),
        ("class R(nn.Module):\n def forward(self, p):\n  with maybe_autocast('cuda', enabled=False):\n   return self.f.float() @ p.float()", set(), {evidence.MODULE_ISLAND}),
        ("class A(nn.Module):\n def forward(self, q, k, v):\n  s = q @ k\n  w = softmax(s.float(), -1).type_as(s)\n  return w @ v", set(), {evidence.MODULE_ISLAND}),
    ],
)
def test_marks(source, present, absent):
    found = marks(source)
    assert present <= found and not (absent & found), sorted(found)


def test_a_file_only_file_local_rules_match_by_words_is_skipped_not_deferred():
    # AMP012's `def forward(` and `.float` admit a model file; without an island in it no
    # other module can give AMP012 one, so it is no importer for the second phase either.
    source = "import torch\nfrom .attention import attend\nclass Block(torch.nn.Module):\n    def forward(self, x):\n        return attend(x.float())\n"
    result = lint_source(source, "block.py", ALL_RULES)
    assert result.skipped and not result.deferred and not result.imports
    with_words = "# under torch.autocast\n" + source
    result = lint_source(with_words, "block.py", ALL_RULES)
    assert result.skipped and result.deferred and result.imports


def test_a_file_whose_amp_words_are_not_code_is_deferred_with_its_imports():
    source = '"""Trains with torch.autocast and a GradScaler."""\nimport torch\nfrom .utils import train\n'
    result = lint_source(source, "doc.py", ALL_RULES)
    assert result.deferred and result.skipped and not result.findings
    assert set(result.imports) == {("torch", 0), ("utils", 1), ("utils.train", 1)}
    assert not lint_source(source, "doc.py", ALL_RULES, whole=True).deferred


def test_an_unused_noqa_in_a_deferred_file_is_still_reported():
    source = '"""Uses torch.autocast."""\nx = 1  # noqa: AMP006\n'
    result = lint_source(source, "doc.py", ALL_RULES)
    assert result.deferred and [f.code for f in result.findings] == ["AMP100"]


# A helper module and a training script, each of which alone has too little code for any rule:
# the helper steps an optimizer but has no autocast, the script has autocast but steps nothing
# itself. Together: the helper steps the script's Adafactor under its autocast, whose dtype may
# be float16 (AMP004).
HELPER = '''
"""Optimizer helpers for mixed-precision (torch.autocast) training."""


def step(optimizer):
    optimizer.step()
    optimizer.zero_grad()
'''
TRAIN = '''
import torch

from .helpers import step


def train(model, loader, amp_dtype):
    optimizer = torch.optim.Adafactor(model.parameters())
    for x in loader:
        with torch.autocast("cuda", dtype=amp_dtype):
            loss = model(x).sum()
            step(optimizer)
'''


def test_two_deferred_modules_that_need_each_other_are_both_analysed(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text(HELPER)
    (package / "train.py").write_text(TRAIN)
    assert lint_source(HELPER, "helpers.py", ALL_RULES).deferred and lint_source(TRAIN, "train.py", ALL_RULES).deferred
    for cache in ("--no-cache", f"--cache-dir={tmp_path / 'cache'}", f"--cache-dir={tmp_path / 'cache'}"):
        done = run_amplint("--isolated", "--output-format", "json", cache, "pkg", cwd=tmp_path)
        found = [(os.path.basename(f["filename"]), f["location"]["row"], f["code"]) for f in json.loads(done.stdout)]
        assert done.returncode == 1 and found == [("train.py", 12, "AMP004")], (cache, done.stderr)


@pytest.mark.parametrize("script", SCRIPTS[::7], ids=[f"{p.parent.name}/{p.stem}" for p in SCRIPTS[::7]])
def test_the_walk_sees_every_node_but_contexts(script):
    tree = ast.parse(script.read_text())
    seen = sorted(ast.dump(node) for node in evidence._walk(tree))
    assert seen == sorted(ast.dump(node) for node in ast.walk(tree) if not isinstance(node, ast.expr_context))


def test_only_the_rules_whose_needs_the_code_has_run(monkeypatch):
    # Autocast around a product of float32 casts (AMP012); no backward or step anywhere, so
    # the flow rules are not even asked.
    source = 'import torch\nwith torch.autocast("cuda"):\n    y = x.float() @ w.float()\n'
    found = marks(source)
    assert [rule.code for rule in rules_matching_words(source, ALL_RULES) if evidence.satisfied(rule.needs, found)] == ["AMP012"]
    flow_rules = [rule for rule in ALL_RULES if rule.code in ("AMP001", "AMP003", "AMP005", "AMP009")]
    for rule in flow_rules:
        monkeypatch.setattr(rule, "check", lambda self, model: pytest.fail(f"{self.code} ran"))
    assert [f.code for f in lint_source(source, "t.py", ALL_RULES).findings] == ["AMP012"]
