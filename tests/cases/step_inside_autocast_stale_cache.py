# An optimizer step inside an autocast context that a later forward pass shares: autocast keeps
# the weights' low-precision copies until the outermost context exits, so the forwards after the
# step use stale weights. Flagged however the step is wrapped; clean where the cache is off or
# cleared, or where nothing runs a forward after the step.
import torch


def step_turned_off(model, loader, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            with torch.autocast("cuda", enabled=False):  # off, but the outer cache stays
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()


def inside_an_outer_context(model, loader, optimizer):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()


def epoch(model, loader, optimizer):
    for x, y in loader:
        loss = model(x).mean()
        loss.backward()
        optimizer.step()


def whole_run_in_autocast(model, loader, optimizer):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            epoch(model, loader, optimizer)


def gan_step(gen, disc, d_optimizer, g_optimizer, real, z):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        d_loss = disc(gen(z).detach()).mean() - disc(real).mean()
        d_loss.backward()
        d_optimizer.step()
        g_loss = -disc(gen(z)).mean()  # the discriminator's stale copy
        g_loss.backward()
        g_optimizer.step()


def cache_off(model, loader, optimizer):
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()


def cache_cleared(model, loader, optimizer):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            torch.clear_autocast_cache()


def steps_only(model, optimizers):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model.loss()
        loss.backward()
        for optimizer in optimizers:  # no forward runs after them inside the region
            optimizer.step()


def inference_after_training(model, loader, optimizer, x_val):
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        return model(x_val)
