"""The same ignite trainer, the scaler in what the Checkpoint saves and restores; a bfloat16
script that restores only the optimizer (bfloat16 never overflows, the scale never falls)."""
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
to_save = {"model": model, "optimizer": optimizer, "trainer": trainer, "scaler": scaler}
checkpoint = Checkpoint(to_save, DiskSaver("ckpt", require_empty=False), n_saved=2)
trainer.add_event_handler(Events.EPOCH_COMPLETED, checkpoint)
if resume:
    Checkpoint.load_objects(to_load=to_save, checkpoint=torch.load(resume))
trainer.run(loader, max_epochs=10)
