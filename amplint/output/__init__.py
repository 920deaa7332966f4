"""Output formats: each module renders a RunReport to the text written on stdout (or -o).

The names are ruff's. `text` is the old name of `full`, kept for existing scripts.
"""

from __future__ import annotations

from typing import Callable, Dict

from amplint.output import github, gitlab, json_format, junit, pylint, sarif, text

Renderer = Callable[..., str]

FORMATS: Dict[str, Renderer] = {
    "full": text.render_full,
    "concise": text.render_concise,
    "json": json_format.render,
    "json-lines": json_format.render_lines,
    "junit": junit.render,
    "github": github.render,
    "gitlab": gitlab.render,
    "pylint": pylint.render,
    "sarif": sarif.render,
    "text": text.render,
}
# Formats for a person to read: colour, the summary line, progress on a terminal.
HUMAN_FORMATS = frozenset({"full", "concise", "text"})
