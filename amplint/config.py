"""`[tool.amplint]` in pyproject.toml, merged with the command line (the command line wins)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

KNOWN_KEYS = (
    "select",
    "extend-select",
    "ignore",
    "exclude",
    "extend-exclude",
    "per-file-ignores",
    "respect-gitignore",
)


class ConfigError(ValueError):
    pass


@dataclass
class Config:
    root: str  # the directory the config's paths and patterns are relative to
    path: Optional[str] = None  # the pyproject.toml it came from
    select: Optional[List[str]] = None
    extend_select: List[str] = field(default_factory=list)
    ignore: List[str] = field(default_factory=list)
    exclude: Optional[List[str]] = None
    extend_exclude: List[str] = field(default_factory=list)
    per_file_ignores: Dict[str, List[str]] = field(default_factory=dict)
    respect_gitignore: bool = True


def find_pyproject(start: str) -> Optional[str]:
    """The nearest pyproject.toml with a [tool.amplint] table, from `start` upwards."""
    directory = os.path.abspath(start)
    if not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    while True:
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate) and _has_amplint_table(candidate):
            return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _has_amplint_table(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    try:
        tool = tomllib.loads(data.decode("utf-8", errors="replace")).get("tool")
    except tomllib.TOMLDecodeError as error:
        # A broken file that meant to configure amplint must not be skipped in silence
        # (a parent directory's configuration would quietly apply instead).
        if b"tool.amplint" in data:
            raise ConfigError(f"{path} is not valid TOML: {error}") from None
        return False
    return isinstance(tool, dict) and "amplint" in tool


def load(path: Optional[str], fallback_root: str) -> Config:
    if path is None:
        return Config(root=os.path.abspath(fallback_root))
    try:
        with open(path, "rb") as handle:
            document = tomllib.load(handle)
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: {error}") from None
    tool = document.get("tool", {})
    table = tool.get("amplint", {}) if isinstance(tool, dict) else {}
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.amplint] must be a table")
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) in [tool.amplint]: {', '.join(unknown)} (known: {', '.join(KNOWN_KEYS)})")
    config = Config(root=os.path.dirname(os.path.abspath(path)), path=path)
    config.select = _strings(table, "select", path, optional=True)
    config.extend_select = _strings(table, "extend-select", path) or []
    config.ignore = _strings(table, "ignore", path) or []
    config.exclude = _strings(table, "exclude", path, optional=True)
    config.extend_exclude = _strings(table, "extend-exclude", path) or []
    per_file = table.get("per-file-ignores", {})
    if not isinstance(per_file, dict) or not all(
        isinstance(v, list) and all(isinstance(c, str) for c in v) for v in per_file.values()
    ):
        raise ConfigError(f"{path}: per-file-ignores must map glob patterns to lists of rule codes")
    config.per_file_ignores = dict(per_file)
    respect = table.get("respect-gitignore", True)
    if not isinstance(respect, bool):
        raise ConfigError(f"{path}: respect-gitignore must be true or false")
    config.respect_gitignore = respect
    return config


def _strings(table: Dict[str, Any], key: str, path: str, optional: bool = False) -> Optional[List[str]]:
    if key not in table:
        return None if optional else []
    value = table[key]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"{path}: `{key}` must be a list of strings")
    return list(value)


def split_codes(values: Optional[Sequence[str]]) -> Optional[List[str]]:
    """`--select AMP001,AMP003 --select AMP005` -> [AMP001, AMP003, AMP005]."""
    if values is None:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]
