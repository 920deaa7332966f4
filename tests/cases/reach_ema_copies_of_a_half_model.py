# EMAs copied from a model that was cast to float16 before the copy: the copy has the model's
# dtype, and an in-place decay close to 1 rounds away in float16 (the EMA stays frozen). The
# model itself keeps float32 master weights in an apex or DeepSpeed optimizer, so only the
# EMA is wrong. Copies made before the cast, copies cast to float32, bfloat16 and float32
# models stay clean.
import copy

import deepspeed
import torch
from apex.fp16_utils import FP16_Optimizer


def ema_dict(model, loader, decay=0.999):
    model = model.cuda().half()
    optimizer = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=0.1), dynamic_loss_scale=True)
    ema_params = {name: p.detach().clone() for name, p in model.named_parameters()}
    for x in loader:
        optimizer.backward(model(x).sum())
        optimizer.step()
        with torch.no_grad():
            for name, param in model.named_parameters():
                ema_params[name].mul_(decay).add_(param, alpha=1 - decay)


def update_ema(ema_model, model, decay):
    with torch.no_grad():
        for ema_p, p in zip(ema_model.parameters(), model.parameters()):
            ema_p.mul_(decay).add_(p.detach(), alpha=1 - decay)


def ema_deepcopy(args, model, loader):
    weight_dtype = torch.float16 if args.mixed_precision == "fp16" else torch.float32
    model.to(weight_dtype)
    engine, _, _, _ = deepspeed.initialize(model=model, config=args.ds_config)
    ema_model = copy.deepcopy(model)
    for x in loader:
        engine.backward(engine(x).sum())
        engine.step()
        update_ema(ema_model, model, 0.9999)


class ListEMA:
    def __init__(self, model, decay=0.9999):
        self.shadow = [p.detach().clone() for p in model.parameters()]
        self.decay = decay

    def update(self, model):
        with torch.no_grad():
            for s, p in zip(self.shadow, model.parameters()):
                s.mul_(self.decay).add_(p, alpha=1 - self.decay)


def ema_list(model, loader):
    model.half()
    optimizer = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ema = ListEMA(model)
    for x in loader:
        optimizer.backward(model(x).sum())
        optimizer.step()
        ema.update(model)


# ---- correct code


def ema_copied_before_export(model, loader, decay=0.999):
    # The EMA is copied from the float32 model; the float16 cast is for export, after training.
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ema = copy.deepcopy(model)
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        with torch.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(decay).add_(p, alpha=1 - decay)
    model.half()
    torch.onnx.export(model, x.half(), "model.onnx")


def float32_ema_of_a_half_model(model, loader, decay=0.999):
    # The recommended fix: the EMA's tensors are float32 copies.
    model = model.cuda().half()
    optimizer = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ema_params = {name: p.detach().clone().float() for name, p in model.named_parameters()}
    ema_model = copy.deepcopy(model).float()
    for x in loader:
        optimizer.backward(model(x).sum())
        optimizer.step()
        with torch.no_grad():
            for name, param in model.named_parameters():
                ema_params[name].mul_(decay).add_(param.float(), alpha=1 - decay)
            for e, p in zip(ema_model.parameters(), model.parameters()):
                e.mul_(decay).add_(p.float(), alpha=1 - decay)


def bfloat16_ema(model, loader):
    # bfloat16 is left alone, as for the model.
    model.to(torch.bfloat16)
    optimizer = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ema = copy.deepcopy(model)
    for x in loader:
        optimizer.backward(model(x).sum())
        optimizer.step()
        update_ema(ema, model, 0.999)


def float32_dict_ema(model, loader, decay=0.999):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ema_params = {name: p.detach().clone() for name, p in model.named_parameters()}
    for x in loader:
        model(x).sum().backward()
        optimizer.step()
        with torch.no_grad():
            for name, param in model.named_parameters():
                ema_params[name].mul_(decay).add_(param, alpha=1 - decay)


class ParametersMadeFloat32EMA:
    # Each parameter of the copy assigned a float32 tensor (`p.data = p.data.float()`): the
    # copy is float32 whatever the model was.
    def __init__(self, model, decay=0.9999):
        self.ema = copy.deepcopy(model)
        for p in self.ema.parameters():
            p.data = p.data.float()
            p.requires_grad_(False)
        self.decay = decay

    def update(self, model):
        with torch.no_grad():
            for e, p in zip(self.ema.parameters(), model.parameters()):
                e.mul_(self.decay).add_(p.float(), alpha=1 - self.decay)


def ema_made_float32_parameter_by_parameter(model, loader):
    model = model.cuda().half()
    optimizer = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    ema = ParametersMadeFloat32EMA(model)
    for x in loader:
        optimizer.backward(model(x).sum())
        optimizer.step()
        ema.update(model)
