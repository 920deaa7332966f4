# timm-style: autocast through functools.partial, scaling delegated to a NativeScaler wrapper.
from functools import partial

import torch


def train_one_epoch(model, loader, optimizer, loss_fn, args, loss_scaler=None):
    amp_autocast = partial(torch.autocast, device_type="cuda", dtype=torch.float16)
    for input, target in loader:
        with amp_autocast():
            output = model(input)
            loss = loss_fn(output, target)
        optimizer.zero_grad()
        if loss_scaler is not None:
            loss_scaler(loss, optimizer, clip_grad=args.clip_grad, parameters=model.parameters())
        else:
            loss.backward()
            if args.clip_grad is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_grad)
            optimizer.step()
