"""Frameworks across linted modules: a class a framework trains, defined in one module and
built with the framework's settings in another (a Hugging Face `Trainer` subclass in
trainer.py, `TrainingArguments(fp16=...)` and `MyTrainer(args=...)` in train.py), reported
where the precision is known: at the construction, naming the hook's file and line."""

from conftest import lint_project


def _lint(root, files, *options):
    """(file, row, code) of each finding of `amplint` run on `files`, written under `root`,
    and the findings as JSON."""
    return lint_project(root, files, *(options or ("--no-cache",)))


# --------------------------------------------------------------------------- Hugging Face Trainer

# No AMP word in it: analysed because train.py imports it and names the class.
TRAINER = """
from transformers import Trainer


class DistillationTrainer(Trainer):
    def __init__(self, *args, teacher=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher = teacher

    def training_step(self, model, inputs, num_items_in_batch=None):
        model.train()
        inputs = self._prepare_inputs(inputs)
        with self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        if self.args.n_gpu > 1:
            loss = loss.mean()
        {backward}
        return loss.detach() / self.args.gradient_accumulation_steps


class PlainTrainer(Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = self.compute_loss(model, self._prepare_inputs(inputs))
        {backward}
        return loss.detach()
"""

TRAIN = """
import argparse

from transformers import TrainingArguments

from trainer import DistillationTrainer, PlainTrainer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    training_args = TrainingArguments(output_dir="out", {precision})
    trainer = {construction}
    trainer.train()


if __name__ == "__main__":
    main()
"""

PLAIN = "loss.backward()"
SCALED = "self.accelerator.backward(loss)"
DISTILL = "DistillationTrainer(model=build(), args=training_args, teacher=teacher, train_dataset=data)"


def test_a_trainer_subclass_of_another_module_built_with_fp16_arguments(tmp_path):
    files = {"trainer.py": TRAINER.format(backward=PLAIN), "train.py": TRAIN.format(precision="fp16=args.fp16", construction=DISTILL)}
    found, findings = _lint(tmp_path, files)
    # At the construction, where the precision is known; trainer.py alone does not know it.
    assert found == [("train.py", 13, "AMP001")]
    message = findings[0]["message"]
    assert "`DistillationTrainer.training_step`" in message and "`loss.backward()` (trainer.py:16)" in message
    assert message.endswith("when float16 mixed precision is chosen")
    assert "use `self.accelerator.backward(loss)`" in findings[0]["help"]


def test_surely_fp16_arguments_say_so_and_a_positional_argument_counts(tmp_path):
    construction = "PlainTrainer(build(), training_args)"
    files = {"trainer.py": TRAINER.format(backward=PLAIN), "train.py": TRAIN.format(precision="fp16=True", construction=construction)}
    found, findings = _lint(tmp_path, files)
    assert found == [("train.py", 13, "AMP001")]
    assert "`loss.backward()` (trainer.py:23)" in findings[0]["message"]
    assert "when float16" not in findings[0]["message"]
    # An `__init__(self, *args, teacher=None, **kwargs)` that hands its arguments on to the Trainer's.
    (tmp_path / "train.py").unlink()
    found, _ = _lint(tmp_path, {"train.py": TRAIN.format(precision="fp16=True", construction="DistillationTrainer(build(), training_args)")})
    assert found == [("train.py", 13, "AMP001")]


def test_the_same_modules_warm_from_the_cache(tmp_path):
    files = {"trainer.py": TRAINER.format(backward=PLAIN), "train.py": TRAIN.format(precision="fp16=True", construction=DISTILL)}
    cold, _ = _lint(tmp_path, files, "--cache-dir", str(tmp_path / "cache"))
    warm, _ = _lint(tmp_path, {}, "--cache-dir", str(tmp_path / "cache"))
    assert cold == warm == [("train.py", 13, "AMP001")]


def test_trainer_subclasses_of_another_module_that_stay_clean(tmp_path):
    cases = [
        # The backward the Trainer's scaler expects.
        (TRAINER.format(backward=SCALED), "fp16=True", DISTILL),
        # bfloat16 needs no scaler; fp16 off.
        (TRAINER.format(backward=PLAIN), "bf16=True", DISTILL),
        (TRAINER.format(backward=PLAIN), "fp16=False", DISTILL),
        # No arguments: the Trainer's defaults are float32.
        (TRAINER.format(backward=PLAIN), "fp16=True", "PlainTrainer(model=build(), train_dataset=data)"),
        # Arguments passed by position to an `__init__` that takes other things first: not known to be these.
        (TRAINER.replace("*args, teacher=None", "teacher, *args"), "fp16=True", "DistillationTrainer(build(), training_args)"),
        # Arguments the file does not show built: from the command line.
        (TRAINER.format(backward=PLAIN), "fp16=True", "DistillationTrainer(model=build(), args=parse_arguments())"),
    ]
    for trainer, precision, construction in cases:
        found, _ = _lint(tmp_path, {"trainer.py": trainer, "train.py": TRAIN.format(precision=precision, construction=construction)})
        assert found == [], (precision, construction)


