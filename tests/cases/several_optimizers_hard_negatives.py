"""Several optimizers where the scaler's protocol does not apply or holds: a disabled
GradScaler updated per optimizer (it does nothing), accelerate stepping each optimizer it
prepared (its scaler updates itself), a bfloat16 run that logs a scaler's disabled scale, and
two scalers, one per network, each stepped and updated once."""
import torch
from accelerate import Accelerator

scaler = torch.amp.GradScaler("cuda", enabled=False)
for x in loader:
    for optimizer, loss_fn in zip(optimizers, losses):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(x)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.step(optimizer)
        scaler.update()
        print(scaled.item())

accelerator = Accelerator(mixed_precision="fp16")
model, opt_g, opt_d = accelerator.prepare(model, opt_g, opt_d)
for x in loader:
    for optimizer, loss_fn in zip([opt_d, opt_g], [d_loss, g_loss]):
        accelerator.backward(loss_fn(x))
        optimizer.step()
        optimizer.zero_grad()

scaler_d = torch.amp.GradScaler("cuda")
scaler_g = torch.amp.GradScaler("cuda")
for x in loader:
    with torch.autocast("cuda"):
        d = d_loss(x)
    scaler_d.scale(d).backward()
    scaler_d.unscale_(opt_d)
    torch.nn.utils.clip_grad_norm_(discriminator.parameters(), 1.0)
    scaler_d.step(opt_d)
    scaler_d.update()
    with torch.autocast("cuda"):
        g = g_loss(x)
    scaler_g.scale(g).backward()
    scaler_g.unscale_(opt_g)
    torch.nn.utils.clip_grad_norm_(generator.parameters(), 1.0)
    scaler_g.step(opt_g)
    scaler_g.update()
