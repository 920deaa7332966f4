# Scaler wrapper classes of the project's own done right, and calls whose class is not
# certain (never followed): the unscale_ and clip under the same `if need_update:` as the
# step and the update (timm after 4cd7fb88); a wrapper that updates on every call; an
# instance bound twice.
import torch


class AmpStepper:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, need_update=True):
        self._scaler.scale(loss).backward()
        if need_update:
            if clip_grad is not None:
                self._scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()


class EveryCall:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, parameters):
        self._scaler.scale(loss).backward()
        self._scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        self._scaler.step(optimizer)
        self._scaler.update()


def train_one_epoch(model, loader, optimizer, accum_steps=4, clip_grad=1.0):
    amp_step = AmpStepper()
    for i, (x, y) in enumerate(loader):
        need_update = (i + 1) % accum_steps == 0
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum() / accum_steps
        amp_step(loss, optimizer, clip_grad=clip_grad, parameters=model.parameters(), need_update=need_update)
        if need_update:
            optimizer.zero_grad()


def train_every_step(model, loader, optimizer):
    stepper = EveryCall()
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        stepper(loss, optimizer, model.parameters())
        optimizer.zero_grad()


# A plain function of the file that unscales under the same condition as the update, and
# one called with a condition that is the same in every iteration.
def scaler_step(scaler, loss, optimizer, parameters, need_update):
    scaler.scale(loss).backward()
    if need_update:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(parameters, 1.0)
        scaler.step(optimizer)
        scaler.update()


def eager_step(scaler, loss, optimizer, parameters, need_update):
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(parameters, 1.0)
    if need_update:
        scaler.step(optimizer)
        scaler.update()


def train_with_a_function(model, loader, optimizer, accum_steps=4):
    scaler = torch.amp.GradScaler("cuda")
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum() / accum_steps
        scaler_step(scaler, loss, optimizer, model.parameters(), need_update=(i + 1) % accum_steps == 0)


def train_every_iteration(model, loader, optimizer, always=True):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
        eager_step(scaler, loss, optimizer, model.parameters(), need_update=always)