HF_PARSER = """
from transformers import HfArgumentParser, TrainingArguments

from trainer import DistillationTrainer


def main():
    parser = HfArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse_args_into_dataclasses()
    trainer = DistillationTrainer(model=build(model_args), args=training_args)
    trainer.train()
"""


def test_arguments_from_the_command_line_are_unknown(tmp_path):
    # `--fp16` may or may not be given: never guessed.
    found, _ = _lint(tmp_path, {"trainer.py": TRAINER.format(backward=PLAIN), "train.py": HF_PARSER})
    assert found == []


SUBCLASS = """
from trainer import PlainTrainer


class FixedTrainer(PlainTrainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = self.compute_loss(model, self._prepare_inputs(inputs))
        self.accelerator.backward(loss)
        return loss.detach()
"""

SUBCLASS_TRAIN = """
from transformers import TrainingArguments

from fixed import FixedTrainer

trainer = FixedTrainer(model=build(), args=TrainingArguments(output_dir="out", fp16=True))
trainer.train()
"""


def test_a_subclass_that_overrides_the_hook_is_its_own(tmp_path):
    files = {"trainer.py": TRAINER.format(backward=PLAIN), "fixed.py": SUBCLASS, "train.py": SUBCLASS_TRAIN}
    found, _ = _lint(tmp_path, files)
    assert found == []


TRL_LIKE = """
from transformers import Trainer


class SFTTrainer(Trainer):
    def training_step(self, *args, **kwargs):
        with self.maybe_activation_offload_context:
            return super().training_step(*args, **kwargs)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        return (outputs.loss, outputs) if return_outputs else outputs.loss
"""


def test_a_training_step_that_leaves_the_backward_to_the_trainer_is_clean(tmp_path):
    train = TRAIN.replace("from trainer import DistillationTrainer, PlainTrainer", "from sft import SFTTrainer")
    found, _ = _lint(tmp_path, {"sft.py": TRL_LIKE, "train.py": train.format(precision="fp16=True", construction="SFTTrainer(model=m, args=training_args)")})
    assert found == []


# --------------------------------------------------------------------------- framework objects built by a function

FACTORY = """
from accelerate import Accelerator


def build_accelerator(cfg):
    return Accelerator(mixed_precision={precision}, gradient_accumulation_steps=cfg.accumulation)


def accelerator_for(mixed_precision="no", log_with=None):
    accelerator = Accelerator(mixed_precision=mixed_precision, log_with=log_with)
    return accelerator
"""

FACTORY_TRAIN = """
import argparse

import torch

from utils import accelerator_for, build_accelerator


def train(cfg, model, loader):
    parser = argparse.ArgumentParser()
    parser.add_argument("--mixed_precision", choices=["no", "fp16", "bf16"], default="no")
    args = parser.parse_args()
    accelerator = {accelerator}
    weight_dtype = torch.float16 if accelerator.mixed_precision == "fp16" else torch.float32
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x.to(weight_dtype)), y)
        {backward}
        optimizer.step()
        optimizer.zero_grad()
"""


def test_an_accelerator_built_by_a_function_of_another_module(tmp_path):
    # Its precision is in the summary of the function that builds and returns it.
    files = {"utils.py": FACTORY.format(precision='"fp16"'), "train.py": FACTORY_TRAIN.format(accelerator="build_accelerator(cfg)", backward="loss.backward()")}
    found, findings = _lint(tmp_path, files)
    assert found == [("train.py", 18, "AMP001")]
    assert "`accelerator` never scaled" in findings[0]["message"]
    # The precision handed over as a parameter: each caller's argument decides (argparse's choices may be fp16).
    found, _ = _lint(tmp_path, {"train.py": FACTORY_TRAIN.format(accelerator="accelerator_for(args.mixed_precision)", backward="loss.backward()")})
    assert found == [("train.py", 18, "AMP001")]


