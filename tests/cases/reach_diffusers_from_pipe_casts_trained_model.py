# diffusers' `from_pipe(pipeline, torch_dtype=...)` builds a pipeline that shares the modules of
# `pipeline` and casts them all in place to `torch_dtype`: a validation pipeline derived from
# one that holds the unet being trained casts that very unet to float16, and the next optimizer
# steps update float16 parameters. A pipeline built from frozen modules only, one derived
# without a dtype, and bfloat16 stay clean.
import torch
from accelerate import Accelerator
from diffusers import AutoPipelineForImage2Image, DiffusionPipeline, StableDiffusionPipeline


def log_validation(pipeline, args, accelerator, weight_dtype):
    img2img = AutoPipelineForImage2Image.from_pipe(pipeline, torch_dtype=weight_dtype)
    img2img = img2img.to(accelerator.device)
    with torch.no_grad():
        return img2img(args.validation_prompt, image=args.validation_image).images


def train(args, unet, vae, text_encoder, loader, noise_loss):
    accelerator = Accelerator(mixed_precision=args.mixed_precision)
    weight_dtype = torch.float16 if accelerator.mixed_precision == "fp16" else torch.float32
    vae.requires_grad_(False)
    text_encoder.requires_grad_(False)
    optimizer = torch.optim.AdamW(unet.parameters(), lr=args.learning_rate)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for step, batch in enumerate(loader):
        accelerator.backward(noise_loss(unet, vae, text_encoder, batch))
        optimizer.step()
        optimizer.zero_grad()
        if step % args.validation_steps == 0:
            pipeline = StableDiffusionPipeline.from_pretrained(
                args.pretrained_model_name_or_path, unet=accelerator.unwrap_model(unet), vae=vae, text_encoder=text_encoder
            )
            log_validation(pipeline, args, accelerator, weight_dtype)


def train_inline(args, unet, loader, noise_loss):
    accelerator = Accelerator(mixed_precision="fp16")
    optimizer = torch.optim.AdamW(unet.parameters(), lr=args.learning_rate)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    base = DiffusionPipeline.from_pretrained(args.pretrained_model_name_or_path)
    for step, batch in enumerate(loader):
        accelerator.backward(noise_loss(unet, batch))
        optimizer.step()
        optimizer.zero_grad()
        if step % args.validation_steps == 0:
            # The trained unet handed over by keyword is cast with the rest.
            pipe = DiffusionPipeline.from_pipe(base, unet=accelerator.unwrap_model(unet), torch_dtype=torch.float16)
            pipe(args.validation_prompt)


# ---- correct code


def log_validation_frozen(vae, text_encoder, args, accelerator, weight_dtype):
    # Only frozen modules in the pipeline the new one is derived from.
    pipeline = StableDiffusionPipeline.from_pretrained(args.pretrained_model_name_or_path, vae=vae, text_encoder=text_encoder)
    img2img = AutoPipelineForImage2Image.from_pipe(pipeline, torch_dtype=weight_dtype)
    return img2img(args.validation_prompt, image=args.validation_image).images


def log_validation_no_dtype(pipeline, args):
    img2img = AutoPipelineForImage2Image.from_pipe(pipeline)
    return img2img(args.validation_prompt, image=args.validation_image).images


def log_validation_bf16(pipeline, args):
    img2img = AutoPipelineForImage2Image.from_pipe(pipeline, torch_dtype=torch.bfloat16)
    return img2img(args.validation_prompt, image=args.validation_image).images


def train_clean(args, unet, vae, text_encoder, loader, noise_loss):
    accelerator = Accelerator(mixed_precision="fp16")
    weight_dtype = torch.float16
    optimizer = torch.optim.AdamW(unet.parameters(), lr=args.learning_rate)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for step, batch in enumerate(loader):
        accelerator.backward(noise_loss(unet, vae, text_encoder, batch))
        optimizer.step()
        optimizer.zero_grad()
        if step % args.validation_steps == 0:
            log_validation_frozen(vae, text_encoder, args, accelerator, weight_dtype)
            pipeline = StableDiffusionPipeline.from_pretrained(args.pretrained_model_name_or_path, unet=unet)
            log_validation_no_dtype(pipeline, args)
            log_validation_bf16(pipeline, args)


if __name__ == "__main__":
    arguments = parse_args()
    train(arguments, *load_models(arguments), make_loader(arguments), noise_loss=diffusion_loss)
    train_inline(arguments, load_unet(arguments), make_loader(arguments), noise_loss=diffusion_loss)
    train_clean(arguments, *load_models(arguments), make_loader(arguments), noise_loss=diffusion_loss)
