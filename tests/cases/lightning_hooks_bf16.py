import lightning as L
import torch


class Scorer(L.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        p = torch.sigmoid(self.net(x))
        # bfloat16 keeps float32's range: the sigmoid does not underflow, `1 - p` rounds to 0.
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


def main(dm):
    L.Trainer(precision="bf16-mixed").fit(Scorer(), dm)
