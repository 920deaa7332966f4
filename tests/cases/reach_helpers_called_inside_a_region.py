# Helpers that backpropagate or step, called from inside an autocast region, at any depth.
import torch


class Trainer:
    def _optimizer_step(self):
        self.optimizer.step()
        self.optimizer.zero_grad()

    def backward_and_step(self, loss):
        loss.backward()
        self._optimizer_step()

    def train_step(self, batch):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.model(batch)
            self.backward_and_step(loss)

    def train_step_right(self, batch):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.model(batch)
        self.backward_and_step(loss)


def update(model, optimizer, loss):
    # The helper switches autocast off itself: called under a region, it is still right.
    with torch.autocast("cuda", enabled=False):
        loss.float().backward()
        optimizer.step()


def evaluate_then_update(model, optimizer, x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).mean()
        update(model, optimizer, loss)