def test_accelerators_built_by_a_function_of_another_module_that_stay_clean(tmp_path):
    cases = [
        # The backward that scales.
        ('"fp16"', "build_accelerator(cfg)", "accelerator.backward(loss)"),
        # bfloat16, and a precision read from the caller's config: unknown, never guessed.
        ('"bf16"', "build_accelerator(cfg)", "loss.backward()"),
        ("cfg.mixed_precision", "build_accelerator(cfg)", "loss.backward()"),
        # The parameter's default ("no"), and an argument that is not float16.
        ('"fp16"', "accelerator_for()", "loss.backward()"),
        ('"fp16"', 'accelerator_for("bf16")', "loss.backward()"),
    ]
    for precision, accelerator, backward in cases:
        files = {"utils.py": FACTORY.format(precision=precision), "train.py": FACTORY_TRAIN.format(accelerator=accelerator, backward=backward)}
        found, _ = _lint(tmp_path, files)
        assert found == [], (precision, accelerator, backward)


ARGUMENTS_FACTORY = """
from transformers import TrainingArguments


def build_training_args(output_dir):
    return TrainingArguments(output_dir=output_dir, {precision}, gradient_accumulation_steps=4)
"""

TRAINER_AND_MAIN = """
from transformers import Trainer, TrainingArguments

from config import build_training_args


class DistillationTrainer(Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        loss = self.compute_loss(model, self._prepare_inputs(inputs))
        loss.backward()
        return loss.detach()


def main(model, data):
    training_args: TrainingArguments = build_training_args("out")
    DistillationTrainer(model=model, args=training_args, train_dataset=data).train()
"""


def test_training_arguments_built_by_a_function_of_another_module(tmp_path):
    # The subclass and its construction in one module, the arguments built in another.
    found, _ = _lint(tmp_path, {"config.py": ARGUMENTS_FACTORY.format(precision="fp16=True"), "trainer.py": TRAINER_AND_MAIN})
    assert found == [("trainer.py", 9, "AMP001")]
    found, _ = _lint(tmp_path, {"config.py": ARGUMENTS_FACTORY.format(precision="bf16=True")})
    assert found == []


# --------------------------------------------------------------------------- Lightning: the module in one file, the Trainer in another

# No AMP word a rule needs on its own: nothing in it says which precision trains it.
LIT_MODEL = """
import torch
import lightning as L


class LitModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.net = torch.nn.Linear(4, 4)

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.net(batch).sum()
        self.manual_backward(loss)
        {clip}
        opt.step()
        opt.zero_grad()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())


class Head(torch.nn.Module):
    def forward(self, x):
        return x
"""

LIT_TRAIN = """
import argparse

import lightning as L

{imports}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="32-true", choices=["32-true", "16-mixed", "bf16-mixed"])
    args = parser.parse_args()
    trainer = L.Trainer(max_epochs=3, precision={precision})
    trainer.fit({model})


if __name__ == "__main__":
    main()
"""

RAW_CLIP = "torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)"
LIGHTNING_CLIP = "self.clip_gradients(opt, gradient_clip_val=1.0)"
FROM_MODEL = "from model import LitModel"


def _lightning(tmp_path, clip=RAW_CLIP, precision='"16-mixed"', model="LitModel()", imports=FROM_MODEL, *options):
    files = {"model.py": LIT_MODEL.format(clip=clip), "train.py": LIT_TRAIN.format(imports=imports, precision=precision, model=model)}
    return _lint(tmp_path, files, *options)


def test_a_lightning_module_trained_in_float16_by_a_trainer_of_another_module(tmp_path):
    # Reported in the module, where the clip is; the Trainer that train.py builds decides the precision.
    found, findings = _lightning(tmp_path)
    assert found == [("model.py", 15, "AMP003")]
    assert findings[0]["message"].endswith("clips gradients that still carry the loss scale (train.py trains `LitModel` in float16)")
    assert "self.clip_gradients(opt, ...)" in findings[0]["help"]
    # A precision from the command line whose choices include float16.
    found, findings = _lightning(tmp_path, precision="args.precision")
    assert found == [("model.py", 15, "AMP003")]
    assert findings[0]["message"].endswith("when train.py trains `LitModel` in float16")


