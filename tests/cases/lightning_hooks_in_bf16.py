# The same hooks under bf16-mixed (no loss scaler) or full precision: on_after_backward sees
# the true gradients, and clipping or measuring them there is fine.
import lightning as L
import torch


class ClipsInOnAfterBackward(L.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.model(batch).loss

    def on_after_backward(self):
        norm = torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
        total = torch.stack([p.grad.norm() for p in self.parameters() if p.grad is not None]).norm()
        self.log_dict({"clipped_norm": norm, "grad_norm": total})


trainer = L.Trainer(precision="bf16-mixed", max_epochs=1)
trainer.fit(ClipsInOnAfterBackward())
full = L.Trainer(precision="32-true", max_epochs=1)
full.fit(ClipsInOnAfterBackward())
