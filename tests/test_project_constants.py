"""A dtype constant of another linted module (issue 24's "constants across modules"):
`from config import AMP_DTYPE` where `config.py` has `AMP_DTYPE = torch.float16` is float16, as
the same constant in the training script itself is. The module exports its top-level names
that hold a known dtype (`exports._constants`); the importer's `Resolver.dtypes` reads them.
Nothing is guessed: a name assigned something unknown, or not a dtype, stays unknown, and of
a name assigned twice in the module's body the last value holds."""

import pytest

from amplint.lint.catalogue import constant_names
from conftest import lint_project

TRAIN = """
import torch
{imports}


def train(model, loader, opt):
    {scaler}
    for x, y in loader:
        with torch.autocast("cuda", dtype={dtype}):
            loss = model(x, y)
        {backward}
        opt.step()
"""


def _train(imports="from config import AMP_DTYPE", dtype="AMP_DTYPE", scaler="pass", backward="loss.backward()"):
    return TRAIN.format(imports=imports, dtype=dtype, scaler=scaler, backward=backward)


@pytest.mark.parametrize(
    "files",
    [
        {"config.py": "import torch\nAMP_DTYPE = torch.float16\n", "train.py": _train()},
        {"config.py": "import torch\nAMP_DTYPE = torch.half\n", "train.py": _train("import config", "config.AMP_DTYPE")},
        {"pkg/__init__.py": "", "pkg/config.py": "import torch\nAMP_DTYPE = torch.float16\n", "train.py": _train("from pkg import config", "config.AMP_DTYPE")},
        {"config.py": "from torch import float16\nAMP_DTYPE: object = float16\n", "train.py": _train("from config import AMP_DTYPE as dt", "dt")},
        # AMP words, but nothing a rule needs: deferred, and analysed for the module importing it.
        {"config.py": "import torch\nUSE_AUTOCAST = True  # torch.autocast on\nAMP_DTYPE = torch.float16\n", "train.py": _train()},
    ],
)
def test_a_float16_constant_of_another_module_is_float16(tmp_path, files):
    for options in (["--no-cache"], [], []):  # cold, then warm twice
        rows, findings = lint_project(tmp_path, files, *options)
        assert rows == [("train.py", 8, "AMP002")], options
        assert "runs the forward in float16 but no enabled GradScaler" in findings[0]["message"]


def test_one_that_may_be_float16_counts_on_some_runs(tmp_path):
    config = "import os\nimport torch\nBF16 = os.environ.get('BF16') == '1'\nAMP_DTYPE = torch.bfloat16 if BF16 else torch.float16\n"
    rows, findings = lint_project(tmp_path, {"config.py": config, "train.py": _train()}, "--no-cache")
    assert rows == [("train.py", 8, "AMP002")]
    assert "on some runs" in findings[0]["message"]


@pytest.mark.parametrize(
    "config",
    [
        "import torch\nAMP_DTYPE = torch.bfloat16\n",
        "import torch\nAMP_DTYPE = torch.float16\nAMP_DTYPE = torch.bfloat16\n",  # given twice: the last holds
        "import torch\nAMP_DTYPE = get_dtype()\n",  # unknown
        "import torch\nOTHER = torch.float16\n",  # not the name imported
    ],
)
def test_what_is_not_float16_or_not_known_stays_clean(tmp_path, config):
    assert lint_project(tmp_path, {"config.py": config, "train.py": _train()}, "--no-cache")[0] == []


def test_a_scaled_loss_stays_clean(tmp_path):
    train = _train(scaler='scaler = torch.amp.GradScaler("cuda")', backward="scaler.scale(loss).backward()")
    rows, _ = lint_project(tmp_path, {"config.py": "import torch\nAMP_DTYPE = torch.float16\n", "train.py": train}, "--no-cache")
    assert "AMP002" not in [code for _, _, code in rows]


def test_constant_names_reads_top_level_assignments_of_half_dtypes():
    text = "import torch\nAMP_DTYPE = torch.float16\nX: object = torch.bfloat16\n    INNER = torch.half\nY == torch.half\nZ = 1\n"
    assert constant_names(text) == {"AMP_DTYPE", "X"}
