# unscale_ in a loop over a literal tuple of optimizers runs at least once; a scaler kept in a
# dict still scales; a clipping helper called before unscale_ is a clip before unscale_.
import torch


def two_optimizers(model, loss, scaler, opt_enc, opt_dec, params, clip):
    scaler.scale(loss).backward()
    for opt in (opt_enc, opt_dec):
        scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, clip)
    scaler.step(opt_enc)


def dict_scaler(model, x, opt):
    amp = {"scaler": torch.amp.GradScaler("cuda"), "dtype": torch.float16}
    with torch.autocast("cuda", dtype=amp["dtype"]):
        loss = model(x)
    amp["scaler"].scale(loss).backward()
    amp["scaler"].step(opt)


def clip_gradients(model, max_norm):
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def clip_in_helper(model, loss, scaler, opt):
    scaler.scale(loss).backward()
    clip_gradients(model, 1.0)
    scaler.step(opt)
