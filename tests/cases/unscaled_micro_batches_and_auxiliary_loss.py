"""Two trainers whose plain `backward()` sits beside a scaled one, on the same model and the
same optimizer. The accumulation loop scales only the micro-batch that steps; the earlier ones
run `loss.backward()`, and `scaler.step()` later divides their gradients by the scale too. The
segmentation trainer's auxiliary (deep-supervision) head is the same network's, its loss
backpropagated unscaled next to the scaled main loss."""

import torch
import torch.nn as nn
import torch.nn.functional as F

ACCUM = 8


def train_lm(model, loader, epochs, lr=3e-4):
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    scaler = torch.amp.GradScaler("cuda")
    model.train()
    for epoch in range(epochs):
        for it, (tokens, targets) in enumerate(loader):
            with torch.autocast("cuda", dtype=torch.float16):
                logits = model(tokens.cuda())
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.cuda().view(-1)) / ACCUM
            if (it + 1) % ACCUM != 0:
                loss.backward()
                continue
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)


class SegTrainer:
    def __init__(self, net, lr):
        self.net = net.cuda()
        self.opt = torch.optim.SGD(
            [{"params": self.net.backbone.parameters(), "lr": lr * 0.1}, {"params": self.net.head.parameters()}],
            lr=lr,
            momentum=0.9,
        )
        self.scaler = torch.amp.GradScaler("cuda")

    def epoch(self, loader):
        for image, mask in loader:
            self.opt.zero_grad()
            with torch.autocast("cuda"):
                out, aux_out = self.net(image.cuda())
                main_loss = F.cross_entropy(out, mask.cuda())
                aux_loss = 0.4 * F.cross_entropy(aux_out, mask.cuda())
            aux_loss.backward(retain_graph=True)
            self.scaler.scale(main_loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
