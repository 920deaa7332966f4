import lightning as L
import torch
import torch.nn.functional as F


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(16, 1)
        self.register_buffer("inv_freq", torch.rand(8))

    def forward(self, x):
        # A float32 island: the Trainer's autocast casts the matmul's inputs down again.
        return self.net(x), x.float() @ self.inv_freq.float()[:, None]

    def bce(self, logits, y):
        p = torch.sigmoid(logits)
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits, _ = self(x)
        return self.bce(logits, y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        self.log("val_loss", F.binary_cross_entropy_with_logits(logits, y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        with torch.autocast("cuda", enabled=False):
            p = torch.sigmoid(logits.float())
            self.log("test_loss", -torch.log(p).mean())

    def on_train_epoch_end(self):
        # Not a hook the Trainer runs under autocast.
        p = torch.sigmoid(self.net(self.probe))
        self.log("probe", torch.log(p).mean())


class ManualOptimization(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.net = torch.nn.Linear(16, 1)

    def training_step(self, batch, batch_idx):
        # Lightning's manual optimization: backward and step inside its autocast by design.
        opt = self.optimizers()
        loss = F.binary_cross_entropy_with_logits(self.net(batch[0]), batch[1])
        self.manual_backward(loss)
        opt.step()
        opt.zero_grad()


class NotALightningModule:
    def training_step(self, batch, batch_idx):
        p = torch.sigmoid(self.net(batch[0]))
        return -torch.log(p).mean()


def main(dm):
    trainer = L.Trainer(precision="16-mixed", max_epochs=3)
    trainer.fit(Classifier(), dm)
    trainer.fit(ManualOptimization(), dm)
