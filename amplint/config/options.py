"""The configuration: `.amplint.toml` or `amplint.toml` (top-level keys), or `[tool.amplint]` in
pyproject.toml, merged with the command line (the command line wins).

As in ruff, the closest directory with a configuration wins, and within one directory
`.amplint.toml` comes before `amplint.toml`, which comes before a pyproject.toml with a
`[tool.amplint]` table (one without it is passed over). docs/configuration.md has every key.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from amplint.lint.diagnostics import FileError
from amplint.run.discovery import PatternError, check_patterns
from amplint.run.source import read_declared
from amplint.config.torch_target import ASSUMED, TorchTarget, TorchVersion, declared_torch, parse_torch_version
from amplint.work import MAX_FACTOR, check_factor

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
    "target-torch-version",
    "output-format",
    "cache-dir",
    "jobs",
    "fail-level",
    "analysis-limit",
    "syntax-errors",
)
# The lowest severity of finding that fails a run (exit 1): `error` by default, so warnings
# are reported without breaking a build unless asked for.
FAIL_LEVELS = ("error", "warning")
# Which files' syntax errors a run reports: those amplint analyses (files with AMP words: a file
# without them can hold no AMP finding, and the project's own linter or interpreter reports its
# syntax errors), or every file it is given.
SYNTAX_ERRORS = ("analysed", "all")
# Looked for in each directory, in this order (ruff's: .ruff.toml, ruff.toml, pyproject.toml).
CONFIG_FILES = (".amplint.toml", "amplint.toml", "pyproject.toml")
# The Python versions a project can target: the grammars amplint can parse (LibCST knows
# up to 3.14).
TARGET_VERSIONS = tuple(f"py3{minor}" for minor in range(7, 15))
PythonVersion = Tuple[int, int]


class ConfigError(ValueError):
    pass


@dataclass
class Config:
    root: str  # the directory the config's paths and patterns are relative to
    path: Optional[str] = None  # the file it came from (amplint.toml, pyproject.toml, ...)
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
    # The oldest torch the project supports: a fix that needs a newer one is unsafe
    # (amplint.config.torch_target). None: not configured or declared, `ASSUMED`. `torch_target_from`
    # says where it came from.
    torch_target: Optional[TorchVersion] = None
    torch_target_from: Optional[str] = None
    # The newest torch the project's declarations admit (None: no upper bound, or not declared).
    torch_newest: Optional[TorchVersion] = None
    # `--fix`: the rules whose fixes may be applied (ruff's `fixable`/`unfixable`), and
    # whether unsafe fixes are applied without `--unsafe-fixes`.
    fixable: List[str] = field(default_factory=lambda: ["ALL"])
    unfixable: List[str] = field(default_factory=list)
    unsafe_fixes: bool = False
    # Defaults for what the command line can say too: --output-format, --cache-dir (absolute
    # here), --jobs (0: one per CPU). None: not configured.
    output_format: Optional[str] = None
    cache_dir: Optional[str] = None
    jobs: Optional[int] = None
    # Exit 1 for findings of this severity or worse (FAIL_LEVELS), and the factor on the
    # analysis' work limits (amplint.work).
    fail_level: str = "error"
    analysis_limit: float = 1.0
    syntax_errors: str = "analysed"  # SYNTAX_ERRORS
    # What the user should hear about the configuration: a declaration file not read, and why.
    notes: List[str] = field(default_factory=list)

    def torch(self) -> Tuple[TorchVersion, str]:
        """The torch fixes must work on, and where that comes from."""
        if self.torch_target is not None:
            return TorchTarget(self.torch_target, self.torch_newest), self.torch_target_from or "target-torch-version"
        return TorchTarget(ASSUMED), "assumed: the project declares no lower bound on torch"


def find_config(start: str) -> Optional[str]:
    """The nearest configuration from `start` upwards: in the closest directory that has one,
    .amplint.toml, else amplint.toml, else a pyproject.toml with a [tool.amplint] table."""
    directory = os.path.abspath(start)
    if not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    while True:
        for name in CONFIG_FILES:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and (name != "pyproject.toml" or _has_amplint_table(candidate)):
                return candidate
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


# Its old name, from when pyproject.toml was the only configuration file.
find_pyproject = find_config


def _has_amplint_table(path: str) -> bool:
    data = read_declared(path)
    if isinstance(data, FileError):
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


def load(
    path: Optional[str],
    fallback_root: str,
    start: Optional[str] = None,
    overrides: Optional[Dict[str, Any]] = None,
    explicit: bool = False,
) -> Config:
    """The configuration in `path`, with `overrides` (`--config KEY=VALUE`) on top; with no
    file, the defaults and the overrides, rooted at `fallback_root`, and the grammar of the
    nearest pyproject.toml's requires-python above `start`. `explicit`: the file was named
    (`--config PATH`), so one with nothing for amplint is an error, not the defaults."""
    overrides = overrides or {}
    if path is None:
        config = defaults(fallback_root, overrides)
        if config.target_version is None:
            config.target_version = project_python(start or fallback_root)
        _declared_torch(config, start or fallback_root)
        return config
    document = _read_toml(path)
    table = _amplint_table(document, path, explicit)
    section = " in [tool.amplint]" if _is_pyproject_style(document, path) else ""
    config = _from_table({**table, **overrides}, path, os.path.dirname(os.path.abspath(path)), path, section)
    if config.target_version is None:
        # A pyproject.toml's own requires-python; beside an amplint.toml, the nearest one's.
        config.target_version = requires_python(document) if _is_pyproject_style(document, path) else project_python(config.root)
    _declared_torch(config, config.root)
    return config


def _declared_torch(config: Config, start: str) -> None:
    """Without `target-torch-version`: the oldest torch the project's requirement admits."""
    if config.torch_target is None:
        declared = declared_torch(start, config.notes)
        if declared is not None:
            config.torch_target, config.torch_target_from, config.torch_newest = declared.version, declared.where, declared.newest


