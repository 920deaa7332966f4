"""The scaler's state is checkpointed and restored, and then a GradScaler is built again:
at module level after --resume, and in a trainer whose setup() resumes before it builds
its scaler."""
import torch

scaler = torch.amp.GradScaler("cuda")
if args.resume:
    ckpt = torch.load(args.resume)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    scaler.load_state_dict(ckpt["scaler"])
if args.amp:
    scaler = torch.amp.GradScaler("cuda", init_scale=2.0**14)


class Trainer:
    def __init__(self, model, optimizer, cfg):
        self.model = model
        self.optimizer = optimizer
        self.cfg = cfg
        self.scaler = torch.amp.GradScaler("cuda")

    def load_checkpoint(self, path):
        state = torch.load(path)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scaler.load_state_dict(state["scaler"])

    def save_checkpoint(self, path):
        torch.save({"optimizer": self.optimizer.state_dict(), "scaler": self.scaler.state_dict()}, path)

    def setup(self):
        if self.cfg.resume:
            self.load_checkpoint(self.cfg.resume)
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.cfg.amp)
