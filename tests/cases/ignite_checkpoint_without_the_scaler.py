"""An ignite trainer with a hand-written AMP update: its Checkpoint saves the model and the
optimizer, not the GradScaler."""
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, DiskSaver

scaler = torch.amp.GradScaler("cuda")


def update(engine, batch):
    x, y = batch
    optimizer.zero_grad()
    with torch.autocast("cuda"):
        loss = criterion(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


trainer = Engine(update)
to_save = {"model": model, "optimizer": optimizer, "trainer": trainer}
checkpoint = Checkpoint(to_save, DiskSaver("ckpt", require_empty=False), n_saved=2)
trainer.add_event_handler(Events.EPOCH_COMPLETED, checkpoint)
trainer.run(loader, max_epochs=10)
