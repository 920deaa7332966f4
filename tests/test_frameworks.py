"""Frameworks as data (`amplint.semantic.pytorch.frameworks`): precision chosen by
configuration (argparse choices and defaults, conditional expressions, dict lookups, module
constants, config-class defaults) read as the set of values it may take, and
`with accelerator.autocast():` as an autocast region in the Accelerator's precision.

A precision that *may* be float16 makes the framework a loss scaler for the rules whose harm
is float16's; one that cannot be resolved is unknown and never taken for float16."""

import textwrap

import libcst as cst
import pytest

from amplint.lint.engine import lint_text
from amplint.semantic import analyze
from amplint.semantic.pytorch import frameworks


def model(source):
    return analyze(cst.parse_module(textwrap.dedent(source)))


def codes(source):
    return sorted(f"{f.row}:{f.code}" for f in lint_text(textwrap.dedent(source)))


def framework_scalers(source):
    return {info.name: (info.framework, info.enabled) for info in model(source).scalers.values() if info.framework}


# --- the precision an Accelerator may run in ------------------------------------------------

ARGPARSE = """
import argparse
from accelerate import Accelerator

parser = argparse.ArgumentParser()
parser.add_argument({flag!r}, type=str{extra})
args = parser.parse_args()
accelerator = Accelerator(mixed_precision=args.mixed_precision)
"""


@pytest.mark.parametrize(
    "flag, extra, expected",
    [
        # Choices that include fp16: it may be float16, not surely.
        ("--mixed_precision", ', default=None, choices=["no", "fp16", "bf16"]', {"accelerator": ("accelerate", None)}),
        ("--mixed-precision", ', default="no", choices=("no", "fp16", "bf16", "fp8")', {"accelerator": ("accelerate", None)}),
        # Only fp16 to choose from, and an fp16 default: it is float16.
        ("--mixed_precision", ', default="fp16", choices=["fp16"]', {"accelerator": ("accelerate", True)}),
        # No choices: only the default is known, and it may be float16.
        ("--mixed_precision", ', default="fp16"', {"accelerator": ("accelerate", None)}),
        # bfloat16 and "no" only: no loss scaler.
        ("--mixed_precision", ', default="no", choices=["no", "bf16"]', {}),
        # No choices and no float16 default: unknown, never guessed.
        ("--mixed_precision", ", default=None", {}),
        ("--mixed_precision", "", {}),
        # Another option's choices say nothing about this one.
        ("--precision", ', choices=["no", "fp16"]', {}),
    ],
)
def test_argparse_option_decides_what_the_accelerator_may_run_in(flag, extra, expected):
    assert framework_scalers(ARGPARSE.format(flag=flag, extra=extra)) == expected


def test_an_explicit_dest_names_the_attribute():
    source = """
    import argparse
    from accelerate import Accelerator
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", dest="mixed_precision", choices=["no", "fp16"])
    args = parser.parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    """
    assert framework_scalers(source) == {"accelerator": ("accelerate", None)}


@pytest.mark.parametrize(
    "setup, argument, expected",
    [
        ("", '"fp16"', ("accelerate", True)),
        ("", '"FP16"', ("accelerate", True)),
        ("", '"fp16" if args.fp16 else "no"', ("accelerate", None)),
        ("", '"bf16" if args.bf16 else "no"', None),
        ('PRECISION = "fp16"', "PRECISION", ("accelerate", True)),
        ('table = {"half": "fp16", "brain": "bf16"}', "table[args.precision]", ("accelerate", None)),
        ('table = {"brain": "bf16", "none": "no"}', "table[args.precision]", None),
        ("if args.fp16:\n    mp = 'fp16'\nelse:\n    mp = 'no'", "mp", ("accelerate", None)),
        ("", "args.mixed_precision", None),  # nothing says what args holds
        ("", "get_precision()", None),
        ("", "None", None),
    ],
)
def test_values_the_precision_may_take(setup, argument, expected):
    source = f"from accelerate import Accelerator\n{setup}\naccelerator = Accelerator(mixed_precision={argument})\n"
    assert framework_scalers(source) == ({"accelerator": expected} if expected else {})


def test_accelerates_older_fp16_flag():
    assert framework_scalers("from accelerate import Accelerator\nacc = Accelerator(fp16=True)\n") == {"acc": ("accelerate", True)}
    assert framework_scalers("from accelerate import Accelerator\nacc = Accelerator(fp16=False)\n") == {}
    assert framework_scalers("from accelerate import Accelerator\nacc = Accelerator(fp16=args.fp16)\n") == {}


