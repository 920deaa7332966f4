# "Working with multiple models, losses, and optimizers" from the PyTorch AMP examples.
import torch

scaler = torch.amp.GradScaler("cuda")
for epoch in epochs:
    for input, target in data:
        optimizer0.zero_grad()
        optimizer1.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            output0 = model0(input)
            output1 = model1(input)
            loss0 = loss_fn(2 * output0 + 3 * output1, target)
            loss1 = loss_fn(3 * output0 - 5 * output1, target)

        scaler.scale(loss0).backward(retain_graph=True)
        scaler.scale(loss1).backward()

        scaler.unscale_(optimizer0)
        torch.nn.utils.clip_grad_norm_(model0.parameters(), max_norm)

        scaler.step(optimizer0)
        scaler.step(optimizer1)
        scaler.update()
