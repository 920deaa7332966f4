"""Scalers beside FSDP done right: the sharded scaler for FSDP, a plain one for DDP or a
single GPU, FSDP2, and bfloat16 without a scaler."""
import torch
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, fully_shard
from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap(model, args):
    if args.fsdp:
        return FSDP(model, device_id=torch.cuda.current_device())
    return DDP(model)


def make_scaler(args):
    return ShardedGradScaler() if args.fsdp else torch.amp.GradScaler("cuda")


def train(model, loader, optimizer, args):
    model = wrap(model, args)
    scaler = make_scaler(args)
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def train_fsdp2(model, loader, optimizer):
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()


def train_bf16(model, loader, optimizer):
    model = FSDP(model, mixed_precision=MixedPrecision(param_dtype=torch.bfloat16))
    for batch in loader:
        loss = model(batch).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