def test_a_parameter_default_and_what_callers_pass():
    source = """
    from accelerate import Accelerator
    def main(mixed_precision="no"):
        accelerator = Accelerator(mixed_precision=mixed_precision)
    main(mixed_precision="fp16")
    """
    assert framework_scalers(source) == {"accelerator": ("accelerate", None)}
    assert framework_scalers(source.replace('main(mixed_precision="fp16")', "main()")) == {}


@pytest.mark.parametrize(
    "field, construction, expected",
    [
        ('mixed_precision = "fp16"', "TrainingConfig()", ("accelerate", True)),
        ('mixed_precision: str = "fp16"', "TrainingConfig()", ("accelerate", True)),
        ('mixed_precision: str = field(default="fp16")', "TrainingConfig()", ("accelerate", True)),
        ('mixed_precision: str = "fp16"', 'TrainingConfig(mixed_precision="no")', None),
        ('mixed_precision: str = "no"', 'TrainingConfig(mixed_precision="fp16")', ("accelerate", True)),
        ('mixed_precision: str = "fp16"', "TrainingConfig(8)", ("accelerate", None)),
        ('mixed_precision: str = "bf16"', "TrainingConfig()", None),
        ("mixed_precision: str = None", "TrainingConfig()", None),
    ],
)
def test_a_config_class_default(field, construction, expected):
    source = f"""
from dataclasses import dataclass, field
from accelerate import Accelerator

@dataclass
class TrainingConfig:
    train_batch_size: int = 16
    {field}

config = {construction}
accelerator = Accelerator(mixed_precision=config.mixed_precision)
"""
    assert framework_scalers(source) == ({"accelerator": expected} if expected else {})


def test_lightning_and_fabric_precision_from_configuration():
    trainer = """
    import argparse
    import lightning as L
    class Net(L.LightningModule):
        pass
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="32-true", choices=["32-true", "16-mixed", "bf16-mixed"])
    args = parser.parse_args()
    trainer = L.Trainer(precision=args.precision)
    """
    assert framework_scalers(trainer) == {"self": ("lightning", None)}
    assert framework_scalers(trainer.replace('"16-mixed", ', "")) == {}
    assert framework_scalers(trainer.replace('choices=["32-true", "16-mixed", "bf16-mixed"]', "type=str")) == {}
    # A DeepSpeed strategy or apex scales the loss with a scaler of its own: no GradScaler of
    # the Trainer's. Any other strategy or plugin, or one the file does not show, keeps it.
    surely = trainer.replace("precision=args.precision", 'precision="16-mixed"')
    for handed in ('strategy="deepspeed_stage_2"', "strategy=DeepSpeedStrategy(stage=3)", 'amp_backend="apex"'):
        assert framework_scalers(surely.replace('precision="16-mixed"', f'precision="16-mixed", {handed}')) == {}, handed
    for kept in ('strategy="ddp"', "strategy=DDPStrategy(find_unused_parameters=True)", "strategy=FSDPStrategy()", "strategy=None",
                 "strategy=args.strategy", "plugins=[SLURMEnvironment()]", "plugins=None", "plugins=[MyPrecision()]"):
        assert framework_scalers(surely.replace('precision="16-mixed"', f'precision="16-mixed", {kept}')) == {"self": ("lightning", True)}, kept
    # A subclass of the file's LightningModule is trained by the same Trainer.
    chained = '''
    import torch
    import lightning as L
    class Base(L.LightningModule):
        pass
    class Net(Base):
        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            self.manual_backward(self(batch).sum())
            torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
            opt.step()
    trainer = L.Trainer(precision="16-mixed")
    '''
    assert codes(chained) == ["10:AMP003"]
    # Two Trainers of the file: each class is trained by the one that fits it.
    paired = chained.replace('trainer = L.Trainer(precision="16-mixed")', 'L.Trainer(precision="32-true").fit(Net())\n    L.Trainer(precision="16-mixed").fit(Other())')
    assert codes(paired) == []
    assert codes(paired.replace('precision="32-true"', 'precision="16-mixed"')) == ["10:AMP003"]
    # A strategy that only may be DeepSpeed's: the GradScaler is one of the possibilities.
    maybe = surely.replace('precision="16-mixed"', 'precision="16-mixed", strategy="deepspeed_stage_2" if ds else "ddp"')
    assert framework_scalers(maybe) == {"self": ("lightning", None)}
    fabric = "from lightning.fabric import Fabric\nfabric = Fabric(precision=16 if use_amp else 32)\n"
    assert framework_scalers(fabric) == {"fabric": ("fabric", None)}
    assert framework_scalers(fabric.replace("16 if use_amp else 32", '"bf16-mixed"')) == {}


