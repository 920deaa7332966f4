import torch.cuda.amp as amp


def train_epoch(model, loader, optimizer, criterion):
    model.train()
    for images, labels in loader:
        optimizer.zero_grad()
        with amp.autocast():
            logits = model(images.cuda())
        loss = criterion(logits, labels.cuda())
        loss.backward()
        optimizer.step()
