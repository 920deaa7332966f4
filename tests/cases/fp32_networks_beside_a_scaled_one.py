"""Plain backwards beside scaled ones that are right: each trains a network the scaler's
optimizer does not hold, or runs where the scaler is off. An actor-critic's critic learns in
float32 with its own optimizer; a GAN's discriminator learns in float32 on detached fakes; an
accumulation loop's AMP-off path uses a disabled scaler; an optimizer handed in holds
parameters amplint cannot see."""

import torch
import torch.nn.functional as F


def a2c(actor, critic, rollouts):
    actor_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda")
    for states, actions, returns in rollouts:
        values = critic(states).squeeze(-1)
        critic_loss = F.mse_loss(values, returns)
        critic_opt.zero_grad()
        critic_loss.backward()
        critic_opt.step()
        with torch.autocast("cuda", dtype=torch.float16):
            dist = actor(states)
            advantage = returns - values.detach()
            actor_loss = -(dist.log_prob(actions) * advantage).mean()
        actor_opt.zero_grad()
        scaler.scale(actor_loss).backward()
        scaler.step(actor_opt)
        scaler.update()


def gan(G, D, loader, z_dim):
    opt_g = torch.optim.Adam(G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    scaler = torch.amp.GradScaler("cuda")
    for real in loader:
        z = torch.randn(real.size(0), z_dim, device=real.device)
        fake = G(z)
        d_loss = F.softplus(D(fake.detach())).mean() + F.softplus(-D(real)).mean()
        d_loss.backward()
        with torch.autocast("cuda"):
            g_loss = F.softplus(-D(G(z))).mean()
        scaler.scale(g_loss).backward()
        scaler.step(opt_g)
        scaler.update()
        opt_d.step()
        opt_g.zero_grad()
        opt_d.zero_grad()


def accumulate(model, loader, accum, use_amp):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
            loss = F.cross_entropy(model(x), y) / accum
        if use_amp:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if (i + 1) % accum == 0:
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()


def handed_in(model, opt, scaler, loader, accum):
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = F.cross_entropy(model(x), y)
        if (i + 1) % accum == 0:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        else:
            loss.backward()
