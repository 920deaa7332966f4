# ignite's create_supervised_trainer runs its own update: with amp_mode="amp" it autocasts the
# forward (float16 on CUDA), and only with scaler=True (or a GradScaler) does it scale the loss.
import torch
from ignite.engine import create_supervised_evaluator, create_supervised_trainer

device = "cuda"
model = torch.nn.Linear(10, 2).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
criterion = torch.nn.CrossEntropyLoss()

# Mistakes: float16 autocast with no scaler (the default, and said explicitly).
trainer = create_supervised_trainer(model, optimizer, criterion, device, amp_mode="amp")
unscaled = create_supervised_trainer(model, optimizer, criterion, device=device, amp_mode="amp", scaler=False)

# Right: ignite builds a GradScaler, or is handed one; apex's own amp; no amp at all; the CPU.
scaled = create_supervised_trainer(model, optimizer, criterion, device, amp_mode="amp", scaler=True)
handed = create_supervised_trainer(model, optimizer, criterion, device, amp_mode="amp", scaler=torch.amp.GradScaler("cuda"))
apex = create_supervised_trainer(model, optimizer, criterion, device, amp_mode="apex")
plain = create_supervised_trainer(model, optimizer, criterion, device)
on_cpu = create_supervised_trainer(model, optimizer, criterion, "cpu", amp_mode="amp")
evaluator = create_supervised_evaluator(model, device=device, amp_mode="amp")


def build(config):
    # A scaler setting the file cannot resolve is not taken for off.
    return create_supervised_trainer(model, optimizer, criterion, device, amp_mode="amp", scaler=config.use_scaler)
