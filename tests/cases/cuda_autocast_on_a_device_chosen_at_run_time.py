"""Tutorial-style training that picks CUDA when there is one and the CPU (or MPS) otherwise,
but hard-codes CUDA in its autocast regions: on a laptop they do nothing."""
import torch
import torch.nn as nn


def get_device():
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def train_epoch(model, loader, optimizer, scaler, device):
    model.train()
    for images, labels in loader:
        images, labels = images.to(device), labels.to(device)
        optimizer.zero_grad()
        with torch.cuda.amp.autocast():
            loss = nn.functional.cross_entropy(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


def evaluate(model, loader, device):
    model.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        return [model(images.to(device)).argmax(1) for images, _ in loader]


def main():
    device = get_device()
    model = Net().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type)
    for epoch in range(10):
        train_epoch(model, train_loader, optimizer, scaler, device)
        evaluate(model, val_loader, device)


if __name__ == "__main__":
    main()
