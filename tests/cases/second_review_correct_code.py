# Correct code from a second adversarial review: none of it may be flagged.
import torch
from torch.optim.swa_utils import SWALR


def swa(model, optimizer, loader, scaler):
    scheduler = SWALR(optimizer, swa_lr=0.05)
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scheduler.step()
        scaler.step(optimizer)
        scaler.update()


def unscale_each(model, loss, scaler, optimizers):
    scaler.scale(loss).backward()
    for optimizer in optimizers:
        scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    for optimizer in optimizers:
        scaler.step(optimizer)


def conditional_scale(model, opt, loader, scaler=None):
    for x, y in loader:
        with torch.autocast("cuda", enabled=scaler is not None):
            loss = model(x, y)
        loss = scaler.scale(loss) if scaler is not None else loss
        loss.backward()
        if scaler is not None:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()


def unscale_when_enabled(model, loss, scaler, opt):
    scaler.scale(loss).backward()
    if scaler.is_enabled():
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)


class Trainer:
    scaler = torch.amp.GradScaler("cuda", enabled=False)

    def train_step(self, x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.model(x, y)
        self.scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)


def actor_critic(actor, critic, opt_actor, opt_critic, obs, ret, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        policy_loss = actor.loss(obs, ret)
    scaler.scale(policy_loss).backward()
    value_loss = (critic(obs).squeeze(-1) - ret).pow(2).mean()
    value_loss.backward()
    opt_critic.step()
    scaler.step(opt_actor)
    scaler.update()
