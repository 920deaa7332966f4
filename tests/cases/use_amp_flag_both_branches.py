import torch


def train(model, loader, optimizer, scaler, args):
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        if args.amp:
            with torch.cuda.amp.autocast():
                loss = model(x, y)
        else:
            loss = model(x, y)
        if args.amp:
            scaler.scale(loss).backward()
            if args.clip > 0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            if args.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
