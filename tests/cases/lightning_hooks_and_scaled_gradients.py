# Lightning calls its hooks in a fixed order under 16-mixed: the scaled backward, then
# `on_after_backward` (the gradients still carry the loss scale), then the unscale, then
# `on_before_optimizer_step` and `configure_gradient_clipping` (unscaled), then the step.
# Clipping or measuring the gradients in `on_after_backward` sees the scale, in the hook or
# through a helper method; the later hooks are where it belongs.
import argparse

import lightning as L
import torch


class ClipsTooEarly(L.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.model(batch).loss

    def on_after_backward(self):
        norm = torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
        self.log("grad_norm", norm)


class MeasuresTooEarly(L.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.model(batch).loss

    def on_after_backward(self):
        if self.global_step % 100 == 0:
            self._log_gradient_norm()

    def _log_gradient_norm(self):
        total = torch.stack([p.grad.norm() for p in self.parameters() if p.grad is not None]).norm()
        self.log("grad_norm", total)


class MeasuresInline(L.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.model(batch).loss

    def on_after_backward(self):
        # The same measurement written in the hook itself: a hook whose only events are reads.
        for name, p in self.named_parameters():
            if p.grad is not None:
                self.log(f"grad_norm/{name}", p.grad.norm())


class HooksDoneRight(L.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.model(batch).loss

    def on_after_backward(self):
        # Only asks which gradients exist: the scale changes nothing there.
        missing = [n for n, p in self.named_parameters() if p.grad is None]
        if missing:
            print("unused parameters:", missing)

    def on_before_optimizer_step(self, optimizer):
        total = torch.stack([p.grad.norm() for p in self.parameters() if p.grad is not None]).norm()
        self.log("grad_norm", total)

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        torch.nn.utils.clip_grad_norm_(self.parameters(), gradient_clip_val or 1.0)


parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="16-mixed", choices=["16-mixed", "bf16-mixed", "32-true"])
args = parser.parse_args()
trainer = L.Trainer(precision=args.precision, max_epochs=1)
trainer.fit(ClipsTooEarly())
