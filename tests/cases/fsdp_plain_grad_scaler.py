"""FSDP training with float16 autocast and a plain GradScaler: each rank checks only its
own shard of the gradients for inf/NaN."""
import functools

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy


def setup_model(model, block):
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={block})
    return FSDP(model, auto_wrap_policy=policy, device_id=torch.cuda.current_device())


def main(model, block, loader, epochs):
    dist.init_process_group("nccl")
    model = setup_model(model, block)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scaler = torch.cuda.amp.GradScaler()
    for epoch in range(epochs):
        for batch in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(**batch).loss
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            model.clip_grad_norm_(1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
