# The loss is computed outside the float16 region from what the region produced: the
# backward still runs on float16 activations, and no scaler protects the gradients.
import torch


def train(model, loader, opt, criterion):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
        loss = criterion(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


def train_bf16(model, loader, opt, criterion):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = criterion(out.float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


def train_scaled(model, loader, opt, criterion, scaler: torch.amp.GradScaler):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            logits = model(x)
        loss = criterion(logits.float(), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
