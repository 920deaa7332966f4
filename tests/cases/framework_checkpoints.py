"""Checkpoints that frameworks write, with the scaler's state in them: accelerate's
save_state (its own scaler), ignite's Checkpoint over a dict holding the GradScaler, a
Lightning precision plugin handed the scaler, and DeepSpeed's engine."""
import torch
from accelerate import Accelerator
from ignite.handlers import Checkpoint, DiskSaver
from lightning.pytorch import Trainer
from lightning.pytorch.plugins import MixedPrecision


def accelerate_main(model, optimizer, loader):
    accelerator = Accelerator(mixed_precision="fp16")
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        with accelerator.autocast():
            loss = model(x, y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    accelerator.save_state("checkpoints")
    torch.save(optimizer.state_dict(), "optimizer.pt")


def ignite_main(model, optimizer, trainer):
    scaler = torch.amp.GradScaler("cuda")
    to_save = {"model": model, "optimizer": optimizer, "scaler": scaler}
    trainer.add_event_handler("epoch_completed", Checkpoint(to_save, DiskSaver("ckpt")))
    if resume_from:
        Checkpoint.load_objects(to_load=to_save, checkpoint=torch.load(resume_from))
    optimizer.load_state_dict(torch.load("warm_start_optimizer.pt"))


def lightning_main(module, datamodule):
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**12)
    trainer = Trainer(plugins=[MixedPrecision("16-mixed", "cuda", scaler=scaler)])
    trainer.fit(module, datamodule=datamodule, ckpt_path="last")
    torch.save(module.optimizers().state_dict(), "optimizer.pt")


def deepspeed_main(engine, loader):
    for batch in loader:
        loss = engine(batch)
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint("checkpoints")
