import torch


def train_one_epoch(model, criterion, data_loader, optimizer, device, clip_max_norm=0, scaler=None):
    for samples, targets in data_loader:
        with torch.autocast(device_type="cuda", enabled=scaler is not None):
            outputs = model(samples)
            losses = criterion(outputs, targets)
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(losses).backward()
            if clip_max_norm > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_max_norm)
            scaler.step(optimizer)
            scaler.update()
        else:
            losses.backward()
            if clip_max_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_max_norm)
            optimizer.step()
