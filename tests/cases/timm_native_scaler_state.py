# timm's NativeScaler wraps a GradScaler the training code owns: its state belongs in the
# checkpoint beside the optimizer's, and building it again every epoch resets the scale.
import torch
from timm.utils import NativeScaler


def main(model, loader, optimizer, loss_fn):
    loss_scaler = NativeScaler()
    for epoch in range(10):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x), y)
            loss_scaler(loss, optimizer)
            optimizer.zero_grad()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "x.pt")


def per_epoch(model, loader, optimizer, loss_fn):
    for epoch in range(10):
        loss_scaler = NativeScaler()
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x), y)
            loss_scaler(loss, optimizer)
            optimizer.zero_grad()


def handed_to_a_saver(model, loader, optimizer, loss_fn, saver_cls):
    # Handed to a checkpointing object (timm's CheckpointSaver(amp_scaler=...)): kept.
    loss_scaler = NativeScaler()
    saver = saver_cls(model=model, optimizer=optimizer, amp_scaler=loss_scaler)
    for epoch in range(10):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = loss_fn(model(x), y)
            loss_scaler(loss, optimizer)
            optimizer.zero_grad()
        saver.save_checkpoint(epoch)
        torch.save({"optimizer": optimizer.state_dict()}, "last.pt")
