"""animl-py's bug before its fix: the epoch function builds the GradScaler under a flag, so
every epoch starts again at 65536 while the optimizer carries on; and a second script where
the scaler is built in the epoch loop itself."""
import torch
import torch.nn as nn
from torch.amp import GradScaler, autocast


def train_func(data_loader, model, optimizer, scheduler, device="cpu", mixed_precision=False):
    model.train()
    criterion = nn.CrossEntropyLoss()
    if mixed_precision and device != "cpu" and torch.cuda.is_available():
        scaler = GradScaler("cuda", enabled=True)
    for batch in data_loader:
        data, labels = batch[0].to(device), batch[1].to(device)
        optimizer.zero_grad()
        if mixed_precision and device != "cpu" and torch.cuda.is_available():
            with autocast(device_type="cuda", dtype=torch.float16):
                loss = criterion(model(data), labels)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss = criterion(model(data), labels)
            loss.backward()
            optimizer.step()
    scheduler.step()


def train_main(cfg, model, dl_train):
    optim = torch.optim.AdamW(model.parameters(), lr=cfg["learning_rate"])
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optim, cfg["epochs"])
    current_epoch = 0
    while current_epoch < cfg["epochs"]:
        current_epoch += 1
        train_func(dl_train, model, optim, scheduler, cfg["device"], mixed_precision=cfg["amp"])
        if cfg.get("early_stopping") and current_epoch > 10:
            break


def train_inline(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(epochs):
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda"):
                loss = nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
