import argparse

import lightning as L
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="16-mixed")
args = parser.parse_args()


class Scorer(L.LightningModule):
    def training_step(self, batch, batch_idx):
        x, y = batch
        p = torch.sigmoid(self.net(x))
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


def main(dm):
    # The precision comes from the command line (any value, not only the default): unknown,
    # so no region is assumed around the hooks.
    L.Trainer(precision=args.precision).fit(Scorer(), dm)
