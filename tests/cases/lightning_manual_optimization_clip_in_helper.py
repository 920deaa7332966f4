# Lightning manual optimization with the precision from the command line and the clip in a
# nested helper method: manual_backward leaves scaled gradients under 16-mixed, and the
# helper clips them with torch's clip (self.clip_gradients unscales first).
import argparse

import lightning as L
import torch


class GAN(L.LightningModule):
    def __init__(self, max_norm):
        super().__init__()
        self.automatic_optimization = False
        self.max_norm = max_norm

    def training_step(self, batch, batch_idx):
        opt_g, opt_d = self.optimizers()
        loss_g = self.generator_loss(batch)
        opt_g.zero_grad()
        self.manual_backward(loss_g)
        self._clip_and_step(opt_g, self.generator)
        loss_d = self.discriminator_loss(batch)
        opt_d.zero_grad()
        self.manual_backward(loss_d)
        self._clip_properly_and_step(opt_d)

    def _clip_and_step(self, optimizer, module):
        self._clip(module)
        optimizer.step()

    def _clip(self, module):
        if self.max_norm:
            torch.nn.utils.clip_grad_norm_(module.parameters(), self.max_norm)

    def _clip_properly_and_step(self, optimizer):
        self.clip_gradients(optimizer, gradient_clip_val=self.max_norm, gradient_clip_algorithm="norm")
        optimizer.step()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", type=str, default="32-true", choices=["32-true", "16-mixed", "bf16-mixed"])
    args = parser.parse_args()
    trainer = L.Trainer(precision=args.precision)
    trainer.fit(GAN(max_norm=1.0))
