"""Precision chosen in another module (issue 24's "constants across modules, dataclass/config
defaults"): `Accelerator(mixed_precision=MIXED_PRECISION)` with `MIXED_PRECISION = "fp16"` in
`config.py`, or `Accelerator(mixed_precision=cfg.mixed_precision)` where `cfg = TrainConfig()`
and `config.py` defines `TrainConfig` with `mixed_precision: str = "fp16"`, may run float16 as
the same code in one file does. A module exports its top-level names and the fields of its
top-level classes that hold a precision (`exports._constants`): dtypes that may be half, and
settings known whole that may choose one. The importer's `Resolver` reads them. Nothing is
guessed: a value that cannot be read (an environment variable, a function's result) exports
nothing, and a field the construction passes is what it passes."""

import pytest

from amplint.lint import catalogue
from amplint.lint.catalogue import constant_names
from amplint.semantic.pytorch import frameworks, vocabulary
from conftest import lint_project
from test_project_constants import _train as dtype_train  # the same loop, its autocast's dtype chosen elsewhere

TRAIN = """
import torch
from accelerate import Accelerator
{imports}


def main(model, optimizer, loader):
    {setup}
    accelerator = Accelerator(mixed_precision={precision})
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = model(x, y)
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
"""
CLIP = ("train.py", 13, "AMP003")


def _train(imports="from config import MIXED_PRECISION", precision="MIXED_PRECISION", setup="pass"):
    return TRAIN.format(imports=imports, precision=precision, setup=setup)


CONFIG_CLASS = """
from dataclasses import dataclass, field


@dataclass
class TrainConfig:
    lr: float = 1e-4
    {field}
"""


def _config(field='mixed_precision: str = "fp16"'):
    return CONFIG_CLASS.format(field=field)


@pytest.mark.parametrize(
    "files",
    [
        # A string constant, imported by name, through its module, or its package.
        {"config.py": 'MIXED_PRECISION = "fp16"\n', "train.py": _train()},
        {"config.py": 'MIXED_PRECISION = "FP16"\n', "train.py": _train("import config", "config.MIXED_PRECISION")},
        {"pkg/__init__.py": "", "pkg/config.py": 'MIXED_PRECISION = "fp16"\n', "train.py": _train("from pkg import config", "config.MIXED_PRECISION")},
        # Chosen on a branch: one of the values it may take.
        {"config.py": 'import os\nMIXED_PRECISION = "no"\nif os.environ.get("AMP"):\n    MIXED_PRECISION = "fp16"\n', "train.py": _train()},
        # A field of a config class of another module, by name and through its module.
        {"config.py": _config(), "train.py": _train("from config import TrainConfig", "cfg.mixed_precision", "cfg = TrainConfig(lr=3e-4)")},
        {"config.py": _config('mixed_precision: str = field(default="fp16")'), "train.py": _train("import config", "cfg.mixed_precision", "cfg = config.TrainConfig()")},
        # The construction passes it: what it passes, whatever the default.
        {"config.py": _config('mixed_precision: str = "no"'), "train.py": _train("from config import TrainConfig", "cfg.mixed_precision", 'cfg = TrainConfig(mixed_precision="fp16")')},
        # Positional arguments may fill the field: its default stays one of its values.
        {"config.py": _config(), "train.py": _train("from config import TrainConfig", "cfg.mixed_precision", "cfg = TrainConfig(3e-4)")},
        # AMP words, but nothing else a rule needs: deferred, then analysed for its importer.
        {"config.py": "# settings for torch.autocast\n" + _config(), "train.py": _train("from config import TrainConfig", "cfg.mixed_precision", "cfg = TrainConfig()")},
    ],
)
def test_a_float16_precision_set_in_another_module_may_be_float16(tmp_path, files):
    for options in (["--no-cache"], [], []):  # cold, then warm twice
        rows, _ = lint_project(tmp_path, files, *options)
        assert rows == [CLIP], options


