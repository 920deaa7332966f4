# A long yolov5-style train() with many branches that hold no AMP calls: still analysed.
import torch
from torch.cuda import amp


def train(opt, model, loader, optimizer, ema, epochs, cuda, RANK, pretrained):
    for m in model.modules():
        if not pretrained and hasattr(m, "reset_parameters"):
            m.reset_parameters()
        if isinstance(m, torch.nn.Dropout) and opt.dropout is not None:
            m.p = opt.dropout
    if cuda and RANK != -1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    scaler = amp.GradScaler(enabled=cuda)
    for epoch in range(epochs):
        if RANK != -1:
            loader.sampler.set_epoch(epoch)
        for i, (images, labels) in enumerate(loader):
            with amp.autocast(enabled=cuda):
                loss = model(images, labels)
            scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)  # BUG: no unscale_
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
            if ema:
                ema.update(model)
            if RANK in {-1, 0}:
                if i == len(loader) - 1:
                    print("validate")
        if RANK in {-1, 0}:
            final_epoch = epoch + 1 == epochs
            if (not opt.nosave) or final_epoch:
                if best_fitness == fitness:
                    print("save best")
