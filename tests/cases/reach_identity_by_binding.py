# Names are variables of their own scope: a GradScaler local to one function says nothing
# about another function's `scaler`, here sklearn's.
import torch
from sklearn.preprocessing import StandardScaler


def train_amp(model, loader, opt):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


def train_tabular(model, features, targets, opt):
    scaler = StandardScaler()
    features = torch.tensor(scaler.fit_transform(features))
    with torch.autocast("cuda"):
        loss = torch.nn.functional.mse_loss(model(features), targets)
    loss.backward()
    opt.step()
