"""GradScalers built inside loops that are right: a new scaler per fold or per experiment
(with its own optimizer), built lazily on the first step, rebuilt by a retry loop that
breaks once training succeeds, one per model collected in a loop, and built by a function
called once."""
import torch
import torch.nn as nn


def run_fold(fold, train_loader, epochs):
    model = nn.Linear(64, 1).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(epochs):
        for x, y in train_loader:
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
    return model


def cross_validate(loaders, epochs):
    models = []
    for fold, loader in enumerate(loaders):
        models.append(run_fold(fold, loader, epochs))
    return models


def sweep(loader, learning_rates):
    for lr in learning_rates:
        model = nn.Linear(64, 1).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.scaler = None

    def step(self, x, y):
        if self.scaler is None:
            self.scaler = torch.amp.GradScaler("cuda")
        self.optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = nn.functional.mse_loss(self.model(x), y)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def fit(self, loader):
        for x, y in loader:
            self.step(x, y)


def fit_with_retry(model, optimizer, loader):
    for attempt in range(3):
        try:
            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = nn.functional.mse_loss(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            break
        except torch.cuda.OutOfMemoryError:
            torch.cuda.empty_cache()


def gan_scalers(names):
    scalers = {}
    for name in names:
        scalers[name] = torch.amp.GradScaler("cuda")
    return scalers
