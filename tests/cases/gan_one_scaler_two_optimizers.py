import torch
import torch.nn.functional as F

scaler = torch.amp.GradScaler("cuda")
for real in loader:
    opt_d.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        fake = G(torch.randn(real.size(0), 128, device="cuda"))
        d_loss = F.softplus(D(fake.detach())).mean() + F.softplus(-D(real)).mean()
    scaler.scale(d_loss).backward()
    scaler.step(opt_d)

    opt_g.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        g_loss = F.softplus(-D(fake)).mean()
    scaler.scale(g_loss).backward()
    scaler.step(opt_g)
    scaler.update()
