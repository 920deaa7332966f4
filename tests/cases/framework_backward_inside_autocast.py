import lightning as L
import torch
from accelerate import Accelerator
from lightning.fabric import Fabric

accelerator = Accelerator(mixed_precision="fp16")
fabric = Fabric(precision="bf16-mixed")
plain = Accelerator(mixed_precision="no")


def accelerate_backward_inside(model, optimizer, loader):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x in loader:
        with accelerator.autocast():
            loss = model(x)
            accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def accelerate_backward_inside_torch_autocast(model, optimizer, loader):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
            accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def accelerate_backward_after(model, optimizer, loader):
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x in loader:
        with accelerator.autocast():
            loss = model(x)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def full_precision_accelerator(model, optimizer, loader):
    for x in loader:
        with plain.autocast():
            loss = model(x)
            plain.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


def fabric_backward_inside(model, optimizer, loader):
    model, optimizer = fabric.setup(model, optimizer)
    for x in loader:
        with fabric.autocast():
            loss = model(x)
            fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()


class ManualModule(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.net(batch).mean()
            self.manual_backward(loss)
        opt.step()
        opt.zero_grad()

    def validation_step(self, batch, batch_idx):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.net(batch).mean()
        self.manual_backward(loss)