def test_the_instance_may_be_made_any_way_the_script_names_the_class(tmp_path):
    for imports, model in [
        (FROM_MODEL, 'LitModel.load_from_checkpoint("last.ckpt")'),
        ("import model as models", "models.LitModel()"),
        ("from model import LitModel as Net", "Net()"),
    ]:
        found, _ = _lightning(tmp_path, imports=imports, model=model)
        assert found == [("model.py", 15, "AMP003")], (imports, model)


def test_a_lightning_module_of_another_module_that_stays_clean(tmp_path):
    cases = [
        # Lightning's own clip unscales first.
        dict(clip=LIGHTNING_CLIP),
        # Not float16: bfloat16 needs no scaler, and float32 has none.
        dict(precision='"bf16-mixed"'),
        dict(precision='"32-true"'),
        # A precision the script does not show: unknown, never guessed.
        dict(precision='load_config("train.yaml").precision'),
        # DeepSpeed scales the loss with its own scaler: no GradScaler of the Trainer's.
        dict(precision='"16-mixed", strategy="deepspeed_stage_2"'),
        # The script trains something else: another class of the module, or a model of its own.
        dict(imports="from model import Head", model="Head()"),
        dict(imports="", model="build_model()"),
    ]
    for case in cases:
        found, _ = _lightning(tmp_path, **case)
        assert found == [], case


def test_the_same_lightning_modules_warm_from_the_cache(tmp_path):
    cold, _ = _lightning(tmp_path, RAW_CLIP, '"16-mixed"', "LitModel()", FROM_MODEL, "--cache-dir", str(tmp_path / "cache"))
    warm, _ = _lint(tmp_path, {}, "--cache-dir", str(tmp_path / "cache"))
    assert cold == warm == [("model.py", 15, "AMP003")]


def test_only_what_a_float16_trainer_fits_is_trained_in_float16(tmp_path):
    model = LIT_MODEL.format(clip=RAW_CLIP)
    cases = {
        # Predicted with a float16 Trainer, trained with a float32 one.
        "predict": 'L.Trainer(precision="32-true").fit(LitModel())\nL.Trainer(precision="16-mixed").predict(LitModel.load_from_checkpoint("a.ckpt"))\n',
        # A frozen teacher loaded beside the student the float16 Trainer fits.
        "teacher": 'teacher = LitModel.load_from_checkpoint("t.ckpt")\nL.Trainer(precision="16-mixed").fit(Student(teacher))\n',
        # Two Trainers: the bfloat16 one fits the module, the float16 one something else.
        "two": 'L.Trainer(precision="bf16-mixed").fit(LitModel())\nL.Trainer(precision="16-mixed").fit(Student(None))\n',
    }
    for name, body in cases.items():
        found, _ = _lint(tmp_path / name, {"model.py": model, "train.py": f"import lightning as L\nfrom model import LitModel\nfrom student import Student\n{body}"})
        assert found == [], name


def test_a_module_of_the_same_name_elsewhere_is_not_the_one_trained(tmp_path):
    files = {
        "a/model.py": LIT_MODEL.format(clip=LIGHTNING_CLIP),
        "a/train.py": 'import lightning as L\nfrom model import LitModel\nfrom b.model import Other\nL.Trainer(precision="16-mixed").fit(LitModel())\nOther()\n',
        "b/model.py": LIT_MODEL.format(clip=RAW_CLIP),
    }
    found, _ = _lint(tmp_path, files)
    assert found == []


def test_a_fitted_class_trains_the_base_class_of_its_module_it_derives_from(tmp_path):
    model = LIT_MODEL.format(clip=RAW_CLIP).replace("class LitModel(L.LightningModule):", "class Base(L.LightningModule):") + "\n\nclass LitModel(Base):\n    pass\n"
    found, findings = _lint(tmp_path, {"model.py": model, "train.py": LIT_TRAIN.format(imports=FROM_MODEL, precision='"16-mixed"', model="LitModel()")})
    assert found == [("model.py", 15, "AMP003")]
    assert findings[0]["message"].endswith("(train.py trains `LitModel` in float16)")


def test_the_message_names_a_script_that_surely_trains_in_float16(tmp_path):
    files = {"model.py": LIT_MODEL.format(clip=RAW_CLIP)}
    for script, precision in [("a_finetune.py", "args.precision"), ("b_train.py", '"bf16-mixed"'), ("c_pretrain.py", '"16-mixed"')]:
        files[f"scripts/{script}"] = LIT_TRAIN.format(imports="from model import LitModel", precision=precision, model="LitModel()")
    (tmp_path / "scripts").mkdir()
    found, findings = _lint(tmp_path, files)
    assert found == [("model.py", 15, "AMP003")]
    assert findings[0]["message"].endswith("(scripts/c_pretrain.py trains `LitModel` in float16)")