# --- the rules, on the scripts a user writes ------------------------------------------------

ACCELERATE_LOOP = """
import argparse
import torch
from accelerate import Accelerator

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mixed_precision", type=str, default=None, choices={choices})
    args = parser.parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = model(x, y)
        accelerator.backward(loss)
        {clip}
        optimizer.step()
        optimizer.zero_grad()
"""


def test_clip_after_accelerate_backward_when_fp16_may_be_chosen():
    torch_clip = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
    assert codes(ACCELERATE_LOOP.format(choices='["no", "fp16", "bf16"]', clip=torch_clip)) == ["15:AMP003"]
    # bfloat16 or nothing: no loss scale to clip.
    assert codes(ACCELERATE_LOOP.format(choices='["no", "bf16"]', clip=torch_clip)) == []
    # accelerate's own clip unscales first.
    accelerate_clip = "accelerator.clip_grad_norm_(model.parameters(), 1.0)"
    assert codes(ACCELERATE_LOOP.format(choices='["no", "fp16", "bf16"]', clip=accelerate_clip)) == []


def test_clip_after_accelerate_backward_when_precision_is_unknown_stays_silent():
    source = ACCELERATE_LOOP.format(choices="None", clip="torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")
    assert codes(source) == []


# --- accelerator.autocast() -----------------------------------------------------------------


def regions(source):
    return [(r.framework, r.enabled, set(r.possible_dtypes)) for r in model(source).autocast_regions]


@pytest.mark.parametrize(
    "precision, expected",
    [
        ('"fp16"', (True, {"float16"})),
        ('"bf16"', (True, {"bfloat16"})),
        ('"no"', (False, set())),
        ('"fp16" if args.fp16 else "no"', (None, {"float16"})),
        ('"fp16" if args.fp16 else "bf16"', (True, {"float16", "bfloat16"})),
        ("args.mixed_precision", (None, set())),  # unknown: neither dtype nor state
        ('"fp8" if args.fp8 else "no"', (None, set())),  # fp8 is no torch.autocast dtype amplint knows
    ],
)
def test_accelerator_autocast_is_a_region_in_the_accelerators_precision(precision, expected):
    source = f"""
    from accelerate import Accelerator
    accelerator = Accelerator(mixed_precision={precision})
    with accelerator.autocast():
        loss = model(x)
    """
    assert regions(source) == [("accelerate", *expected)]


def test_an_accelerator_the_file_does_not_build_opens_a_region_of_unknown_precision():
    source = """
    class Trainer(BaseTrainer):
        def step(self, x):
            with self.accelerator.autocast():
                return self.model(x)
    def evaluate(fabric, model, x):
        with fabric.autocast():
            return model(x)
    """
    assert regions(source) == [("accelerate", None, set()), ("fabric", None, set())]
    # Not every object with an autocast() method is a framework.
    assert regions("with helper.autocast():\n    y = f(x)\n") == []
    assert regions("accelerator = MyAccelerator()\nwith accelerator.autocast():\n    y = f(x)\n") == []


def test_backward_and_step_inside_accelerator_autocast():
    source = """
    from accelerate import Accelerator
    accelerator = Accelerator(mixed_precision="bf16")
    model, optimizer = accelerator.prepare(model, optimizer)
    with accelerator.autocast():  # around the loop: the step's update goes unseen by the next forward
        for x in loader:
            loss = model(x)
            loss.backward()
            optimizer.step()
    """
    assert codes(source) == ["8:AMP006", "9:AMP004"]


def test_accelerator_autocast_in_its_documented_use_stays_clean():
    source = """
    from accelerate import Accelerator
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        with accelerator.autocast():
            loss = loss_fn(model(x), y)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
    """
    assert codes(source) == []
    # With mixed precision off, the region is off: nothing inside it runs under autocast.
    off = source.replace('"fp16"', '"no"').replace("accelerator.backward(loss)", "loss.backward()")
    assert codes(off.replace("        loss.backward()", "            loss.backward()")) == []


