"""A GradScaler stepped every iteration and updated once per epoch (the second step raises),
beside a GAN loop whose two scalers are each updated, and a trainer whose update sits in a
helper under the same condition as its step."""
import torch
import torch.nn as nn


def train(model, loader, optimizer, epochs, device="cuda"):
    scaler = torch.amp.GradScaler(device)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        for images, labels in loader:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device, dtype=torch.float16):
                loss = criterion(model(images.to(device)), labels.to(device))
            scaler.scale(loss).backward()
            scaler.step(optimizer)
        scaler.update()


def train_gan(generator, discriminator, loader, opt_g, opt_d, noise):
    scaler_g = torch.amp.GradScaler("cuda")
    scaler_d = torch.amp.GradScaler("cuda")
    for real in loader:
        with torch.autocast("cuda"):
            fake = generator(noise())
            d_loss = discriminator(real).mean() - discriminator(fake.detach()).mean()
        scaler_d.scale(d_loss).backward()
        scaler_d.step(opt_d)
        scaler_d.update()
        with torch.autocast("cuda"):
            g_loss = -discriminator(fake).mean()
        scaler_g.scale(g_loss).backward()
        scaler_g.step(opt_g)
        scaler_g.update()


class Trainer:
    def __init__(self, model, optimizer, accumulation=4):
        self.model = model
        self.optimizer = optimizer
        self.accumulation = accumulation
        self.scaler = torch.amp.GradScaler("cuda")

    def apply(self):
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()

    def fit(self, loader):
        for i, batch in enumerate(loader):
            with torch.autocast("cuda"):
                loss = self.model(batch).mean() / self.accumulation
            self.scaler.scale(loss).backward()
            if (i + 1) % self.accumulation == 0:
                self.apply()