@pytest.mark.parametrize(
    "files",
    [
        {"config.py": 'MIXED_PRECISION = "bf16"\n', "train.py": _train()},
        {"config.py": 'MIXED_PRECISION = "fp16"\nMIXED_PRECISION = "bf16"\n', "train.py": _train()},  # the last one holds
        {"config.py": 'import os\nMIXED_PRECISION = os.environ.get("MP", "fp16")\n', "train.py": _train()},  # unknown
        {"config.py": 'OTHER = "fp16"\n', "train.py": _train()},  # not the name imported
        {"config.py": _config('mixed_precision: str = "bf16"'), "train.py": _train("from config import TrainConfig", "cfg.mixed_precision", "cfg = TrainConfig()")},
        # The construction passes the field: its default does not count.
        {"config.py": _config(), "train.py": _train("from config import TrainConfig", "cfg.mixed_precision", 'cfg = TrainConfig(mixed_precision="no")')},
        # A field with no default, and one of a class the config module only imports.
        {"config.py": _config("mixed_precision: str"), "train.py": _train("from config import TrainConfig", "cfg.mixed_precision", "cfg = TrainConfig()")},
        {"config.py": "from base import TrainConfig\n", "base.py": "X = 1\n", "train.py": _train("from config import TrainConfig", "cfg.mixed_precision", "cfg = TrainConfig()")},
        # A config object the file does not build: unknown; nor is a keyword of a function's.
        {"config.py": _config(), "train.py": _train("from config import TrainConfig", "cfg.mixed_precision", "cfg = load(TrainConfig)")},
        {"config.py": _config(), "train.py": _train("def load(**kw):\n    return kw", "cfg.mixed_precision", 'cfg = load(mixed_precision="fp16")')},
    ],
)
def test_what_is_not_float16_or_not_known_stays_clean(tmp_path, files):
    assert lint_project(tmp_path, files, "--no-cache")[0] == []


def test_a_flag_field_turns_the_framework_on(tmp_path):
    """`Accelerator(fp16=cfg.fp16)`: accelerate's older boolean, from a field named for it."""
    train = _train("from config import TrainConfig", "None, fp16=cfg.fp16", "cfg = TrainConfig()")
    assert lint_project(tmp_path, {"config.py": _config("fp16: bool = True"), "train.py": train}, "--no-cache")[0] == [CLIP]
    assert lint_project(tmp_path, {"config.py": _config("fp16: bool = False"), "train.py": train}, "--no-cache")[0] == []


PARSED = """
import torch
{imports}
from accelerate import Accelerator
from config import TrainConfig


{decorator}def main({signature}):
    {setup}
    accelerator = Accelerator(mixed_precision=cfg.mixed_precision)
    model, optimizer, loader = accelerator.prepare(*build())
    for x, y in loader:
        loss = model(x, y)
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
{after}"""


@pytest.mark.parametrize(
    "imports, decorator, signature, setup, after",
    [
        # A command-line parser fills the config class: its defaults where no flag is given.
        ("import tyro", "", "", "cfg = tyro.cli(TrainConfig)", ""),
        ("import draccus", "", "", "cfg = draccus.parse(config_class=TrainConfig)", ""),
        ("from omegaconf import OmegaConf", "", "", "cfg = OmegaConf.structured(TrainConfig)", ""),
        # ... or the parameter a parser builds from its annotation.
        ("import draccus", "@draccus.wrap()\n", "cfg: TrainConfig", "pass", ""),
        ("import tyro", "", "cfg: TrainConfig", "pass", "\n\nif __name__ == '__main__':\n    tyro.cli(main)\n"),
    ],
)
def test_a_config_a_command_line_parser_builds_may_hold_its_defaults(tmp_path, imports, decorator, signature, setup, after):
    train = PARSED.format(imports=imports, decorator=decorator, signature=signature, setup=setup, after=after)
    rows, findings = lint_project(tmp_path, {"config.py": _config(), "train.py": train}, "--no-cache")
    line = train.strip().splitlines().index("        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)") + 1
    assert rows == [("train.py", line, "AMP003")]
    assert "when float16 mixed precision is chosen" in findings[0]["message"]  # a flag may choose another
    bf16 = lint_project(tmp_path, {"config.py": _config('mixed_precision: str = "bf16"'), "train.py": train}, "--no-cache")
    assert bf16[0] == []