def test_the_table_is_consistent():
    for framework in frameworks.BY_NAME.values():
        # Each says how its precision is chosen: a setting, a config dict, or always float16.
        assert framework.constructors
        setting = framework.precision_keyword or framework.fp16_flag
        assert sum(map(bool, (setting, framework.config_keywords, framework.always_float16))) == 1
        # The frameworks that train the file's classes say which, and how those call them.
        assert framework.scales_module_classes == bool(framework.module_bases) == bool(framework.self_backward_methods)
        assert not framework.backward_methods & framework.unscaling_methods
        assert not framework.step_methods & (framework.backward_methods | framework.unscaling_methods)
        # Each message it advises is spelled for it.
        assert framework.backward_advice and framework.clip_advice and framework.step_advice
        assert framework.hold_step_keywords <= frozenset() or framework.called_steps
    assert frameworks.autocast_dtype("fp16") == "float16"
    assert frameworks.autocast_dtype("bf16-mixed") == "bfloat16"
    assert frameworks.autocast_dtype("no") is None
    assert not frameworks.FP16_PRECISIONS & (frameworks.BF16_PRECISIONS | frameworks.FULL_PRECISIONS)


def test_a_finding_that_needs_float16_to_be_chosen_says_so():
    source = ACCELERATE_LOOP.format(choices='["no", "fp16"]', clip="torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")
    (finding,) = lint_text(textwrap.dedent(source))
    assert "when float16 mixed precision is chosen" in finding.message
    surely = source.replace("mixed_precision=args.mixed_precision", 'mixed_precision="fp16"')
    (finding,) = lint_text(textwrap.dedent(surely))
    assert "when float16" not in finding.message


def test_a_config_object_handed_to_the_function_that_builds_the_trainer():
    # Lightning manual optimization, the clip in a helper of the module, the precision from
    # a config class the script constructs and passes to main().
    source = """
    from dataclasses import dataclass
    import lightning as L
    import torch

    @dataclass
    class Config:
        precision: str = "16-mixed"

    class Model(L.LightningModule):
        def _clip(self):
            torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self.compute_loss(batch))
            self._clip()
            opt.step()

    def main(cfg):
        L.Trainer(precision=cfg.precision).fit(Model())

    main(Config())
    """
    assert codes(source) == ["12:AMP003"]
    assert framework_scalers(source) == {"self": ("lightning", None)}  # main() may be called elsewhere
    assert codes(source.replace('"16-mixed"', '"bf16-mixed"')) == []
    assert codes(source.replace("main(Config())", "")) == []  # nothing says what cfg is


def test_a_plain_step_after_a_backward_that_may_be_scaled_says_when():
    source = """
    from accelerate import Accelerator
    def train(model, optimizer, loader, mixed_precision="fp16"):
        accelerator = Accelerator(mixed_precision=mixed_precision)
        model, loader = accelerator.prepare(model, loader)
        for batch in loader:
            accelerator.backward(model(batch))
            optimizer.step()
    """
    (finding,) = lint_text(textwrap.dedent(source))
    assert finding.code == "AMP005" and finding.message.endswith("when float16 mixed precision is chosen")
    assert lint_text(textwrap.dedent(source.replace('mixed_precision="fp16"', 'mixed_precision="bf16"'))) == []


# --- timm's NativeScaler ---------------------------------------------------------------------

TIMM_LOOP = """
import torch
{imports}

def train(model, loader, optimizer, loss_fn):
    loss_scaler = {build}
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        {call}
        optimizer.zero_grad()
"""


@pytest.mark.parametrize(
    "imports, build",
    [
        ("from timm.utils import NativeScaler", "NativeScaler()"),
        ("import timm.utils", "timm.utils.NativeScaler(device='cuda')"),
        ("from timm.utils import ApexScaler", "ApexScaler()"),
        # Projects copy it into their own utils (mae, ConvNeXt, Swin).
        ("from util.misc import NativeScalerWithGradNormCount as NativeScaler", "NativeScaler()"),
        ("from timm.utils import NativeScaler", "NativeScaler() if use_amp else None"),
    ],
)
def test_a_native_scaler_is_a_float16_loss_scaler(imports, build):
    source = TIMM_LOOP.format(imports=imports, build=build, call="loss_scaler(loss, optimizer)")
    assert framework_scalers(source) == {"loss_scaler": ("timm", True)}
    # Calling it is a step through it (its backward, unscale and update are inside).
    kinds = [o.kind.name for u in model(source).units for o in model(source).occurrences_in(u) if not o.via]
    assert "SCALER_STEP" in kinds and "BACKWARD" not in kinds


