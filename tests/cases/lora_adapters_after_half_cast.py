"""LoRA training scripts that add adapters to a model already cast to float16 and train them as
they are: peft builds the adapters in the dtype of the layers they wrap, so the only trainable
parameters are float16 (diffusers' text-to-image and DreamBooth LoRA scripts before #6086, #6119
and #6245: "Attempting to unscale FP16 gradients" with accelerate's fp16 GradScaler)."""
import torch
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model, inject_adapter_in_model

accelerator = Accelerator(mixed_precision="fp16")


def text_to_image_lora(args, unet, vae, text_encoder, loader):
    unet.requires_grad_(False)
    vae.requires_grad_(False)
    text_encoder.requires_grad_(False)
    weight_dtype = torch.float32
    if accelerator.mixed_precision == "fp16":
        weight_dtype = torch.float16
    elif accelerator.mixed_precision == "bf16":
        weight_dtype = torch.bfloat16
    unet.to(accelerator.device, dtype=weight_dtype)
    vae.to(accelerator.device, dtype=weight_dtype)
    text_encoder.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(LoraConfig(r=args.rank, init_lora_weights="gaussian", target_modules=["to_k", "to_q", "to_v", "to_out.0"]))
    lora_layers = filter(lambda p: p.requires_grad, unet.parameters())
    optimizer = torch.optim.AdamW(lora_layers, lr=args.learning_rate)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(unet):
            latents = vae.encode(batch["pixel_values"].to(dtype=weight_dtype)).latent_dist.sample()
            hidden = text_encoder(batch["input_ids"])[0]
            loss = (unet(latents, hidden).sample - latents).pow(2).mean()
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()


def dreambooth_lora(args, unet, text_encoder, loader):
    unet.requires_grad_(False)
    text_encoder.requires_grad_(False)
    weight_dtype = torch.float16 if args.mixed_precision == "fp16" else torch.float32
    unet.to(accelerator.device, dtype=weight_dtype)
    text_encoder.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(LoraConfig(r=4, target_modules=["to_k", "to_q", "to_v"]))
    if args.train_text_encoder:
        text_encoder.add_adapter(LoraConfig(r=4, target_modules=["q_proj", "k_proj", "v_proj"]))
    params = list(filter(lambda p: p.requires_grad, unet.parameters()))
    if args.train_text_encoder:
        params += list(filter(lambda p: p.requires_grad, text_encoder.parameters()))
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    unet, text_encoder, optimizer, loader = accelerator.prepare(unet, text_encoder, optimizer, loader)
    for batch in loader:
        loss = unet(batch["latents"], text_encoder(batch["ids"])[0]).sample.float().pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def peft_injected(model, loader):
    # peft's own injection, and `get_peft_model` told not to upcast the adapters
    model.half()
    inject_adapter_in_model(LoraConfig(r=8, target_modules=["q", "v"]), model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    optimizer = accelerator.prepare(optimizer)
    for x in loader:
        accelerator.backward(model(x).mean())
        optimizer.step()


def peft_no_autocast(model, loader):
    model = model.to(torch.float16)
    model = get_peft_model(model, LoraConfig(r=8), autocast_adapter_dtype=False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    optimizer = accelerator.prepare(optimizer)
    for x in loader:
        accelerator.backward(model(x).mean())
        optimizer.step()
