"""Adapters an accelerate load-state hook re-creates (issue 24's "diffusers training conventions";
diffusers #6514, #7018): a LoRA script upcasts its adapters after adding them, but the hook it
registers with `accelerator.register_load_state_pre_hook` runs inside `accelerator.load_state(...)`
and builds them anew (`load_lora_into_unet(sd, unet=unet_)`) in the dtype the unet was cast to.
AMP010 reports the creating call in the hook unless something after it there upcasts."""

import pytest

from amplint.lint.engine import lint_text
from rules.amp010_half_precision_master_weights import _RESUMED_LORA

BUGGY = _RESUMED_LORA.format(after="")
CALL = "LoraLoaderMixin.load_lora_into_unet(lora_state_dict, network_alphas=network_alphas, unet=unet_)"


def rows(source):
    return [(f.row, f.code) for f in lint_text(source)]


def test_the_hook_that_recreates_float16_adapters_is_reported_at_its_call():
    findings = lint_text(BUGGY)
    assert [(f.row, f.code) for f in findings] == [(23, "AMP010")]
    message = findings[0].message
    assert "re-creates the adapters of `unet` when `accelerator.load_state(args.resume_from_checkpoint)` runs `load_model_hook`" in message
    assert "cast `unet` to float16 (one of the dtypes it can be)" in message


@pytest.mark.parametrize(
    "picked",
    [
        "unet_ = accelerator.unwrap_model(model)",  # the model unwrapped
        "unet_ = model",
    ],
)
def test_the_module_is_picked_from_the_hooks_models_by_class(picked):
    assert rows(BUGGY.replace("unet_ = model", picked)) == [(23, "AMP010")]


def test_the_picked_model_itself_inside_the_isinstance_test():
    source = BUGGY.replace("                unet_ = model\n", "                LoraLoaderMixin.load_lora_into_unet({}, unet=model)\n")
    assert rows(source) == [(21, "AMP010")]


@pytest.mark.parametrize(
    "change",
    [
        # The hook upcasts what it re-created: a list of its modules, a loop over parameters.
        (CALL, CALL + "\n        cast_training_params([unet_], dtype=torch.float32)"),
        (CALL, CALL + "\n        for p in unet_.parameters():\n            if p.requires_grad:\n                p.data = p.to(torch.float32)"),
        (CALL, CALL + "\n        upcast_lora_params(unet_)"),  # named like a precision change: may be one
        (CALL, CALL + "\n        unet_.to(dtype=torch.float32)"),
        # It loads values into the adapters it has: no new parameter.
        (CALL, "set_peft_model_state_dict(unet_, lora_state_dict, adapter_name='default')"),
        # bfloat16 is left alone, as AMP010 leaves it everywhere.
        ("torch.float16 if", "torch.bfloat16 if"),
        # Never run: no `load_state`, or the hook is never registered.
        ("accelerator.load_state(args.resume_from_checkpoint)", "pass"),
        ("accelerator.register_load_state_pre_hook(load_model_hook)", "pass"),
        # A module the hook did not pick from its models (a fresh float32 copy).
        ("unet=unet_)", "unet=UNet2DConditionModel.from_pretrained(input_dir))"),
        # Another module's class: the adapters of `unet` are not re-created.
        ("type(unwrap_model(unet))", "type(unwrap_model(text_encoder))"),
    ],
)
def test_what_upcasts_keeps_or_never_runs_stays_clean(change):
    old, new = change
    assert old in BUGGY
    assert rows(BUGGY.replace(old, new)) == []


def test_a_load_state_before_the_cast_runs_the_hook_on_float32_adapters():
    moved = BUGGY.replace("    if args.resume_from_checkpoint:\n        accelerator.load_state(args.resume_from_checkpoint)\n", "")
    moved = moved.replace("    unet.requires_grad_(False)\n", "    accelerator.load_state(args.resume_from_checkpoint)\n    unet.requires_grad_(False)\n")
    assert rows(moved) == []
