# One scaler, two optimizers: what the scaler does not step still holds scaled gradients.
import torch


def train(model, head, loader, opt_body, opt_head):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = head(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt_body)
        opt_head.step()  # applies gradients that still carry the scale
        scaler.update()
        opt_body.zero_grad()
        opt_head.zero_grad()


def train_both_through_the_scaler(model, head, loader, opt_body, opt_head):
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = head(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt_body)
        scaler.step(opt_head)
        scaler.update()
        opt_body.zero_grad()
        opt_head.zero_grad()


def actor_critic(actor, critic, batch, opt_actor, opt_critic, scaler):
    # The fp32 critic backpropagates on its own: its gradients were never scaled, and neither
    # the scaler's step of the actor nor the critic's plain step is wrong.
    value_loss = critic.loss(batch)
    value_loss.backward()
    with torch.autocast("cuda"):
        policy_loss = actor.loss(batch)
    scaler.scale(policy_loss).backward()
    scaler.step(opt_actor)
    opt_critic.step()
    scaler.update()


def calibrate_after_training(model, loader, logits, labels, scaler, opt_model):
    # LBFGS's step(closure) computes its own gradients: the scaled ones left from training
    # are not what it applies.
    temperature = torch.nn.Parameter(torch.ones(1))
    opt_temp = torch.optim.LBFGS([temperature], lr=0.01, max_iter=50)
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt_model.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt_model)
        scaler.update()

    def closure():
        opt_temp.zero_grad()
        nll = torch.nn.functional.cross_entropy(logits / temperature, labels)
        nll.backward()
        return nll

    opt_temp.step(closure)
