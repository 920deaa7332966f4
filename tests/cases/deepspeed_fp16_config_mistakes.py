# DeepSpeed with float16 turned on in its config dict: the engine's backward scales the loss,
# so a plain `loss.backward()` before `model_engine.step()` skips DeepSpeed's loss scaling,
# and torch's clip after `model.backward(loss)` clips scaled gradients (clip in the config).
import deepspeed
import torch

ds_config = {
    "train_micro_batch_size_per_gpu": 8,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
    "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16},
}


def train(model, loader):
    model_engine, optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds_config
    )
    for batch in loader:
        loss = model_engine(batch)
        loss.backward()
        model_engine.step()


def train_clipping_by_hand(model, loader):
    model, optimizer, _, scheduler = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    for batch in loader:
        loss = model(batch)
        model.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        model.step()
