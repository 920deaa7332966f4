import torch
import torch.nn as nn

device = "cuda" if torch.cuda.is_available() else "cpu"
amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
scaler = torch.amp.GradScaler(device, enabled=(amp_dtype == torch.float16))

x = torch.randn(64, 32, device=device)
y = x.mean(dim=1, keepdim=True)

for step in range(5):
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device, dtype=amp_dtype):
        loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    before = scaler.get_scale()
    scaler.step(opt)                  # unscales gradients, skips step if inf
    scaler.update()                   # adjusts the scale for next time
    skipped = "  <- overflow, step skipped" if scaler.get_scale() < before else ""
    print(f"step {step}  loss {loss.item():.4f}  scale {scaler.get_scale():.0f}{skipped}")