def test_a_native_scaler_holds_its_step_back_for_accumulation():
    held = TIMM_LOOP.format(
        imports="from timm.utils import NativeScaler", build="NativeScaler()", call="loss_scaler(loss, optimizer, update_grad=last)"
    )
    events = [o.event for u in model(held).units for o in model(held).occurrences_in(u) if not o.via]
    (backward,) = [e for e in events if e.kind.name == "FRAMEWORK_BACKWARD"]
    assert backward.framework_scaler is not None
    # A literal True holds nothing back.
    stepping = held.replace("update_grad=last", "need_update=True")
    assert "SCALER_STEP" in [o.kind.name for u in model(stepping).units for o in model(stepping).occurrences_in(u)]


def test_a_loss_scaler_parameter_called_on_a_loss_and_an_optimizer_steps_but_is_not_known_live():
    source = """
    import torch
    def train_one_epoch(model, loader, optimizer, loss_fn, loss_scaler):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x), y)
            loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters())
            optimizer.zero_grad()
    """
    built = model(source)
    (step,) = [o for u in built.units for o in built.occurrences_in(u) if o.kind.name == "SCALER_STEP"]
    assert step.receiver.text == "loss_scaler" and step.argument.text == "optimizer"
    assert not built.is_live(step.receiver.key)
    assert codes(source) == []
    # A scaler-like name called on something that is no loss is not the call.
    other = source.replace("loss_scaler(loss, optimizer,", "loss_scaler(x, optimizer,")
    assert not [o for u in model(other).units for o in model(other).occurrences_in(u) if o.kind.name == "SCALER_STEP"]


def test_sklearn_scalers_are_not_timm_ones():
    source = """
    import torch
    from sklearn.preprocessing import StandardScaler
    scaler = StandardScaler()
    features = scaler(loss_values, optimizer_names)
    """
    assert framework_scalers(source) == {}


# --- DeepSpeed --------------------------------------------------------------------------------

DEEPSPEED = """
import deepspeed
import torch
{config}
engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), {argument})
"""


@pytest.mark.parametrize(
    "config, argument, expected",
    [
        ('ds_config = {"fp16": {"enabled": True}}', "config=ds_config", {"engine": ("deepspeed", True)}),
        ("", 'config={"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": 0}}', {"engine": ("deepspeed", True)}),
        ('ds_config = {"fp16": {"enabled": True}}', "config_params=ds_config", {"engine": ("deepspeed", True)}),
        # An argparse flag: either.
        ('import argparse\np = argparse.ArgumentParser()\np.add_argument("--fp16", action="store_true")\nargs = p.parse_args()\n'
         'ds_config = {"fp16": {"enabled": args.fp16}}', "config=ds_config", {"engine": ("deepspeed", None)}),
        # Changed after it is written: it may be anything besides what it says (a section
        # written into is a value of its own: unknown).
        ('ds_config = {"fp16": {"enabled": True}}\nds_config["fp16"]["enabled"] = args.fp16', "config=ds_config", {}),
        ('ds_config = {"fp16": {"enabled": True}}\nds_config.update(extra)', "config=ds_config", {"engine": ("deepspeed", None)}),
        # Handed to a helper that may write into it; printed or serialised only, it stays.
        ('ds_config = {"fp16": {"enabled": True}}\nset_precision(ds_config, args)', "config=ds_config", {"engine": ("deepspeed", None)}),
        ('ds_config = {"fp16": {"enabled": True}}\nprint(json.dumps(ds_config))\nlogger.info(ds_config)', "config=ds_config", {"engine": ("deepspeed", True)}),
        # No float16: bfloat16, off, absent, DeepSpeed's default for a section without "enabled".
        ('ds_config = {"bf16": {"enabled": True}}', "config=ds_config", {}),
        ('ds_config = {"fp16": {"enabled": False}}', "config=ds_config", {}),
        ('ds_config = {"train_batch_size": 8}', "config=ds_config", {}),
        ('ds_config = {"fp16": {"loss_scale": 0}}', "config=ds_config", {}),
        # Unknown, never guessed: a JSON path, the command line's --deepspeed_config, HF's "auto".
        ("", 'config="ds_config.json"', {}),
        ("", "args=args", {}),
        ('ds_config = {"fp16": {"enabled": "auto"}}', "config=ds_config", {}),
    ],
)
def test_deepspeed_precision_comes_from_its_config_dict(config, argument, expected):
    assert framework_scalers(DEEPSPEED.format(config=config, argument=argument)) == expected


