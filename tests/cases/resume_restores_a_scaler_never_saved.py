"""--resume restores the scaler from the checkpoint, but the checkpoint never saves it."""
import torch

scaler = torch.amp.GradScaler("cuda")
if resume_path:
    ckpt = torch.load(resume_path)
    optimizer.load_state_dict(ckpt["optimizer"])
    if "scaler" in ckpt:
        scaler.load_state_dict(ckpt["scaler"])
for epoch in range(epochs):
    train_one_epoch(model, loader, optimizer, scaler)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
