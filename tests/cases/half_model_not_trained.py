"""float16 models that no optimizer updates in float16: the ways real code casts models for
inference, evaluation and export, frozen parts, master-weight wrappers, LoRA adapters upcast
to float32, and a float32 EMA saved as a float16 copy."""
import itertools
from copy import deepcopy

import torch
from apex import amp
from apex.fp16_utils import FP16_Optimizer


def evaluate(model, loader, half):
    if half:
        model.half()
    model.eval()
    with torch.no_grad():
        return [model(x.half() if half else x) for x in loader]


def train_then_export(model, loader):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    model.half()
    torch.onnx.export(model, next(iter(loader)).half(), "model.onnx")


def apex_fp16_optimizer(model, loader):
    model = model.cuda().half()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer = FP16_Optimizer(optimizer, dynamic_loss_scale=True)
    for x in loader:
        optimizer.backward(model(x).sum())
        optimizer.step()


def apex_o2(model, loader):
    model = model.cuda().half()
    optimizer = torch.optim.Adam(model.parameters())
    model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    for x in loader:
        with amp.scale_loss(model(x).sum(), optimizer) as scaled:
            scaled.backward()
        optimizer.step()


def benchmark_or_train(args, model, loader):
    if args.mode == "inference_benchmark":
        if args.amp:
            model = model.half()  # pure float16 for inference
        for x in loader:
            model(x)
        return
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()


def dreambooth(args, accelerator, unet, text_encoder, vae, loader):
    weight_dtype = torch.float32
    if accelerator.mixed_precision == "fp16":
        weight_dtype = torch.float16
    vae.to(accelerator.device, dtype=weight_dtype)
    if not args.train_text_encoder:
        text_encoder.to(accelerator.device, dtype=weight_dtype)
    params_to_optimize = (
        itertools.chain(unet.parameters(), text_encoder.parameters()) if args.train_text_encoder else unet.parameters()
    )
    optimizer = torch.optim.AdamW(params_to_optimize, lr=args.learning_rate)
    for batch in loader:
        accelerator.backward(unet(batch).sum())
        optimizer.step()


def lora(accelerator, unet, lora_config, loader):
    unet.requires_grad_(False)
    unet.to(accelerator.device, dtype=torch.float16)
    unet.add_adapter(lora_config)
    cast_training_params(unet, dtype=torch.float32)
    optimizer = torch.optim.AdamW(filter(lambda p: p.requires_grad, unet.parameters()), lr=1e-4)
    for batch in loader:
        accelerator.backward(unet(batch).sum())
        optimizer.step()


class EMA:
    def __init__(self, model, decay=0.999):
        self.shadow = deepcopy(model)
        self.decay = decay

    def update(self, model):
        with torch.no_grad():
            for s, p in zip(self.shadow.parameters(), model.parameters()):
                s.lerp_(p, 1 - self.decay)

    def save(self, path):
        torch.save({"ema": deepcopy(self.shadow).half().state_dict()}, path)
