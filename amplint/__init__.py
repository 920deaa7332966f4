"""amplint: catch PyTorch automatic-mixed-precision mistakes before they silently ruin a training run."""

__version__ = "0.2.0"
