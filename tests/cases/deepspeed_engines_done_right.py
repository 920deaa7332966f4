# DeepSpeed used correctly, or in a precision that needs no loss scaling: the engine's own
# backward and step, its optimizer stepped, bfloat16 (no scaler: loss.backward() is fine),
# clipping by config, and a config the file does not show (a JSON path: unknown, never
# taken for float16).
import argparse

import deepspeed
import torch

fp16_config = {"train_batch_size": 32, "fp16": {"enabled": True}, "gradient_clipping": 1.0}
bf16_config = {"train_batch_size": 32, "bf16": {"enabled": True}}
off_config = {"train_batch_size": 32, "fp16": {"enabled": False}}


def train_fp16(model, loader):
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=fp16_config)
    for batch in loader:
        loss = engine(batch)
        engine.backward(loss)
        engine.step()


def train_fp16_optimizer_step(model, loader):
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=fp16_config)
    for batch in loader:
        loss = engine(batch)
        engine.backward(loss)
        optimizer.step()


def train_bf16(model, loader):
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=bf16_config)
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = engine(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(engine.parameters(), 1.0)
        engine.step()


def train_fp16_off(model, loader):
    engine, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=off_config)
    for batch in loader:
        loss = engine(batch)
        loss.backward()
        engine.step()


def train_from_json(model, loader):
    parser = argparse.ArgumentParser()
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()
    engine, optimizer, _, _ = deepspeed.initialize(args=args, model=model, model_parameters=model.parameters())
    for batch in loader:
        loss = engine(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(engine.parameters(), 1.0)
        engine.step()