OVERRIDE = "--config KEY=VALUE"


def defaults(root: str, overrides: Optional[Dict[str, Any]] = None) -> Config:
    """No configuration file (`--isolated`, or none found): the defaults and the overrides."""
    return _from_table(overrides or {}, OVERRIDE, os.path.abspath(root), None)


def parse_override(text: str) -> Dict[str, Any]:
    """`--config "select = ['AMP003']"`: one line of TOML whose keys are amplint's (ruff's
    inline configuration)."""
    try:
        table = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as error:
        raise ConfigError(f"--config {text!r} is neither a file nor a valid `KEY = VALUE` TOML line: {error}") from None
    if not table:
        raise ConfigError(f"--config {text!r} sets nothing")
    _from_table(table, f"--config {text!r}", os.getcwd(), None)  # its keys and values, checked alone
    return table


def _is_pyproject_style(document: Dict[str, Any], path: str) -> bool:
    """A pyproject.toml, or another file with a [tool.amplint] table (`--config ci.toml`)."""
    tool = document.get("tool")
    return os.path.basename(path) == "pyproject.toml" or (isinstance(tool, dict) and "amplint" in tool)


def _amplint_table(document: Dict[str, Any], path: str, explicit: bool) -> Dict[str, Any]:
    if _is_pyproject_style(document, path):
        tool = document.get("tool", {})
        table = tool.get("amplint") if isinstance(tool, dict) else None
        if table is None:
            if explicit:
                raise ConfigError(f"{path} has no [tool.amplint] table: nothing in it configures amplint")
            return {}
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: [tool.amplint] must be a table")
        return table
    # amplint.toml, .amplint.toml or another file named by --config: top-level keys. An
    # empty one found by the search is the defaults; one named explicitly must say something.
    if explicit and not any(key in KNOWN_KEYS for key in document):
        found = f" (it has: {', '.join(sorted(document))})" if document else " (it is empty)"
        raise ConfigError(
            f"{path} has nothing for amplint: no [tool.amplint] table and no top-level amplint key{found}; "
            f"known keys: {', '.join(KNOWN_KEYS)}"
        )
    return document


