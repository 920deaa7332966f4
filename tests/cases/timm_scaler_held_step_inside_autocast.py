"""timm's NativeScaler called inside the autocast region on accumulation micro-batches: the
call scales the loss and runs its backward there (the step it holds back until
`need_update`)."""
import torch
from timm.utils import NativeScaler

loss_scaler = NativeScaler()
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda"):
        loss = criterion(model(x), y) / accum
        loss_scaler(loss, optimizer, clip_grad=1.0, parameters=model.parameters(), need_update=(i + 1) % accum == 0)
    if (i + 1) % accum == 0:
        optimizer.zero_grad()
