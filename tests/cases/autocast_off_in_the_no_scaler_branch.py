# autocast(enabled=scaler is not None) spans the loop: the scaler branch really runs backward and
# step under autocast; the `else` branch runs with autocast off and is not flagged.
import torch


def train_one_epoch(model, optimizer, loader, scaler=None):
    with torch.autocast("cuda", enabled=scaler is not None):
        for x, y in loader:
            loss = model(x, y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
