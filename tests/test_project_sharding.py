"""A model sharded by a helper of another module (AMP017 across modules): the module that
defines `shard_model(model)`, which returns `FullyShardedDataParallel(model, ...)`, exports it
(`Sharding.export`, the summary's `facts`), and the module that calls it and trains with a
plain GradScaler is reported at the scaler (composer's `prepare_fsdp_module`, detectron2's
and others' wrapping helpers)."""

import os
import textwrap

import pytest

from amplint.lint.catalogue import helper_names
from conftest import lint_project


def _lint(root, files, *options):
    """(file, row) of each AMP017 finding of `amplint` run on `files`, and the findings."""
    _, findings = lint_project(root, files, *options)
    findings = [f for f in findings if f["code"] == "AMP017"]
    return sorted((os.path.relpath(f["filename"], root).replace(os.sep, "/"), f["location"]["row"]) for f in findings), findings


# No AMP word in it (no GradScaler, no autocast): analysed because a linted module names its helper.
DIST_UTILS = """
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP


def shard_model(model):
    return FSDP(model, use_orig_params=True)
"""

TRAIN = """
import torch
from dist_utils import shard_model


def train(model, loader):
    model = shard_model(model)
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""


def test_a_plain_scaler_for_a_model_a_helper_of_another_module_shards(tmp_path):
    rows, findings = _lint(tmp_path, {"dist_utils.py": DIST_UTILS, "train.py": TRAIN}, "--no-cache")
    assert rows == [("train.py", 8)]
    assert "`shard_model(...)` (which wraps it in FullyShardedDataParallel in dist_utils.py)" in findings[0]["message"]


def test_the_same_with_a_cache_cold_and_warm(tmp_path):
    files = {"dist_utils.py": DIST_UTILS, "train.py": TRAIN}
    cache = str(tmp_path / ".cache")
    assert _lint(tmp_path / "p", files, "--cache-dir", cache)[0] == [("train.py", 8)]
    assert _lint(tmp_path / "p", files, "--cache-dir", cache)[0] == [("train.py", 8)]


def test_the_helper_is_one_an_importer_may_name():
    assert "shard_model" in helper_names(textwrap.dedent(DIST_UTILS))


@pytest.mark.parametrize(
    "helper",
    [
        # Every rank keeps all of the gradients.
        DIST_UTILS.replace("use_orig_params=True", "sharding_strategy=ShardingStrategy.NO_SHARD"),
        # bfloat16 parameters: a scale of 65536 overflows nothing.
        DIST_UTILS.replace("use_orig_params=True", "mixed_precision=MixedPrecision(param_dtype=torch.bfloat16)").replace(
            "import FullyShardedDataParallel as FSDP", "import FullyShardedDataParallel as FSDP, MixedPrecision\nimport torch"
        ),
        # The wrap is not what it returns: the caller's model is not the sharded one.
        DIST_UTILS.replace("    return FSDP(model, use_orig_params=True)", "    wrapped = FSDP(model, use_orig_params=True)\n    return model"),
        # Another module's DDP.
        "from torch.nn.parallel import DistributedDataParallel as DDP\n\n\ndef shard_model(model):\n    return DDP(model)\n",
    ],
)
def test_no_finding_where_the_helper_does_not_shard_what_it_returns(tmp_path, helper):
    assert _lint(tmp_path, {"dist_utils.py": helper, "train.py": TRAIN}, "--no-cache")[0] == []


def test_no_finding_with_a_sharded_scaler(tmp_path):
    train = TRAIN.replace(
        'scaler = torch.amp.GradScaler("cuda")', "scaler = ShardedGradScaler()"
    ).replace("import torch\n", "import torch\nfrom torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler\n", 1)
    assert _lint(tmp_path, {"dist_utils.py": DIST_UTILS, "train.py": train}, "--no-cache")[0] == []