def test_deepspeed_engine_methods_and_returned_optimizer():
    source = DEEPSPEED.format(config='ds_config = {"fp16": {"enabled": True}}', argument="config=ds_config") + textwrap.dedent(
        """
        for batch in loader:
            loss = engine(batch)
            engine.backward(loss)
            engine.step()
            optimizer.step()
        """
    )
    built = model(source)
    kinds = [(o.kind.name, o.receiver.text) for u in built.units for o in built.occurrences_in(u)]
    assert kinds == [("FRAMEWORK_BACKWARD", "engine"), ("SCALER_STEP", "engine"), ("SCALER_STEP", "engine")]
    # Not unpacked into an engine: nothing is assumed.
    single = source.replace("engine, optimizer, _, _ = deepspeed", "engine = deepspeed")
    assert framework_scalers(single) == {}


def test_a_plain_backward_with_deepspeed_in_float16_says_how_to_scale():
    source = DEEPSPEED.format(config='ds_config = {"fp16": {"enabled": True}}', argument="config=ds_config") + textwrap.dedent(
        """
        for batch in loader:
            loss = engine(batch)
            loss.backward()
            engine.step()
        """
    )
    (finding,) = lint_text(source)
    assert finding.code == "AMP001" and "Use `engine.backward(loss)`, which scales the loss" in finding.help


# --- Hugging Face Trainer ---------------------------------------------------------------------

HF = """
from transformers import Trainer, TrainingArguments

class MyTrainer(Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = self.compute_loss(model, inputs)
        {backward}
        return loss.detach()

args = TrainingArguments(output_dir="out", {precision})
"""


@pytest.mark.parametrize(
    "precision, expected",
    [
        ("fp16=True", {"self": ("transformers", True)}),
        ("fp16=use_fp16", {}),  # unknown: never guessed
        ("fp16=False, bf16=True", {}),
        ("bf16=True", {}),
    ],
)
def test_training_arguments_in_float16_give_the_trainer_subclasses_a_scaler(precision, expected):
    assert framework_scalers(HF.format(backward="loss.backward()", precision=precision)) == expected


def test_the_trainers_accelerator_scales_and_unscales_in_its_subclasses():
    backward = "self.accelerator.backward(loss)\n        self.accelerator.clip_grad_norm_(model.parameters(), 1.0)"
    source = HF.format(backward=backward, precision="fp16=True")
    built = model(source)
    events = [o.event for u in built.units for o in built.occurrences_in(u)]
    assert [e.kind.name for e in events] == ["FRAMEWORK_BACKWARD", "UNSCALE"]
    assert events[0].framework_scaler == "cls:MyTrainer:transformers"
    assert codes(source) == []
    # A plain backward that the Trainer then steps through its scaler is AMP001.
    assert codes(HF.format(backward="loss.backward()", precision="fp16=True")) == ["7:AMP001"]
    # With the hook called by the file itself it is a helper, not the Trainer's hook.
    called = HF.format(backward="loss.backward()", precision="fp16=True") + "trainer = MyTrainer()\ntrainer.training_step(model, inputs)\n"
    assert codes(called) == []


# --- framework objects a function of the file builds and returns ------------------------------

FACTORY = """
import torch
from accelerate import Accelerator
from transformers import Trainer, TrainingArguments

def build_accelerator(cfg):
    accelerator = Accelerator(mixed_precision={precision}, log_with=cfg.log_with)
    return accelerator

def build_args(cfg):
    return TrainingArguments(output_dir=cfg.out, {arguments})

class MyTrainer(Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = self.compute_loss(model, inputs)
        loss.backward()
        return loss.detach()

def train(cfg, model, optimizer, loader):
    accelerator = build_accelerator(cfg)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in loader:
        loss = model(x)
        loss.backward()
        optimizer.step()
    MyTrainer(model=model, args=build_args(cfg)).train()
"""


