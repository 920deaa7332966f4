# A scaler built only when `amp` is set, its steps gated on `amp`: correct. (Kept in its own
# file: scalers are known by name across a file, so a `scaler` parameter elsewhere in the
# same file would merge with this one and lose what its construction implies.)
import torch


def built_under_a_flag(model, opt, loss, amp):
    scaler = torch.amp.GradScaler("cuda") if amp else None
    if scaler is not None:
        scaler.scale(loss).backward()
    else:
        loss.backward()
    if amp:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
