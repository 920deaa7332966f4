import torch

scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
# Pre-allocate memory with a throwaway backward; the gradients are cleared before training.
with torch.cuda.amp.autocast(enabled=args.amp):
    loss = model(torch.randn(batch_size, 64, device="cuda")).sum()
loss.backward()
model.zero_grad()

for x in loader:
    with torch.cuda.amp.autocast(enabled=args.amp):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