@pytest.mark.parametrize(
    "precision, arguments, expected",
    [
        ('"fp16"', "fp16=True", ["16:AMP001", "24:AMP001"]),
        ('"fp16" if cfg.fp16 else "no"', "fp16=False", ["24:AMP001"]),
        ('"bf16"', "bf16=True", []),
        ("cfg.mixed_precision", "fp16=cfg.fp16", []),  # unknown: never guessed
    ],
)
def test_a_framework_object_a_function_of_the_file_returns(precision, arguments, expected):
    assert codes(FACTORY.format(precision=precision, arguments=arguments)) == expected
    exported = model(FACTORY.format(precision=precision, arguments=arguments)).scaler_facts.factories
    # What another module is told: the values the precision may take, unless its caller's argument decides them.
    assert sorted(exported) == sorted(name for name, known in (("build_accelerator", precision[0] == '"'), ("build_args", arguments == "fp16=True")) if known)


# --- ignite -----------------------------------------------------------------------------------

IGNITE = """
import argparse
from ignite.engine import create_supervised_trainer
parser = argparse.ArgumentParser()
parser.add_argument("--amp-mode", default=None, choices=[None, "amp", "apex"])
args = parser.parse_args()
trainer = create_supervised_trainer(model, optimizer, loss_fn, {arguments})
"""


@pytest.mark.parametrize(
    "arguments, expected",
    [
        ('"cuda", amp_mode="amp"', [("ignite", True)]),
        ('device="cuda", amp_mode="amp", scaler=False', [("ignite", True)]),
        ('device, amp_mode="amp"', [("ignite", True)]),  # an unknown device may be CUDA
        ("device, amp_mode=args.amp_mode", [("ignite", False)]),  # one of several settings
        ('"cuda", amp_mode="amp", scaler=True', []),
        ('"cuda", amp_mode="amp", scaler=scaler', []),  # a GradScaler, or unknown: not off
        ('"cpu", amp_mode="amp"', []),  # CPU autocast is bfloat16
        ('"cuda", amp_mode="apex"', []),
        ('"cuda"', []),
    ],
)
def test_ignite_loops_in_float16_autocast_without_a_scaler(arguments, expected):
    built = model(IGNITE.format(arguments=arguments))
    assert [(name, surely) for _, name, surely in built.scaler_facts.unscaled_loops] == expected


def test_the_pre_check_knows_what_the_table_adds():
    # A file that builds or calls what the table models is read: its words are trigger
    # words, and its calls and hooks give the marks the rules need.
    import ast

    from amplint.lint import catalogue, evidence

    (amp007,) = [r for r in catalogue.RULES if r.code == "AMP007"]
    assert all(any(word in name for word in amp007.triggers) for name in frameworks.OWNED_SCALER_CLASSES)
    marks = evidence.marks(ast.parse("import torch\nloss_scaler(loss, optimizer)\n"))
    assert {evidence.STEP, evidence.FRAMEWORK_BACKWARD} <= marks
    marks = evidence.marks(ast.parse("class M(L.LightningModule):\n    def on_after_backward(self):\n        pass\n"))
    assert evidence.FRAMEWORK_BACKWARD in marks
    marks = evidence.marks(ast.parse("class T(Trainer):\n    def training_step(self, model, inputs):\n        loss.backward()\n"))
    assert {evidence.STEP, evidence.BACKWARD} <= marks
    marks = evidence.marks(ast.parse("t = create_supervised_trainer(m, o, l, 'cuda', amp_mode='amp')\n"))
    assert {evidence.AUTOCAST, evidence.BACKWARD} <= marks
    for source in ('c = {"fp16": {"enabled": True}}', "c = {'fp16': {'enabled': True}}", "TrainingArguments(fp16=True)", "amp_mode='amp'"):
        assert catalogue.might_use_amp(source)


def test_a_helper_stepping_an_optimizer_the_framework_prepared_is_its_scalers_step():
    # Lightning manual optimization with the step in a helper method: not AMP005.
    source = """
    import lightning as L
    class M(L.LightningModule):
        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            self.manual_backward(self.loss(batch))
            self._step(opt)
        def _step(self, optimizer):
            optimizer.step()
    trainer = L.Trainer(precision="16-mixed")
    """
    assert codes(source) == []
    # A plain optimizer of its own, stepped the same way, still is.
    assert codes(source.replace("opt = self.optimizers()", "opt = torch.optim.SGD(self.parameters())")) == ["9:AMP005"]


# --- hooks a framework runs under its own autocast --------------------------------------------

