# Two Trainers, one in float32: which module each trains is not followed, so no hook is
# taken to run under the mixed-precision one (the GAN trains in float32 here).
import torch
import lightning as L

class GAN(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.d = torch.nn.Linear(8, 1)
    def training_step(self, batch, idx):
        p = torch.sigmoid(self.d(batch))
        loss = -(torch.log(p) + torch.log(1 - p)).mean()
        return loss
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())

class Clf(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(8, 2)
    def training_step(self, batch, idx):
        return torch.nn.functional.cross_entropy(self.l(batch[0]), batch[1])
    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())

if __name__ == "__main__":
    L.Trainer(precision="16-mixed").fit(Clf())
    L.Trainer(precision="32-true").fit(GAN())
