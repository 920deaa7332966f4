# Lightning manual optimization with the precision chosen on the command line: "16-mixed" is
# a choice, so manual_backward may leave scaled gradients that torch's clip would clip.
import argparse

import lightning as L
import torch


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.compute_loss(batch)
        opt.zero_grad()
        self.manual_backward(loss)
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
        opt.step()


class RightModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.compute_loss(batch)
        opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        opt.step()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="32-true", choices=["32-true", "16-mixed", "bf16-mixed"])
    args = parser.parse_args()
    trainer = L.Trainer(precision=args.precision, max_epochs=3)
    trainer.fit(Model())
