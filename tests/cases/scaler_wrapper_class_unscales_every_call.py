# A scaler wrapper class of the project's own (timm's NativeScaler before 4cd7fb88, under
# another name): `__call__` unscales on every call but steps and updates only when
# `need_update`, so with gradient accumulation the second micro-batch's unscale_ raises.
# Called as `amp_step(...)` and as `self.amp_step(...)` (built in `__init__`); the same
# mistake in a plain function of the file.
import torch


class AmpStepper:
    def __init__(self):
        self._scaler = torch.amp.GradScaler("cuda")

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, need_update=True):
        self._scaler.scale(loss).backward()
        if clip_grad is not None:
            self._scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
        if need_update:
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


class Trainer:
    def __init__(self, model, optimizer):
        self.model = model
        self.optimizer = optimizer
        self.amp_step = AmpStepper()

    def fit(self, loader, accum_steps):
        for i, (x, y) in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = self.model(x).sum() / accum_steps
            self.amp_step(loss, self.optimizer, clip_grad=1.0, parameters=self.model.parameters(), need_update=(i + 1) % accum_steps == 0)


# The same as a plain function of the file.
def scaler_step(scaler, loss, optimizer, parameters, need_update):
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