HOOKS = """
import lightning as L
import torch


class Scorer(L.LightningModule):
    def training_step(self, batch, batch_idx):
        p = torch.sigmoid(self.net(batch[0]))
        return -torch.log(p).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())


trainer = L.Trainer({arguments})
"""


def hook_regions(source):
    analysed = model(source)
    return {region.hook: (region.possible_dtypes, region.enabled) for region in analysed.regions.hook_regions.values()}


def test_the_table_says_which_hooks_run_under_the_frameworks_autocast():
    assert {"training_step", "validation_step", "test_step", "predict_step"} <= frameworks.LIGHTNING.autocast_hooks
    # transformers' Trainer autocasts the model's forward only (through accelerate).
    assert not frameworks.HF_TRAINER.autocast_hooks
    assert "configure_optimizers" not in frameworks.AUTOCAST_HOOKS


@pytest.mark.parametrize(
    "arguments, expected",
    [
        ('precision="16-mixed"', ({"float16"}, True)),
        ("precision=16", ({"float16"}, True)),
        ('precision="bf16-mixed"', ({"bfloat16"}, True)),
        ('precision="16-mixed" if amp else "32"', ({"float16"}, None)),
        ('precision="16-mixed", strategy="ddp", devices=4', ({"float16"}, True)),
    ],
)
def test_a_lightning_module_s_step_hooks_run_in_the_trainer_s_precision(arguments, expected):
    dtypes, enabled = expected
    assert hook_regions(HOOKS.format(arguments=arguments)) == {"training_step": (frozenset(dtypes), enabled)}


@pytest.mark.parametrize(
    "arguments",
    [
        "",  # no precision: the default, full precision
        'precision="32"',
        'precision="16-true"',  # half-precision weights, no autocast
        "precision=cfg.precision",  # unknown: never guessed
        "**trainer_kwargs",
        # DeepSpeed casts the model instead of autocasting; a plugin may replace the precision's.
        'precision="16-mixed", strategy="deepspeed_stage_2"',
        'precision=16, strategy=DeepSpeedStrategy(stage=3)',
        'precision="16-mixed", plugins=[MyPrecision()]',
        'precision=16, amp_backend="apex"',
    ],
)
def test_no_region_where_the_trainer_s_precision_is_not_known_mixed(arguments):
    source = HOOKS.format(arguments=arguments)
    assert hook_regions(source) == {}
    assert codes(source) == []


def test_no_region_without_a_trainer_in_the_file_or_for_a_class_lightning_does_not_train():
    module_only = HOOKS.split("trainer = ")[0]
    assert hook_regions(module_only) == {}
    not_lightning = HOOKS.format(arguments='precision="16-mixed"').replace("(L.LightningModule)", "(torch.nn.Module)")
    assert hook_regions(not_lightning) == {}
    assert codes(not_lightning) == []


def test_the_unsafe_log_in_a_hook_is_reported_with_the_trainer_that_autocasts_it():
    source = HOOKS.format(arguments='precision="16-mixed"')
    findings = lint_text(textwrap.dedent(source))
    assert [(f.row, f.code) for f in findings] == [(9, "AMP013")]
    assert 'inside `training_step`, which `L.Trainer(precision="16-mixed")` runs under autocast' in findings[0].message


def test_an_autocast_written_in_the_hook_decides_over_the_trainer_s():
    source = HOOKS.format(arguments='precision="16-mixed"').replace(
        "        p = torch.sigmoid(self.net(batch[0]))\n        return -torch.log(p).mean()",
        '        with torch.autocast("cuda", dtype=torch.bfloat16):\n'
        "            p = torch.sigmoid(self.net(batch[0]))\n"
        "            return -torch.log(p).mean()",
    )
    assert codes(source) == []  # bfloat16: the sigmoid does not underflow
    disabled = source.replace('dtype=torch.bfloat16', "enabled=False")
    assert codes(disabled) == []


def test_events_in_a_hook_are_not_in_a_region_the_framework_places_them_in_by_design():
    source = HOOKS.format(arguments='precision="16-mixed"').replace(
        "        return -torch.log(p).mean()",
        "        loss = -F.logsigmoid(self.net(batch[0])).mean()\n"
        "        opt = self.optimizers()\n"
        "        self.manual_backward(loss)\n"
        "        opt.step()",
    ).replace("import torch\n", "import torch\nimport torch.nn.functional as F\n", 1)
    assert codes(source) == []
