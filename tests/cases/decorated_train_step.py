import torch
from torch import autocast


@autocast(device_type="cuda", dtype=torch.bfloat16)
def train_step(model, batch, optimizer):
    loss = model(batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss
