"""AMP014's rewrites are right: each new call builds what the deprecated one built, and warns no more.

AMP014 has no fixture for `amplint verify` (the mistake is loud: a FutureWarning); what needs
proof is the replacement it proposes, which a later autofix will write. For each deprecated
call, the rewrite the semantic layer computes is evaluated next to the original, and the two
objects must agree on every setting (device, dtype, enabled, cache; a GradScaler's scale,
growth and backoff), with a FutureWarning from the original only.
"""

import textwrap
import warnings

import libcst as cst
import pytest

from amplint.analyses.deprecations import Deprecations
from amplint.semantic import analyze

torch = pytest.importorskip("torch")

CALLS = [
    "torch.cuda.amp.autocast()",
    "torch.cuda.amp.autocast(False)",
    "torch.cuda.amp.autocast(True, torch.bfloat16)",
    "torch.cuda.amp.autocast(True, torch.float16, False)",
    "torch.cuda.amp.autocast(enabled=False, dtype=torch.bfloat16)",
    "torch.cuda.amp.autocast(**{'enabled': False})",
    "torch.cpu.amp.autocast()",
    "torch.cpu.amp.autocast(True, torch.float16)",
    "torch.cpu.amp.autocast(dtype=torch.bfloat16, cache_enabled=False)",
    "torch.cuda.amp.GradScaler()",
    "torch.cuda.amp.GradScaler(1024.0, 3.0, 0.25, 100, False)",
    "torch.cuda.amp.GradScaler(init_scale=8.0, enabled=False)",
    "torch.cpu.amp.GradScaler()",
    "torch.cpu.amp.GradScaler(2.0 ** 10, growth_interval=7)",
]
SETTINGS = ("device", "fast_dtype", "_enabled", "_cache_enabled", "_device", "_init_scale", "_growth_factor", "_backoff_factor", "_growth_interval")


def rewrite(call: str) -> str:
    uses = analyze(cst.parse_module(f"import torch\nx = {call}\n")).facts(Deprecations).uses
    assert len(uses) == 1 and uses[0].import_to_add is None
    return uses[0].new_text


def build(expression: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        made = eval(expression, {"torch": torch})
    future = [w for w in caught if issubclass(w.category, FutureWarning)]
    return made, future


@pytest.mark.parametrize("call", CALLS)
def test_the_rewrite_builds_the_same_object_without_the_warning(call):
    new = rewrite(call)
    assert new.startswith(("torch.amp.autocast(", "torch.amp.GradScaler("))
    old_object, old_warnings = build(call)
    new_object, new_warnings = build(new)
    assert old_warnings and not new_warnings, new
    assert isinstance(old_object, type(new_object)) or isinstance(new_object, type(old_object).__mro__[1])
    for setting in SETTINGS:
        if hasattr(old_object, setting):
            assert getattr(new_object, setting) == getattr(old_object, setting), (setting, new)


@pytest.mark.parametrize(
    "decorators, expected",
    [
        ("@torch.cuda.amp.custom_fwd\n", '@torch.amp.custom_fwd(device_type="cuda")'),
        ("@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)\n", '@torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.float32)'),
    ],
)
def test_custom_fwd_and_custom_bwd_rewrites_apply_and_warn_no_more(decorators, expected):
    source = textwrap.dedent(
        f"""
        import torch
        class Double(torch.autograd.Function):
            @staticmethod
            {decorators.strip()}
            def forward(ctx, x):
                return x * 2

            @staticmethod
            @torch.cuda.amp.custom_bwd
            def backward(ctx, grad):
                return grad * 2
        """
    )
    module = cst.parse_module(source)
    uses = analyze(module).facts(Deprecations).uses
    assert sorted(use.new_text for use in uses) == sorted([expected[1:], 'torch.amp.custom_bwd(device_type="cuda")'])
    fixed = source
    for use in uses:
        fixed = fixed.replace("@" + module.code_for_node(use.node).strip(), "@" + use.new_text)
    for text, warns in ((source, True), (fixed, False)):
        namespace: dict = {}
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exec(compile(text, "<fixture>", "exec"), namespace)
            x = torch.ones(3, requires_grad=True)
            namespace["Double"].apply(x).sum().backward()
        assert x.grad.tolist() == [2.0, 2.0, 2.0]
        assert any(issubclass(w.category, FutureWarning) for w in caught) is warns
