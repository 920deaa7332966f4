"""LoRA training scripts that keep their trainable parameters float32 beside a float16 base
model: the trainable parameters upcast after the adapters are added (diffusers'
`cast_training_params`, or the loop it replaced), peft's `get_peft_model` (which upcasts float16
adapters itself), bfloat16 or float32 only, an inference-only adapter, and a frozen model with
no adapter at all (nothing trainable is float16)."""
import torch
from accelerate import Accelerator
from diffusers.training_utils import cast_training_params
from peft import LoraConfig, get_peft_model

accelerator = Accelerator(mixed_precision="fp16")


def upcast_with_cast_training_params(args, unet, text_encoder_one, text_encoder_two, loader):
    unet.requires_grad_(False)
    weight_dtype = torch.float32
    if accelerator.mixed_precision == "fp16":
        weight_dtype = torch.float16
    unet.to(accelerator.device, dtype=weight_dtype)
    text_encoder_one.to(accelerator.device, dtype=weight_dtype)
    text_encoder_two.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(LoraConfig(r=4, target_modules=["to_k", "to_q", "to_v"]))
    if args.train_text_encoder:
        text_encoder_one.add_adapter(LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
        text_encoder_two.add_adapter(LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    if args.mixed_precision == "fp16":
        models = [unet]
        if args.train_text_encoder:
            models.extend([text_encoder_one, text_encoder_two])
        # only upcast trainable parameters (LoRA) into fp32
        cast_training_params(models, dtype=torch.float32)
    params = list(filter(lambda p: p.requires_grad, unet.parameters()))
    if args.train_text_encoder:
        params += list(filter(lambda p: p.requires_grad, text_encoder_one.parameters()))
        params += list(filter(lambda p: p.requires_grad, text_encoder_two.parameters()))
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for batch in loader:
        accelerator.backward(unet(batch).sample.float().mean())
        optimizer.step()
        optimizer.zero_grad()


def upcast_in_a_loop(args, unet, text_encoder, loader):
    unet.requires_grad_(False)
    weight_dtype = torch.float16 if args.mixed_precision == "fp16" else torch.float32
    unet.to(accelerator.device, dtype=weight_dtype)
    text_encoder.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(LoraConfig(r=4, target_modules=["to_k", "to_q", "to_v"]))
    if args.train_text_encoder:
        text_encoder.add_adapter(LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    if args.mixed_precision == "fp16":
        models = [unet]
        if args.train_text_encoder:
            models.extend([text_encoder])
        for model in models:
            for param in model.parameters():
                if param.requires_grad:
                    param.data = param.to(torch.float32)
    params = list(filter(lambda p: p.requires_grad, unet.parameters()))
    if args.train_text_encoder:
        params += list(filter(lambda p: p.requires_grad, text_encoder.parameters()))
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for batch in loader:
        accelerator.backward(unet(batch).sample.float().mean())
        optimizer.step()
        optimizer.zero_grad()


def peft_model(model, loader):
    # get_peft_model upcasts float16 and bfloat16 adapters to float32 (autocast_adapter_dtype)
    model.half()
    model = get_peft_model(model, LoraConfig(r=8, target_modules=["q", "v"]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    optimizer = accelerator.prepare(optimizer)
    for x in loader:
        accelerator.backward(model(x).mean())
        optimizer.step()


def bfloat16_or_float32(args, unet, loader):
    unet.requires_grad_(False)
    weight_dtype = torch.bfloat16 if args.mixed_precision == "bf16" else torch.float32
    unet.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(LoraConfig(r=4, target_modules=["to_k", "to_q", "to_v"]))
    optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, unet.parameters()), lr=1e-4)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for batch in loader:
        accelerator.backward(unet(batch).sample.float().mean())
        optimizer.step()


def frozen_without_adapters(unet, controlnet, loader):
    # only the float32 controlnet trains; the float16 unet is frozen and gets no adapter
    unet.requires_grad_(False)
    unet.to(accelerator.device, dtype=torch.float16)
    params = list(filter(lambda p: p.requires_grad, unet.parameters())) + list(controlnet.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    controlnet, optimizer, loader = accelerator.prepare(controlnet, optimizer, loader)
    for batch in loader:
        accelerator.backward(unet(batch, controlnet(batch)).sample.float().mean())
        optimizer.step()


def inference_with_adapters(pipeline, unet, prompts):
    unet.to(accelerator.device, dtype=torch.float16)
    unet.add_adapter(LoraConfig(r=4, target_modules=["to_k", "to_q", "to_v"]))
    with torch.no_grad():
        return [pipeline(prompt).images[0] for prompt in prompts]
