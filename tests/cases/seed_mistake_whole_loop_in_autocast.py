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

with torch.autocast(device_type=device, dtype=amp_dtype):
    for step in range(5):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        print(f"step {step}  loss {loss.item():.4f}")
