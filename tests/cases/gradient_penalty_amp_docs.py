# The gradient-penalty recipe from the PyTorch AMP examples.
import torch

scaler = torch.amp.GradScaler("cuda")
for epoch in epochs:
    for input, target in data:
        optimizer.zero_grad()
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            output = model(input)
            loss = loss_fn(output, target)

        scaled_grad_params = torch.autograd.grad(outputs=scaler.scale(loss), inputs=model.parameters(), create_graph=True)
        inv_scale = 1.0 / scaler.get_scale()
        grad_params = [p * inv_scale for p in scaled_grad_params]

        with torch.autocast(device_type="cuda", dtype=torch.float16):
            grad_norm = 0
            for grad in grad_params:
                grad_norm += grad.pow(2).sum()
            grad_norm = grad_norm.sqrt()
            loss = loss + grad_norm

        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
