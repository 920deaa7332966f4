import torch


def train(model, loader, optimizer, args):
    scaler = torch.cuda.amp.GradScaler(enabled=args.fp16)
    for x, y in loader:
        with torch.cuda.amp.autocast(enabled=args.fp16):
            loss = model(x, y)
        loss.backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
