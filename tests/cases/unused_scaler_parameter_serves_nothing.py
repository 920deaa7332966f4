# A `scaler` parameter this function never uses does not serve its float16 step.
import torch


def train_loop(model, loss_func, scaler, optim, loader, args):
    for img, label in loader:
        with torch.cuda.amp.autocast(enabled=args.amp):
            loss = loss_func(model(img), label)
        loss.backward()
        optim.step()
        optim.zero_grad()
