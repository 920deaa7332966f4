# An sklearn scaler does not scale losses: float16 autocast with no GradScaler.
import torch
from sklearn.preprocessing import MinMaxScaler

scaler = MinMaxScaler()
features = scaler.fit_transform(raw)
for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
