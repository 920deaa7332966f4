# diffusers-style training scripts that cast the model being trained to `weight_dtype`
# (float16 under `--mixed_precision fp16`) inside a validation helper called from the training
# loop: the next optimizer steps update float16 parameters (with accelerate's GradScaler, the
# next `unscale_` raises "Attempting to unscale FP16 gradients"; diffusers #13895). A pipeline
# built from the live `unet` holds that very module, so `pipeline.to(dtype=...)` casts it too.
# Frozen modules cast to `weight_dtype`, `from_pretrained(torch_dtype=...)` (which keeps the
# modules it is handed as they are), a deep copy, a validation run only after training, and
# bfloat16 stay clean.
import copy

import torch
from accelerate import Accelerator
from diffusers import DiffusionPipeline, StableDiffusionPipeline
from diffusers.training_utils import cast_training_params


def log_validation(pipeline, args, accelerator, epoch, torch_dtype):
    pipeline = pipeline.to(accelerator.device, dtype=torch_dtype)
    pipeline.set_progress_bar_config(disable=True)
    with torch.no_grad():
        images = [pipeline(args.validation_prompt).images[0] for _ in range(args.num_validation_images)]
    del pipeline
    return images


def train_lora(args, unet, vae, text_encoder, loader, noise_loss):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)

    def unwrap_model(model):
        model = accelerator.unwrap_model(model)
        return model._orig_mod if hasattr(model, "_orig_mod") else model

    unet.requires_grad_(False)
    vae.requires_grad_(False)
    weight_dtype = torch.float32
    if accelerator.mixed_precision == "fp16":
        weight_dtype = torch.float16
    elif accelerator.mixed_precision == "bf16":
        weight_dtype = torch.bfloat16
    unet.to(accelerator.device, dtype=weight_dtype)
    vae.to(accelerator.device, dtype=weight_dtype)
    text_encoder.to(accelerator.device, dtype=weight_dtype)
    unet.add_adapter(args.lora_config)
    if args.mixed_precision == "fp16":
        cast_training_params(unet, dtype=torch.float32)
    params = list(filter(lambda p: p.requires_grad, unet.parameters()))
    optimizer = torch.optim.AdamW(params, lr=args.learning_rate)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for epoch in range(args.num_train_epochs):
        for batch in loader:
            with accelerator.accumulate(unet):
                loss = noise_loss(unet, vae, text_encoder, batch)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        if args.validation_prompt is not None and epoch % args.validation_epochs == 0:
            pipeline = DiffusionPipeline.from_pretrained(
                args.pretrained_model_name_or_path,
                unet=unwrap_model(unet),
                text_encoder=text_encoder,
                torch_dtype=weight_dtype,
            )
            log_validation(pipeline, args, accelerator, epoch, torch_dtype=weight_dtype)


def evaluate(unet, vae, args, weight_dtype):
    unet.to(dtype=weight_dtype)
    vae.to(dtype=weight_dtype)
    with torch.no_grad():
        return sample(unet, vae, args)


def train_full(args, unet, vae, loader, noise_loss):
    accelerator = Accelerator(mixed_precision="fp16")
    weight_dtype = torch.float16 if accelerator.mixed_precision == "fp16" else torch.float32
    vae.requires_grad_(False)
    vae.to(accelerator.device, dtype=weight_dtype)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=args.learning_rate)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for step, batch in enumerate(loader):
        accelerator.backward(noise_loss(unet, vae, batch))
        optimizer.step()
        optimizer.zero_grad()
        if step % args.validation_steps == 0:
            evaluate(accelerator.unwrap_model(unet), vae, args, weight_dtype)


# ---- correct code


def log_validation_frozen(vae, text_encoder, unet, args, accelerator, weight_dtype):
    # The frozen parts are cast; the trained unet is handed over as it is (from_pretrained
    # loads what it is not handed in torch_dtype and keeps the rest).
    vae.to(accelerator.device, dtype=weight_dtype)
    text_encoder.to(accelerator.device, dtype=weight_dtype)
    pipeline = StableDiffusionPipeline.from_pretrained(
        args.pretrained_model_name_or_path,
        vae=vae,
        text_encoder=text_encoder,
        unet=accelerator.unwrap_model(unet),
        torch_dtype=weight_dtype,
    )
    pipeline = pipeline.to(accelerator.device)
    return pipeline(args.validation_prompt).images


def log_validation_copy(unet, args, accelerator, weight_dtype):
    # A copy of the trained unet is cast, not the unet itself.
    pipeline = StableDiffusionPipeline.from_pretrained(
        args.pretrained_model_name_or_path, unet=copy.deepcopy(accelerator.unwrap_model(unet))
    )
    pipeline.to(accelerator.device, dtype=weight_dtype)
    return pipeline(args.validation_prompt).images


def log_final(unet, args, accelerator, weight_dtype):
    pipeline = StableDiffusionPipeline.from_pretrained(args.pretrained_model_name_or_path, unet=unet)
    pipeline.to(accelerator.device, dtype=weight_dtype)
    return pipeline(args.validation_prompt).images


def train_then_validate(args, unet, vae, text_encoder, loader, noise_loss):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    weight_dtype = torch.float16 if accelerator.mixed_precision == "fp16" else torch.float32
    optimizer = torch.optim.AdamW(unet.parameters(), lr=args.learning_rate)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for step, batch in enumerate(loader):
        accelerator.backward(noise_loss(unet, vae, batch))
        optimizer.step()
        optimizer.zero_grad()
        if step % args.validation_steps == 0:
            log_validation_frozen(vae, text_encoder, unet, args, accelerator, weight_dtype)
            log_validation_copy(unet, args, accelerator, weight_dtype)
    # Training is over: the cast serves inference only.
    log_final(accelerator.unwrap_model(unet), args, accelerator, weight_dtype)


def log_validation_bf16(pipeline, args, accelerator, torch_dtype):
    pipeline = pipeline.to(accelerator.device, dtype=torch_dtype)
    return pipeline(args.validation_prompt).images


def bf16_validation(args, unet, loader, noise_loss):
    accelerator = Accelerator(mixed_precision="bf16")
    weight_dtype = torch.bfloat16
    optimizer = torch.optim.AdamW(unet.parameters(), lr=args.learning_rate)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for step, batch in enumerate(loader):
        accelerator.backward(noise_loss(unet, batch))
        optimizer.step()
        optimizer.zero_grad()
        if step % args.validation_steps == 0:
            pipeline = StableDiffusionPipeline.from_pretrained(args.pretrained_model_name_or_path, unet=unet)
            log_validation_bf16(pipeline, args, accelerator, torch_dtype=weight_dtype)


if __name__ == "__main__":
    arguments = parse_args()
    train_lora(arguments, *load_models(arguments), make_loader(arguments), noise_loss=diffusion_loss)
    train_then_validate(arguments, *load_models(arguments), make_loader(arguments), noise_loss=diffusion_loss)
