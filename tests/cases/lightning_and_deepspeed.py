import torch
import lightning as L


class LitModel(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = self.model(batch).loss
        opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=1.0)
        opt.step()


def deepspeed_train(model_engine, loader):
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model_engine(batch)
        model_engine.backward(loss)
        model_engine.step()
