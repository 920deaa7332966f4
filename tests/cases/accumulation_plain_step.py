import torch

scaler = torch.cuda.amp.GradScaler()
for i, (x, y) in enumerate(loader):
    with torch.cuda.amp.autocast():
        loss = criterion(model(x), y) / accum_steps
    scaler.scale(loss).backward()
    if (i + 1) % accum_steps == 0:
        optimizer.step()
        scaler.update()
        optimizer.zero_grad()
