"""What applies to a file: the configuration found for it (with the command line's overrides),
the rules selected, and the codes that run on it after `per-file-ignores`.

The command (amplint.cli) and the language server (amplint.lsp) both decide this here, so an
editor shows what `amplint PATH` reports. `options` is the command line's parsed options (any
object with `isolated`, `config`, `select`, `extend_select`, `ignore`, `per_file_ignores`,
`extend_per_file_ignores` and `target_torch_version`); `DEFAULTS` stands for a command line
that names none of them.
Imports are made where they are used: the command's start-up must not load LibCST or the
rules for a run that needs neither (bench/startup.py).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Type

from amplint.config.options import Config, ConfigError, split_codes

if TYPE_CHECKING:
    from amplint.run.gitignore import PatternList
    from amplint.lint.rule import Rule

# `amplint PATH` with no option that changes the configuration or the selection.
DEFAULTS = argparse.Namespace(
    isolated=False,
    config=None,
    select=None,
    extend_select=None,
    ignore=None,
    per_file_ignores=None,
    extend_per_file_ignores=None,
    target_torch_version=None,
)


def load_config(options: Any, paths: Sequence[str]) -> Config:
    """The configuration file (`--config PATH`, else the nearest one), with the command
    line's `--config KEY=VALUE` and `--per-file-ignores` on top."""
    from amplint.config.options import defaults, find_config, load, parse_override

    files = [value for value in options.config or [] if os.path.exists(value) or "=" not in value]
    overrides = {}
    for value in options.config or []:
        if value not in files:
            overrides.update(parse_override(value))
    if len(files) > 1:
        raise ConfigError("--config names one configuration file, not " + ", ".join(files))
    if options.isolated and files:
        raise ConfigError(f"--config {files[0]} and --isolated contradict each other (--isolated ignores every configuration file)")
    if options.isolated:
        config = defaults(os.getcwd(), overrides)
    elif files:
        config = load(files[0], os.getcwd(), overrides=overrides, explicit=True)
    else:
        start = os.path.commonpath([os.path.abspath(p) for p in paths]) if paths else os.getcwd()
        config = load(find_config(start), os.getcwd(), start, overrides=overrides)
    replace = _pattern_codes(options.per_file_ignores, "--per-file-ignores")
    if replace is not None:
        config.per_file_ignores = replace
    config.per_file_ignores.update(_pattern_codes(options.extend_per_file_ignores, "--extend-per-file-ignores") or {})
    if options.target_torch_version is not None:
        from amplint.config.options import torch_version_error
        from amplint.config.torch_target import parse_torch_version

        config.torch_target = parse_torch_version(options.target_torch_version)
        if config.torch_target is None:
            raise ConfigError(torch_version_error(options.target_torch_version, "--target-torch-version"))
        config.torch_target_from = "--target-torch-version"
        config.torch_newest = None  # a configured target says nothing of the newest
    return config


def _pattern_codes(values: Optional[Sequence[str]], flag: str) -> Optional[Dict[str, List[str]]]:
    """`--per-file-ignores 'tests/*:AMP002,AMP006'` (repeatable; `a.py:AMP001,b.py:AMP002` too,
    as ruff writes it) -> {"tests/*": ["AMP002", "AMP006"], ...}."""
    if values is None:
        return None
    from amplint.run.discovery import PatternError, check_patterns

    mapping: Dict[str, List[str]] = {}
    for value in values:
        pattern = None
        for part in (p.strip() for p in value.split(",")):
            if ":" in part:
                pattern, code = (side.strip() for side in part.rsplit(":", 1))
                if not pattern:
                    raise ConfigError(f"{flag} {value!r}: a pattern is missing before `:`")
                mapping.setdefault(pattern, [])
                part = code
            elif pattern is None:
                raise ConfigError(f"{flag} {value!r}: expected GLOB:CODES, e.g. 'tests/*:AMP002'")
            if part:
                mapping[pattern].append(part)
        if pattern is not None and not mapping[pattern]:
            raise ConfigError(f"{flag} {value!r}: no rule codes after `:`")
    try:
        check_patterns(list(mapping), flag)
    except PatternError as error:
        raise ConfigError(str(error)) from None
    return mapping


def selected_rules(options: Any, config: Config, rules: Optional[Sequence[Type["Rule"]]] = None) -> Tuple[Type["Rule"], ...]:
    """The selected ones of `rules` (default: the rule classes; a run passes the catalogue's
    entries, which have the same codes and names without importing LibCST)."""
    from amplint.config.selection import require_some, resolve, validate

    if rules is None:
        from amplint.rules import ALL_RULES as rules
    cli_select = split_codes(options.select)
    if cli_select is not None:
        # The command line wins: its --select replaces the config's whole selection.
        require_some(cli_select, "--select")
        select, ignore = cli_select, []
    else:
        if config.select is not None:
            require_some(config.select, f"{config.path or '--config'}: `select`")
        select, ignore = (config.select if config.select is not None else ["ALL"]), list(config.ignore)
    extend = [*config.extend_select, *(split_codes(options.extend_select) or [])]
    ignore += split_codes(options.ignore) or []
    return resolve(
        rules,
        validate(select, rules),
        validate(extend, rules),
        validate(ignore, rules),
    )


def per_file_ignores(config: Config) -> List[Tuple["PatternList", List[str]]]:
    """The configuration's `per-file-ignores`, compiled. Raises SelectionError."""
    from amplint.lint.catalogue import RULES
    from amplint.run.gitignore import PatternList
    from amplint.config.selection import validate

    return [
        (PatternList.from_patterns(config.root, [pattern]), validate(codes, RULES))
        for pattern, codes in config.per_file_ignores.items()
    ]


def codes_for(
    path: str, rules: Sequence[Type["Rule"]], config: Config, per_file: Sequence[Tuple["PatternList", List[str]]]
) -> Tuple[str, ...]:
    """The codes of `rules` that run on `path` once its per-file ignores are taken out."""
    ignored: List[str] = []
    if per_file:
        relative = os.path.relpath(os.path.abspath(path), config.root)
        for patterns, codes in per_file:
            if patterns.ignored(relative, is_dir=False):
                ignored.extend(codes)
    return tuple(r.code for r in rules if not any(c == "ALL" or r.code.startswith(c) for c in ignored))
