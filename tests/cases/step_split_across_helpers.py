# Training steps split across methods: the helper's unscaled backward (or the helper that
# steps the scaler) counts where it is called. Helpers with both a scaled and a plain path,
# or a backward on a tensor the caller passes in, are not inlined.
import torch


class Trainer:
    def __init__(self, model, opt):
        self.model, self.optimizer = model, opt
        self.scaler = torch.amp.GradScaler("cuda")

    def _run_step(self, batch):
        self.optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda"):
            loss = self.model(batch)
        loss.backward()

    def train_epoch(self, loader):
        for batch in loader:
            self._run_step(batch)
            self.scaler.step(self.optimizer)
            self.scaler.update()


class StepHelper:
    def update_optimizer(self):
        if self.step - self.last_opt_step >= self.accumulate:
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad()

    def train_in_steps(self, batch):
        with torch.cuda.amp.autocast(enabled=self.device != "cpu"):
            total_loss = self.compute_loss(self.model(batch))
        total_loss.backward()
        self.update_optimizer()


class Correct:
    def _backward(self, loss):
        loss.backward()

    def update(self):
        if self.use_amp:
            self.scaler.step(self.optimizer)
        else:
            self.optimizer.step()

    def train(self, loss):
        if self.use_amp:
            self._backward(self.scaler.scale(loss))
        else:
            loss.backward()
        self.update()
