# Optimizer steps inside a region that ends with the iteration: harmless for optimizers whose
# step runs no op autocast lowers (measured bit-identical for SGD and Adam), NaN for
# torch.optim.Adafactor under float16 (its `row_var @ col_var`), within 1% under bfloat16.
import torch
from torch.optim import Adafactor


def sgd_and_adamw(model, loader, scaler):
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    adamw = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(sgd)
            scaler.step(adamw)
            scaler.update()


def adafactor_in_float16(model, loader, scaler):
    optimizer = Adafactor(model.parameters(), lr=1e-2)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()


def adafactor_in_bfloat16(model, loader):
    optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-2)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()


def step(optimizer, scaler, loss):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def adafactor_through_a_helper(model, loader, scaler, amp_dtype):
    optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-2, foreach=True)
    for x, y in loader:
        with torch.autocast("cuda", dtype=amp_dtype):  # a dtype chosen elsewhere may be float16
            loss = torch.nn.functional.mse_loss(model(x), y)
            step(optimizer, scaler, loss)


def adafactor_stepped_after(model, loader, scaler):
    optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-2)
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        step(optimizer, scaler, loss)
