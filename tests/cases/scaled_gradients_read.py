# Gradients read while they still carry the loss scale, and the ways of reading them that
# are right.
import torch


def log_grad_norm(model):
    return torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])


class Trainer:
    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.scaler = torch.amp.GradScaler("cuda")

    def step(self, batch):
        with torch.autocast("cuda"):
            loss = self.model(batch)
        self.scaler.scale(loss).backward()
        self.grad_norm = log_grad_norm(self.model)  # before unscale_: 65536x too large
        self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()

    def step_right(self, batch):
        with torch.autocast("cuda"):
            loss = self.model(batch)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        self.grad_norm = log_grad_norm(self.model)
        self.scaler.step(self.optimizer)
        self.scaler.update()


def add_gradient_noise(model, sigma, scaler, optimizer):
    # Called by no one here: the scaler.step() below shows the gradients came in scaled.
    for p in model.parameters():
        if p.grad is not None:
            p.grad.add_(torch.randn_like(p.grad) * sigma)
    scaler.step(optimizer)
    scaler.update()


def average_gradients(model, world_size, scaler, optimizer, loss):
    # Linear: the later unscale divides the averaged gradients just the same.
    scaler.scale(loss).backward()
    for p in model.parameters():
        if p.grad is not None:
            torch.distributed.all_reduce(p.grad)
            p.grad /= world_size
    scaler.step(optimizer)
    scaler.update()


def gradient_penalty(model, x, optimizer, scaler):
    with torch.autocast("cuda"):
        loss = model(x).mean()
    scaled_grads = torch.autograd.grad(scaler.scale(loss), model.parameters(), create_graph=True)
    grads = [g / scaler.get_scale() for g in scaled_grads]
    with torch.autocast("cuda"):
        penalty = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
    scaler.scale(loss + penalty).backward()
    scaler.step(optimizer)
    scaler.update()


def log_norms(model, loader, optimizer, scaler, logger):
    for step, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        # A clip at an infinite norm clips nothing: it is a norm read, 65536x too large.
        total = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        # Divided by the scale after reading: the true norm.
        scaled = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        logger.info("grad norm %.4f %.4f", total.item(), (scaled / scaler.get_scale()).item())
        scaler.step(optimizer)
        scaler.update()
