"""Whether to colour what is written: `--color`, then the environment, then the terminal.

`--color always|never` wins. Otherwise `FORCE_COLOR` (any non-empty value) turns colour on,
as ruff and the force-color.org convention do, even over `NO_COLOR`; `NO_COLOR` (non-empty,
no-color.org) turns it off; else colour only when writing to a terminal. A file named with
`-o` gets colour only with `--color always`.
"""

from __future__ import annotations

import os
from typing import Mapping, Optional, TextIO


def use_color(choice: str, stream: Optional[TextIO], environ: Mapping[str, str] = os.environ) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    if environ.get("FORCE_COLOR"):
        return True
    if environ.get("NO_COLOR"):
        return False
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False
