import argparse

import pytorch_lightning as pl
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="32", choices=["32", "bf16-mixed"])
args = parser.parse_args()


class Scorer(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        p = torch.sigmoid(self.net(x))
        loss = -(y * torch.log(p)).mean()  # bfloat16 keeps the sigmoid's small values
        return loss + -((1 - y) * torch.log(1 - p)).mean()  # `1 - p` is 0 in bfloat16 from x > 6.2


def main(dm):
    # "32" or "bf16-mixed", both known: autocast may be on, in bfloat16.
    pl.Trainer(precision=args.precision).fit(Scorer(), dm)
