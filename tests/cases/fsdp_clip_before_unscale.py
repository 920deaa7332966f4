import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

model = FSDP(model)
scaler = ShardedGradScaler()
for batch in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch).loss
    scaler.scale(loss).backward()
    model.clip_grad_norm_(1.0)
    scaler.step(optimizer)
    scaler.update()