def test_an_annotation_alone_says_nothing_of_what_a_caller_passes(tmp_path):
    """`def main(cfg: TrainConfig)` that no parser builds: another module may pass any config."""
    train = PARSED.format(imports="", decorator="", signature="cfg: TrainConfig", setup="pass", after="")
    assert lint_project(tmp_path, {"config.py": _config(), "train.py": train}, "--no-cache")[0] == []


@pytest.mark.parametrize(
    "config, imports, setup, dtype",
    [
        # A dtype field of a config class of another module, and of this one.
        ("import torch\nclass Cfg:\n    amp_dtype = torch.float16\n", "from config import Cfg", "cfg = Cfg()", "cfg.amp_dtype"),
        ("", "class Cfg:\n    amp_dtype = torch.float16", "cfg = Cfg()", "cfg.amp_dtype"),
        # A dtype named by a setting: `getattr(torch, ...)` of a constant, a field, a literal.
        ('AMP_DTYPE = "float16"\n', "import config", "pass", "getattr(torch, config.AMP_DTYPE)"),
        (_config('amp_dtype: str = "float16"'), "from config import TrainConfig", "cfg = TrainConfig()", "getattr(torch, cfg.amp_dtype)"),
        ("", "", "pass", 'getattr(torch, "half")'),
    ],
)
def test_a_dtype_chosen_by_configuration_may_be_float16(tmp_path, config, imports, setup, dtype):
    files = {"train.py": dtype_train(imports, dtype, scaler=setup)}
    if config:
        files["config.py"] = config
    line = files["train.py"].strip().splitlines().index(f'        with torch.autocast("cuda", dtype={dtype}):') + 1
    assert lint_project(tmp_path, files, "--no-cache")[0] == [("train.py", line, "AMP002")]
    bf16 = {name: text.replace("float16", "bfloat16").replace('"half"', '"bfloat16"') for name, text in files.items()}
    assert lint_project(tmp_path, bf16, "--no-cache")[0] == []


def test_getattr_on_anything_but_torch_or_an_unknown_name_stays_unknown(tmp_path):
    for dtype in ('getattr(np, "float16")', "getattr(torch, name)"):
        assert lint_project(tmp_path, {"train.py": dtype_train("import numpy as np", dtype, scaler="name = load()")}, "--no-cache")[0] == []


def test_constant_names_reads_precision_assignments_and_config_classes():
    text = (
        'import torch\nMIXED_PRECISION = "fp16"\nPRECISION = 16\nBATCH_SIZE = 16\nUSE_AMP = True\nSAMPLE = True\n'
        'MODE = "train"\n@dataclass\nclass TrainConfig:\n    mixed_precision: str = field(default="bf16-mixed")\n'
        "class Other:\n    debug: bool = True\n    lr = 0.1\nOTHER_DTYPE = torch.bfloat16\n    half_inner = True\n"
        'def f():\n    LOCAL = "fp16"\nif AMP:\n    BRANCH = "fp16"\nelse:\n    BRANCH = "no"\n'
    )
    assert constant_names(text) == {"MIXED_PRECISION", "PRECISION", "USE_AMP", "TrainConfig", "OTHER_DTYPE", "BRANCH"}


def test_the_text_check_knows_the_precision_words_of_names():
    """`catalogue.constant_names` reads flags by the words `exports._constants` reads them by."""
    assert frozenset(catalogue._NAME_WORDS) == vocabulary.PRECISION_NAME_WORDS


@pytest.mark.parametrize("setting", sorted(frameworks.HALF_SETTINGS))
def test_the_text_check_finds_every_setting_the_summary_exports(setting):
    """`catalogue.constant_names` is a text copy of what `exports._constants` exports."""
    assert constant_names(f'CHOSEN = "{setting}"\n') == {"CHOSEN"}
    assert constant_names(f'class C:\n    chosen = "{setting.upper()}"\n') == {"C"}
