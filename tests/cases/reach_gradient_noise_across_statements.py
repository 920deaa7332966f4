# Gradient noise made in one statement and added to `p.grad` in another, between the scaled
# backward and `scaler.step`: divided by the loss scale with the gradients, it all but
# vanishes. Noise added after `unscale_`, noise sized from the gradients themselves (it carries
# the scale too) and a tensor that is not random stay clean.
import torch


def noisy_step(model, optimizer, scaler, loss, sigma):
    scaler.scale(loss).backward()
    for p in model.parameters():
        noise = torch.randn_like(p.grad) * sigma
        p.grad.add_(noise)
    scaler.step(optimizer)
    scaler.update()


def dp_step(model, optimizer, scaler, loss, noise_multiplier, max_norm):
    # Noise sized from the clip bound (a constant), added with `+=`.
    scaler.scale(loss).backward()
    std = noise_multiplier * max_norm
    for p in model.parameters():
        if p.grad is None:
            continue
        noise = torch.normal(0.0, std, size=p.grad.shape, device=p.grad.device)
        p.grad += noise
    scaler.step(optimizer)
    scaler.update()


def weight_sized_noise(model, optimizer, scaler, loss, sigma):
    # Sized from a norm of the weights, read earlier: the weights carry no loss scale.
    scaler.scale(loss).backward()
    for p in model.parameters():
        scale = sigma * p.detach().norm()
        noise = torch.randn_like(p.grad).mul(scale)
        p.grad = p.grad + noise
    scaler.step(optimizer)
    scaler.update()


def noise_from_a_list(model, optimizer, scaler, loss, sigma):
    scaler.scale(loss).backward()
    params = [p for p in model.parameters() if p.grad is not None]
    noises = [torch.randn_like(p.grad) * sigma for p in params]
    for p, n in zip(params, noises):
        p.grad.add_(n)
    scaler.step(optimizer)
    scaler.update()


def noise_after_unscale(model, optimizer, scaler, loss, sigma):
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    for p in model.parameters():
        noise = torch.randn_like(p.grad) * sigma
        p.grad.add_(noise)
    scaler.step(optimizer)
    scaler.update()


def gradient_sized_noise(model, optimizer, scaler, loss, sigma):
    # Sized from the gradients themselves: scaled with them, unscaled with them.
    scaler.scale(loss).backward()
    for p in model.parameters():
        spread = p.grad.std()
        noise = torch.randn_like(p.grad) * spread * sigma
        p.grad.add_(noise)
    scaler.step(optimizer)
    scaler.update()


def norm_sized_noise(model, optimizer, scaler, loss, sigma, max_norm):
    # Sized from the norm the clip returns, after unscale_: the right units.
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    for p in model.parameters():
        noise = torch.randn_like(p.grad) * sigma * total
        p.grad.add_(noise)
    scaler.step(optimizer)
    scaler.update()


def noise_sized_from_a_scaled_norm(model, optimizer, scaler, loss, sigma, logger):
    # The norm read before unscale_ is 65536x too large (flagged where it is read, it is also
    # logged); the noise sized from it carries the scale like the gradients and comes out right.
    scaler.scale(loss).backward()
    total = torch.norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    logger.info("grad norm %.3f", total.item())
    for p in model.parameters():
        noise = torch.randn_like(p.grad) * sigma * total
        p.grad.add_(noise)
    scaler.step(optimizer)
    scaler.update()


def not_random(model, optimizer, scaler, loss, bias):
    # A fixed offset and a zero tensor are no noise (and offsets scale with nothing either,
    # but only random noise is flagged).
    scaler.scale(loss).backward()
    for p in model.parameters():
        zeros = torch.zeros_like(p.grad)
        p.grad.add_(zeros)
    scaler.step(optimizer)
    scaler.update()


def bf16_without_scaler(model, optimizer, loader, sigma):
    for x in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).mean()
        loss.backward()
        for p in model.parameters():
            noise = torch.randn_like(p.grad) * sigma
            p.grad.add_(noise)
        optimizer.step()
