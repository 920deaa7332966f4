"""`--show-settings` and `--show-files`: what a run would use, without linting anything.

`--show-settings` prints the configuration resolved from `[tool.amplint]` and the command
line, as TOML-like `key = value` lines; `--show-files` prints, one per line and sorted, the
files a run with the same paths and options would lint.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Iterable, Optional, Sequence, Tuple, Type

from amplint.config.options import Config
from amplint.run.discovery import Discovery
from amplint.escape import visible

if TYPE_CHECKING:
    from amplint.lint.rule import Rule


def settings(
    config: Config,
    rules: Sequence[Type[Rule]],
    discovery: Discovery,
    paths: Sequence[str],
    output_format: str,
    jobs: int,
    target: Optional[Tuple[int, int]] = None,
    fail_level: str = "error",
    analysis_limit: float = 1.0,
) -> str:
    values = [
        ("settings-file", config.path),
        ("root", config.root),
        ("paths", list(paths)),
        ("rules", [f"{rule.code} ({rule.name})" for rule in rules]),
        ("target-version", f"py{target[0]}{target[1]}" if target else None),
        ("target-torch-version", _torch(config)[0]),
        ("per-file-ignores", config.per_file_ignores),
        ("exclude", list(discovery.exclude)),
        ("extend-exclude", list(discovery.extend_exclude)),
        ("respect-gitignore", discovery.respect_gitignore),
        ("force-exclude", discovery.force_exclude),
        ("output-format", output_format),
        ("jobs", jobs),
        ("fail-level", fail_level),
        ("analysis-limit", analysis_limit),
    ]
    lines = [f"{key} = {_value(value)}" + (f"  # {_torch(config)[1]}" if key == "target-torch-version" else "") for key, value in values]
    if config.path is None:
        lines[0] += "  # no [tool.amplint] found: defaults"
    return "\n".join(lines) + "\n"


def _value(value: object) -> str:
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in value.items()) + " }" if value else "{}"
    return json.dumps(value)


def files(found: Iterable[str]) -> str:
    return "".join(f"{visible(path)}\n" for path in sorted(found))


def _torch(config: Config) -> Tuple[str, str]:
    """("1.13", "pyproject.toml: torch>=1.13"): the torch fixes must work on, and why."""
    from amplint.config.torch_target import describe

    version, source = config.torch()
    newest = getattr(version, "newest", None)
    if newest is not None:
        source += f"; newest admitted {describe(newest)}"
    return describe(version), visible(source)
