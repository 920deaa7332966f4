"""`[tool.amplint]` in pyproject.toml, merged with the command line (the command line wins)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from amplint.discovery import PatternError, check_patterns

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
    "fixable",
    "unfixable",
    "unsafe-fixes",
    "respect-gitignore",
    "target-version",
    "fail-level",
    "analysis-limit",
)
# The lowest severity of finding that fails a run (exit 1): `error` by default, so warnings
# are reported without breaking a build unless asked for.
FAIL_LEVELS = ("error", "warning")
# The Python versions a project can target: the grammars amplint can parse (LibCST knows
# up to 3.14).
TARGET_VERSIONS = tuple(f"py3{minor}" for minor in range(7, 15))
PythonVersion = Tuple[int, int]


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
    # The Python the project runs on: its grammar decides what is a syntax error. None: the
    # newest grammar amplint knows.
    target_version: Optional[PythonVersion] = None
    # `--fix`: the rules whose fixes may be applied (ruff's `fixable`/`unfixable`), and
    # whether unsafe fixes are applied without `--unsafe-fixes`.
    fixable: List[str] = field(default_factory=lambda: ["ALL"])
    unfixable: List[str] = field(default_factory=list)
    unsafe_fixes: bool = False
    # Exit 1 for findings of this severity or worse (FAIL_LEVELS), and the factor on the
    # analysis' work limits (amplint.work).
    fail_level: str = "error"
    analysis_limit: float = 1.0


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
    except (tomllib.TOMLDecodeError, RecursionError) as error:
        # A broken file that meant to configure amplint must not be skipped in silence
        # (a parent directory's configuration would quietly apply instead).
        if b"tool.amplint" in data:
            raise ConfigError(f"{path} is not valid TOML: {error}") from None
        return False
    return isinstance(tool, dict) and "amplint" in tool


def load(path: Optional[str], fallback_root: str, start: Optional[str] = None) -> Config:
    """The configuration in `path`; with no file, the defaults, rooted at `fallback_root`, and
    the grammar of the nearest pyproject.toml's requires-python above `start`."""
    if path is None:
        return Config(root=os.path.abspath(fallback_root), target_version=project_python(start or fallback_root))
    document = _read_toml(path)
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
    config.fixable = _strings(table, "fixable", path, optional=True) or ["ALL"]
    config.unfixable = _strings(table, "unfixable", path) or []
    unsafe = table.get("unsafe-fixes", False)
    if not isinstance(unsafe, bool):
        raise ConfigError(f"{path}: unsafe-fixes must be true or false")
    config.unsafe_fixes = unsafe
    fail_level = table.get("fail-level", "error")
    if fail_level not in FAIL_LEVELS:
        raise ConfigError(f"{path}: fail-level must be one of {', '.join(repr(l) for l in FAIL_LEVELS)}")
    config.fail_level = fail_level
    limit = table.get("analysis-limit", 1.0)
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit < float("inf"):
        raise ConfigError(f"{path}: analysis-limit must be a positive number (a factor on the default limits)")
    config.analysis_limit = float(limit)
    config.target_version = _target_version(table, path)
    if config.target_version is None:
        config.target_version = requires_python(document)
    try:
        check_patterns(config.exclude or [], "`exclude`")
        check_patterns(config.extend_exclude, "`extend-exclude`")
        check_patterns(list(config.per_file_ignores), "`per-file-ignores`")
    except PatternError as error:
        raise ConfigError(f"{path}: {error}") from None
    return config


def _read_toml(path: str) -> Dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML: not UTF-8 (invalid byte at offset {error.start})") from None
    except (tomllib.TOMLDecodeError, RecursionError) as error:
        raise ConfigError(f"{path} is not valid TOML: {error or 'nested too deeply'}") from None


def parse_target_version(value: Any) -> Optional[PythonVersion]:
    """`py312` -> (3, 12); None if it is not a version amplint knows."""
    if not isinstance(value, str) or value not in TARGET_VERSIONS:
        return None
    return (3, int(value[3:]))


def target_version_error(value: Any, where: str) -> str:
    return f"{where}: target-version must be one of {', '.join(TARGET_VERSIONS)}, not {value!r}"


def _target_version(table: Dict[str, Any], path: str) -> Optional[PythonVersion]:
    if "target-version" not in table:
        return None
    version = parse_target_version(table["target-version"])
    if version is None:
        raise ConfigError(target_version_error(table["target-version"], path))
    return version


_SPECIFIER = re.compile(r"\s*(~=|===|==|!=|<=|>=|<|>)\s*(\d+)(?:\.(\d+|\*))?(?:\.[0-9a-z*]+)*\s*")


def requires_python(document: Dict[str, Any]) -> Optional[PythonVersion]:
    """The oldest Python a `[project] requires-python` admits, as ruff reads it; None if unknown.

    `>=3.9` and `~=3.9` -> (3, 9); `>=3.9, <3.13` -> (3, 9); `==3.11.*` -> (3, 11). Upper
    bounds and exclusions do not make the grammar older or newer. A specifier amplint cannot
    read leaves the grammar at the newest.
    """
    project = document.get("project")
    value = project.get("requires-python") if isinstance(project, dict) else None
    if not isinstance(value, str):
        return None
    lower: Optional[PythonVersion] = None
    for clause in value.split(","):
        if not clause.strip():
            continue
        match = _SPECIFIER.fullmatch(clause)
        if match is None:
            return None
        operator, major, minor = match.group(1), int(match.group(2)), match.group(3)
        if operator in ("<", "<=", "!="):
            continue
        if major != 3:
            return None
        version = (3, int(minor) if minor and minor != "*" else 0)
        lower = version if lower is None else max(lower, version)
    return lower


def project_python(start: str) -> Optional[PythonVersion]:
    """requires-python of the nearest pyproject.toml above `start`, for a project without
    [tool.amplint]. A broken file there is not amplint's to report."""
    directory = os.path.abspath(start)
    if not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    while True:
        candidate = os.path.join(directory, "pyproject.toml")
        if os.path.isfile(candidate):
            try:
                return requires_python(_read_toml(candidate))
            except ConfigError:
                return None
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


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
