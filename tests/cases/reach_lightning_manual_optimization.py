# Lightning manual optimization in 16-bit mixed precision: manual_backward leaves scaled
# gradients; self.clip_gradients unscales first, torch's clip does not.
import lightning as L
import torch


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.compute_loss(batch)
        opt.zero_grad()
        self.manual_backward(loss)
        torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
        opt.step()

    def validation_step(self, batch, batch_idx):
        return self.compute_loss(batch)


class RightModel(L.LightningModule):
    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = self.compute_loss(batch)
        opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        opt.step()


trainer = L.Trainer(precision="16-mixed", max_epochs=3)
trainer.fit(Model())
