"""A trainer that keeps its scaler on self (None unless fp16) and reads it through a local
alias in each method, and one that gates scaling on a method call bound to a local in both
places: the helper's guards survive the call, so the plain-step branch is not taken as a way
through after a scaled backward."""


class AliasTrainer:
    def __init__(self, model, optimizer, fp16):
        self.model = model
        self.optimizer = optimizer
        self.grad_scaler = torch.amp.GradScaler("cuda") if fp16 else None

    def training_step(self, batch):
        grad_scaler = self.grad_scaler
        with torch.autocast("cuda", enabled=grad_scaler is not None):
            loss = self.model(batch)
        if grad_scaler:
            grad_scaler.scale(loss).backward()
        else:
            loss.backward()
        self.optimizer_step()

    def optimizer_step(self):
        grad_scaler = self.grad_scaler
        if grad_scaler is not None:
            grad_scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if grad_scaler is not None:
            grad_scaler.step(self.optimizer)
            grad_scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad()



class PredicateTrainer:
    def __init__(self, model, optimizer, args):
        self.model = model
        self.optimizer = optimizer
        self.args = args
        self.scaler = torch.amp.GradScaler("cuda")

    def _use_grad_scaling(self, args):
        return args.fp16 and not args.bf16

    def training_step(self, batch):
        use_scaling = self._use_grad_scaling(self.args)
        with torch.autocast("cuda", enabled=use_scaling):
            loss = self.model(batch)
        if use_scaling:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        self.optimizer_step()

    def optimizer_step(self):
        use_scaling = self._use_grad_scaling(self.args)
        if use_scaling:
            self.scaler.unscale_(self.optimizer)
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if use_scaling:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
