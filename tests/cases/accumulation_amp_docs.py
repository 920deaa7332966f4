import torch

scaler = torch.amp.GradScaler("cuda")
for epoch in epochs:
    for i, (input, target) in enumerate(data):
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            output = model(input)
            loss = loss_fn(output, target)
            loss = loss / iters_to_accumulate
        scaler.scale(loss).backward()
        if (i + 1) % iters_to_accumulate == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
