# The diffusers tutorial layout: a config class whose default is "fp16", an Accelerator built
# from it, and a loop that steps inside accelerator.autocast().
from dataclasses import dataclass

import torch
from accelerate import Accelerator


@dataclass
class TrainingConfig:
    image_size: int = 128
    learning_rate: float = 1e-4
    mixed_precision: str = "fp16"  # `no` for float32, `fp16` for automatic mixed precision


config = TrainingConfig()


def train_loop(model, noise_scheduler, optimizer, loader):
    accelerator = Accelerator(mixed_precision=config.mixed_precision)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for clean_images in loader:
        noise = torch.randn(clean_images.shape, device=clean_images.device)
        with accelerator.autocast():
            noise_pred = model(noise_scheduler.add_noise(clean_images, noise))
            loss = torch.nn.functional.mse_loss(noise_pred, noise)
            accelerator.backward(loss)
            optimizer.step()
        optimizer.zero_grad()


def train_loop_right(model, noise_scheduler, optimizer, loader):
    accelerator = Accelerator(mixed_precision=config.mixed_precision)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for clean_images in loader:
        noise = torch.randn(clean_images.shape, device=clean_images.device)
        with accelerator.autocast():
            noise_pred = model(noise_scheduler.add_noise(clean_images, noise))
            loss = torch.nn.functional.mse_loss(noise_pred, noise)
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
