"""What AMP016 and AMP017 rest on, checked on the installed torch, and AMP016's pre-check mark.

AMP016 (autocast-never-entered): an autocast object switches nothing on until it is entered.
AMP017 (fsdp-plain-grad-scaler) has no fixture (a two-process FSDP run); its claim is read from
the torch source, so the tests hold torch to it: `ShardedGradScaler.unscale_` all-reduces the
found-inf flag and `GradScaler.unscale_` does not, and FSDP2's DTensor gradients reduce it in
the op itself (which is why `fully_shard` is not flagged).
"""

import ast
import inspect

import pytest

from amplint.lint import evidence

torch = pytest.importorskip("torch")


def test_an_autocast_object_that_is_not_entered_switches_nothing_on():
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    torch.autocast("cpu", dtype=torch.bfloat16)
    assert not torch.is_autocast_enabled("cpu") and torch.mm(a, b).dtype == torch.float32
    context = torch.autocast("cpu", dtype=torch.bfloat16)
    assert not torch.is_autocast_enabled("cpu") and torch.mm(a, b).dtype == torch.float32
    with context:
        assert torch.is_autocast_enabled("cpu") and torch.mm(a, b).dtype == torch.bfloat16


def test_only_the_sharded_scaler_agrees_on_found_inf_across_ranks():
    from torch.amp.grad_scaler import GradScaler
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    assert "all_reduce" in inspect.getsource(ShardedGradScaler.unscale_)
    plain = inspect.getsource(GradScaler.unscale_) + inspect.getsource(GradScaler._unscale_grads_)
    assert "all_reduce" not in plain and "dist." not in plain


def test_fsdp2_dtensor_gradients_reduce_found_inf_in_the_op():
    dispatch = pytest.importorskip("torch.distributed.tensor._dispatch")
    source = inspect.getsource(dispatch)
    assert "aten._amp_foreach_non_finite_check_and_unscale_.default: found_inf_reduce_handler" in source
    assert 'Partial("max")' in inspect.getsource(dispatch.found_inf_reduce_handler)


@pytest.mark.parametrize(
    "source, has_mark",
    [
        ('import torch\nwith torch.autocast("cuda"):\n    pass\n', False),
        ('import torch\n@torch.autocast("cuda")\ndef f():\n    pass\n', False),
        ('import torch\nwith torch.autocast("cuda"), torch.no_grad():\n    pass\n', False),
        ('import torch\ntorch.autocast("cuda")\n', True),
        ('import torch\nctx = torch.amp.autocast("cuda")\n', True),
        ('import torch\nwith (torch.autocast("cuda") if amp else nullcontext()):\n    pass\n', True),
        ("from torch.cuda.amp import autocast as ac\nac()\n", True),
        ("import torch\nx = 1\n", False),
    ],
)
def test_the_autocast_object_mark(source, has_mark):
    assert (evidence.AUTOCAST_OBJECT in evidence.marks(ast.parse(source))) is has_mark
