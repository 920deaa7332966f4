"""An encoder and a decoder, one loss, one GradScaler: the scaler is updated after the
encoder's step and before the decoder's, so the decoder's gradients, scaled before the update,
are unscaled with the scale the update may have just changed, and no update follows."""
import torch

scaler = torch.amp.GradScaler("cuda")
opt_enc = torch.optim.Adam(encoder.parameters())
opt_dec = torch.optim.Adam(decoder.parameters())
for x, y in loader:
    with torch.autocast("cuda"):
        loss = criterion(decoder(encoder(x)), y)
    scaler.scale(loss).backward()
    scaler.step(opt_enc)
    scaler.update()
    scaler.step(opt_dec)
    opt_enc.zero_grad()
    opt_dec.zero_grad()
