"""A GAN trainer whose one GradScaler is updated after each network's step (twice per
iteration), beside the correct twins: one update after both steps, a scaler per network,
and a loop that trains one network or the other on each iteration."""
import torch
import torch.nn.functional as F


def train_twice(G, D, opt_g, opt_d, loader, device="cuda"):
    scaler = torch.amp.GradScaler(device)
    for real in loader:
        opt_d.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.float16):
            fake = G(torch.randn(real.size(0), 128, device=device))
            d_loss = F.softplus(D(fake.detach())).mean() + F.softplus(-D(real)).mean()
        scaler.scale(d_loss).backward()
        scaler.step(opt_d)
        scaler.update()

        opt_g.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.float16):
            g_loss = F.softplus(-D(fake)).mean()
        scaler.scale(g_loss).backward()
        scaler.step(opt_g)
        scaler.update()


def train_once(G, D, opt_g, opt_d, loader, device="cuda"):
    scaler = torch.amp.GradScaler(device)
    for real in loader:
        with torch.autocast(device_type=device, dtype=torch.float16):
            fake = G(torch.randn(real.size(0), 128, device=device))
            d_loss = F.softplus(D(fake.detach())).mean() + F.softplus(-D(real)).mean()
        scaler.scale(d_loss).backward()
        scaler.step(opt_d)
        with torch.autocast(device_type=device, dtype=torch.float16):
            g_loss = F.softplus(-D(fake)).mean()
        scaler.scale(g_loss).backward()
        scaler.step(opt_g)
        scaler.update()


def train_two_scalers(G, D, opt_g, opt_d, loader, device="cuda"):
    scaler_d = torch.amp.GradScaler(device)
    scaler_g = torch.amp.GradScaler(device)
    for real in loader:
        with torch.autocast(device_type=device, dtype=torch.float16):
            fake = G(torch.randn(real.size(0), 128, device=device))
            d_loss = F.softplus(D(fake.detach())).mean() + F.softplus(-D(real)).mean()
        scaler_d.scale(d_loss).backward()
        scaler_d.step(opt_d)
        scaler_d.update()
        with torch.autocast(device_type=device, dtype=torch.float16):
            g_loss = F.softplus(-D(fake)).mean()
        scaler_g.scale(g_loss).backward()
        scaler_g.step(opt_g)
        scaler_g.update()


def train_alternating(G, D, opt_g, opt_d, loader, device="cuda"):
    scaler = torch.amp.GradScaler(device)
    for i, real in enumerate(loader):
        with torch.autocast(device_type=device, dtype=torch.float16):
            fake = G(torch.randn(real.size(0), 128, device=device))
        if i % 2 == 0:
            with torch.autocast(device_type=device, dtype=torch.float16):
                d_loss = F.softplus(D(fake.detach())).mean() + F.softplus(-D(real)).mean()
            scaler.scale(d_loss).backward()
            scaler.step(opt_d)
            scaler.update()
        else:
            with torch.autocast(device_type=device, dtype=torch.float16):
                g_loss = F.softplus(-D(fake)).mean()
            scaler.scale(g_loss).backward()
            scaler.step(opt_g)
            scaler.update()
