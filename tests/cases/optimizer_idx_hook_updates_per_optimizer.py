"""A LightningModule GAN (Lightning 1.x manual AMP) with a scaler of its own: `optimizer_step`
runs once per optimizer (its `optimizer_idx`: 0 for the discriminator, 1 for the generator)
and updates the scaler every time; the twin below updates only for the last optimizer."""
import torch
import lightning as L
class GAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.scaler = torch.amp.GradScaler("cuda")
    def training_step(self, batch, batch_idx, optimizer_idx):
        if optimizer_idx == 0:
            loss = self.d_loss(batch)
        if optimizer_idx == 1:
            loss = self.g_loss(batch)
        self.scaler.scale(loss).backward()
        return loss
    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure=None, **kwargs):
        optimizer_closure()
        self.scaler.step(optimizer)
        self.scaler.update()
        optimizer.zero_grad()


class GoodGAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.scaler = torch.amp.GradScaler("cuda")
    def training_step(self, batch, batch_idx, optimizer_idx):
        if optimizer_idx == 0:
            loss = self.d_loss(batch)
        if optimizer_idx == 1:
            loss = self.g_loss(batch)
        self.scaler.scale(loss).backward()
        return loss
    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure=None, **kwargs):
        optimizer_closure()
        self.scaler.step(optimizer)
        if optimizer_idx == 1:
            self.scaler.update()
        optimizer.zero_grad()
