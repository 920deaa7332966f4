"""Output formats: each module renders a RunReport to the text written on stdout."""

from __future__ import annotations

from typing import Callable, Dict

from amplint.output import github, json_format, sarif, text

Renderer = Callable[..., str]

FORMATS: Dict[str, Renderer] = {
    "text": text.render,
    "json": json_format.render,
    "github": github.render,
    "sarif": sarif.render,
}
