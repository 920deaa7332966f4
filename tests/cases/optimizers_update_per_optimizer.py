"""A GAN trainer that steps each network's optimizer through one shared GradScaler in a loop
over (optimizer, loss) pairs, and updates the scaler inside that loop: once per optimizer,
twice per iteration. The trainer class does the same with `enumerate(self.optimizers)` and
a per-optimizer step method."""
import torch
import torch.nn as nn

generator, discriminator = nn.Linear(8, 8).cuda(), nn.Linear(8, 1).cuda()
opt_g = torch.optim.Adam(generator.parameters(), lr=2e-4)
opt_d = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
scaler = torch.amp.GradScaler("cuda")


def g_loss(x):
    return -discriminator(generator(x)).mean()


def d_loss(x):
    return discriminator(generator(x).detach()).mean() - discriminator(x).mean()


for x in loader:
    for optimizer, loss_fn in zip([opt_d, opt_g], [d_loss, g_loss]):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda"):
            loss = loss_fn(x)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


class ActorCriticTrainer:
    def __init__(self, actor, critic):
        self.optimizers = [torch.optim.Adam(actor.parameters()), torch.optim.Adam(critic.parameters())]
        self.scaler = torch.amp.GradScaler("cuda")

    def optimizer_step(self, optimizer, optimizer_idx):
        self.scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], 0.5)
        self.scaler.step(optimizer)
        self.scaler.update()
        optimizer.zero_grad()

    def fit(self, loader):
        for batch in loader:
            for optimizer_idx, optimizer in enumerate(self.optimizers):
                with torch.autocast("cuda"):
                    loss = self.loss(batch, optimizer_idx)
                self.scaler.scale(loss).backward()
                self.optimizer_step(optimizer, optimizer_idx)
