import torch

model = model.cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
for batch in loader:
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = model(batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