def test_what_the_script_fits_is_followed_through_names_and_wrappers(tmp_path):
    for model in ["LitModel().to(device)", "torch.compile(LitModel())"]:
        found, _ = _lightning(tmp_path, model=model, imports=f"import torch\n{FROM_MODEL}")
        assert found == [("model.py", 15, "AMP003")], model
    # A DeepSpeed strategy built into a name, and a Trainer name that also holds a float32
    # Trainer when it fits this module (pretrain, then fine-tune): nothing to say.
    quiet = {
        "strategy": 'import lightning as L\nfrom lightning.pytorch.strategies import DeepSpeedStrategy\nfrom model import LitModel\n'
        'strategy = DeepSpeedStrategy(stage=2)\nL.Trainer(precision="16-mixed", strategy=strategy).fit(LitModel())\n',
        "sequence": 'import lightning as L\nfrom model import LitModel\nfrom pre import Pre\n'
        'trainer = L.Trainer(precision="16-mixed")\ntrainer.fit(Pre())\ntrainer = L.Trainer(precision="32-true")\ntrainer.fit(LitModel())\n',
    }
    for name, train in quiet.items():
        found, _ = _lint(tmp_path / name, {"model.py": LIT_MODEL.format(clip=RAW_CLIP), "train.py": train})
        assert found == [], name


def test_the_trainer_that_reaches_the_fit_decides(tmp_path):
    # Fit with a float16 Trainer, then test on one device with a float32 one under the same name.
    fit_then_test = 'import lightning as L\nfrom model import LitModel\nmodel = LitModel()\nmodel = model.to("cuda")\n' \
        'trainer = L.Trainer(precision="16-mixed")\ntrainer.fit(model)\ntrainer = L.Trainer(precision=32, devices=1)\ntrainer.test(model)\n'
    found, findings = _lint(tmp_path / "a", {"model.py": LIT_MODEL.format(clip=RAW_CLIP), "train.py": fit_then_test})
    assert found == [("model.py", 15, "AMP003")]
    assert findings[0]["message"].endswith("(train.py trains `LitModel` in float16)")  # sure: one class, one Trainer
    # A strategy name that may be DeepSpeed's: the GradScaler is one of the possibilities.
    maybe = 'import sys\nimport lightning as L\nfrom lightning.pytorch.strategies import DDPStrategy\nfrom model import LitModel\n' \
        'strategy = "deepspeed_stage_2" if sys.argv[1] else DDPStrategy()\nL.Trainer(precision="16-mixed", strategy=strategy).fit(LitModel())\n'
    found, findings = _lint(tmp_path / "b", {"model.py": LIT_MODEL.format(clip=RAW_CLIP), "train.py": maybe})
    assert found == [("model.py", 15, "AMP003")]
    assert findings[0]["message"].endswith("when train.py trains `LitModel` in float16")


BRANCHES = """import argparse
import lightning as L
from model import LitModel
args = argparse.ArgumentParser().parse_args()
if args.amp:
    trainer = L.Trainer(precision={amp})
else:
    trainer = L.Trainer()
trainer.fit(LitModel())
"""


def test_a_trainer_built_on_branches_may_be_float16(tmp_path):
    """`if args.amp: trainer = L.Trainer(precision="16-mixed") else: trainer = L.Trainer()`: each
    branch's Trainer reaches the fit, so the model may be trained in float16."""
    found, findings = _lint(tmp_path / "a", {"model.py": LIT_MODEL.format(clip=RAW_CLIP), "train.py": BRANCHES.format(amp='"16-mixed"')})
    assert found == [("model.py", 15, "AMP003")]
    assert findings[0]["message"].endswith("when train.py trains `LitModel` in float16")  # on some runs only
    for amp in ('"bf16-mixed"', '"32-true"'):
        assert _lint(tmp_path / amp.strip('"'), {"model.py": LIT_MODEL.format(clip=RAW_CLIP), "train.py": BRANCHES.format(amp=amp)})[0] == []
    # Built again after the fit as well: which object reaches it is not read from the branches.
    later = BRANCHES.format(amp='"16-mixed"') + "trainer = L.Trainer()\ntrainer.test(LitModel())\n"
    assert _lint(tmp_path / "later", {"model.py": LIT_MODEL.format(clip=RAW_CLIP), "train.py": later})[0] == []

