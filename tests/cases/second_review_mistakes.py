# Mistakes a second adversarial review found unreported: a class-level autocast context
# with no scaler, and optimizers reached by subscript.
import torch


class Trainer:
    amp_ctx = torch.autocast("cuda", dtype=torch.float16)

    def train_step(self, x, y):
        with self.amp_ctx:
            loss = self.model(x, y)
        loss.backward()
        self.optimizer.step()


def subscripted(model, loader, optimizers, scaler):
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x)
            loss.backward()
            optimizers[0].step()
        scaler.scale(model(x)).backward()
        optimizers["main"].step()