def _from_table(table: Dict[str, Any], path: str, root: str, source: Optional[str], section: str = "") -> Config:
    """A Config from amplint's keys; `path` (and `section`) name where they came from in every error."""
    unknown = sorted(set(table) - set(KNOWN_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown key(s){section}: {', '.join(unknown)} (known: {', '.join(KNOWN_KEYS)})")
    for key, value in table.items():
        if _has_nul(value):
            # Valid TOML (`"a\u0000b"`), but no path, pattern or name can hold one.
            raise ConfigError(f"{path}: `{key}` contains a NUL character")
    config = Config(root=root, path=source)
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
    config.respect_gitignore = _boolean(table, "respect-gitignore", True, path)
    config.fixable = _strings(table, "fixable", path, optional=True) or ["ALL"]
    config.unfixable = _strings(table, "unfixable", path) or []
    config.unsafe_fixes = _boolean(table, "unsafe-fixes", False, path)
    fail_level = table.get("fail-level", "error")
    if fail_level not in FAIL_LEVELS:
        raise ConfigError(f"{path}: fail-level must be one of {', '.join(repr(l) for l in FAIL_LEVELS)}")
    config.fail_level = fail_level
    limit = table.get("analysis-limit", 1.0)
    try:
        if isinstance(limit, bool) or not isinstance(limit, (int, float)):
            raise ValueError(limit)
        config.analysis_limit = check_factor(limit)
    except ValueError:
        raise ConfigError(f"{path}: analysis-limit must be a positive number (a factor on the default limits) of at most {MAX_FACTOR:g}, not {limit!r}") from None
    syntax_errors = table.get("syntax-errors", "analysed")
    if syntax_errors not in SYNTAX_ERRORS:
        raise ConfigError(f"{path}: syntax-errors must be one of {', '.join(repr(s) for s in SYNTAX_ERRORS)}")
    config.syntax_errors = syntax_errors
    config.target_version = _target_version(table, path)
    if "target-torch-version" in table:
        config.torch_target = parse_torch_version(table["target-torch-version"])
        if config.torch_target is None:
            raise ConfigError(torch_version_error(table["target-torch-version"], path))
        config.torch_target_from = "target-torch-version"
    config.output_format = _output_format(table, path)
    if "cache-dir" in table:
        if not isinstance(table["cache-dir"], str) or not table["cache-dir"]:
            raise ConfigError(f"{path}: cache-dir must be a directory (a string)")
        config.cache_dir = os.path.join(root, os.path.expanduser(table["cache-dir"]))
    if "jobs" in table:
        jobs = table["jobs"]
        if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0:
            raise ConfigError(f"{path}: jobs must be a whole number of worker processes (0: one per CPU), not {jobs!r}")
        config.jobs = jobs
    try:
        check_patterns(config.exclude or [], "`exclude`")
        check_patterns(config.extend_exclude, "`extend-exclude`")
        check_patterns(list(config.per_file_ignores), "`per-file-ignores`")
    except PatternError as error:
        raise ConfigError(f"{path}: {error}") from None
    return config


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\0" in value
    if isinstance(value, dict):
        return any(_has_nul(key) or _has_nul(item) for key, item in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


def _boolean(table: Dict[str, Any], key: str, default: bool, path: str) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{path}: {key} must be true or false")
    return value


def _output_format(table: Dict[str, Any], path: str) -> Optional[str]:
    if "output-format" not in table:
        return None
    from amplint.output import FORMATS  # only when configured: the renderers cost start-up time

    value = table["output-format"]
    if value not in FORMATS:
        names = ", ".join(name for name in FORMATS if name != "text")
        raise ConfigError(f"{path}: output-format must be one of {names}, not {value!r}")
    return "full" if value == "text" else value


def _read_toml(path: str) -> Dict[str, Any]:
    data = read_declared(path)
    if isinstance(data, FileError):
        raise ConfigError(f"cannot read {path}: {data.message.replace('cannot read file: ', '')}")
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


def torch_version_error(value: Any, where: str) -> str:
    return f"{where}: target-torch-version must be a torch release as a string, \"MAJOR.MINOR\" (\"2.2\", \"1.13\"), not {value!r}"


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
