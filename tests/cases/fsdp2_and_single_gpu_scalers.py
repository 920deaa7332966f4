"""A plain GradScaler where it is right: FSDP2 (DTensor gradients, whose inf check is
reduced across ranks) and a single-GPU path; the FullyShardedDataParallel wrap serves only
an inference path that never meets a scaler."""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel
from torch.distributed.fsdp import fully_shard


def shard_for_inference(model):
    return FullyShardedDataParallel(model, device_id=torch.cuda.current_device())


@torch.no_grad()
def generate(model, prompts):
    model = shard_for_inference(model)
    return [model(prompt) for prompt in prompts]


def train_fsdp2(model, loader, optimizer):
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def train_single_gpu(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
