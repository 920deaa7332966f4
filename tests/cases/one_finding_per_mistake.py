"""One mistake, one finding: a gradient read before unscale_ inside train() is reported there,
not again at the call under `if __name__ == "__main__":`. A caller whose own code makes an
event wrong (it runs the helper inside its autocast region) keeps its finding."""
import torch


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        norm = sum(p.grad.norm() for p in model.parameters())
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
    return norm


def apply_step(optimizer):
    optimizer.step()


def train_in_one_region(model, optimizer, loader):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for x, y in loader:
            loss = model(x, y)
            loss.backward()
            apply_step(optimizer)
            optimizer.zero_grad()


if __name__ == "__main__":
    train(None, None, [])
