"""What applies to a file: the configuration found for it, the rules selected, and the codes
that run on it after `per-file-ignores`.

The command (amplint.cli) and the language server (amplint.lsp) both decide this here, so an
editor shows what `amplint PATH` reports. `options` is the command line's parsed options (any
object with `isolated`, `config`, `select`, `extend_select` and `ignore`); `DEFAULTS` stands
for a command line that names none of them.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, List, Sequence, Tuple, Type

from amplint.config import Config, find_pyproject, load, split_codes
from amplint.gitignore import PatternList
from amplint.rule import Rule
from amplint.rules import ALL_RULES
from amplint.selection import require_some, resolve, validate

# `amplint PATH` with no option that changes the configuration or the selection.
DEFAULTS = argparse.Namespace(isolated=False, config=None, select=None, extend_select=None, ignore=None)


def load_config(options: Any, paths: Sequence[str]) -> Config:
    """The configuration for `paths`: `--isolated`, `--config FILE`, else the pyproject.toml
    found upwards from their common directory. Raises ConfigError."""
    if options.isolated:
        return Config(root=os.getcwd())
    if options.config:
        return load(options.config, os.getcwd())
    start = os.path.commonpath([os.path.abspath(p) for p in paths]) if paths else os.getcwd()
    return load(find_pyproject(start), os.getcwd(), start)


def selected_rules(options: Any, config: Config) -> Tuple[Type[Rule], ...]:
    """The rules the configuration and the command line select. Raises SelectionError."""
    cli_select = split_codes(options.select)
    if cli_select is not None:
        # The command line wins: its --select replaces the config's whole selection.
        require_some(cli_select, "--select")
        select, ignore = cli_select, []
    else:
        if config.select is not None:
            require_some(config.select, f"{config.path}: `select`")
        select, ignore = (config.select if config.select is not None else ["ALL"]), list(config.ignore)
    extend = [*config.extend_select, *(split_codes(options.extend_select) or [])]
    ignore += split_codes(options.ignore) or []
    return resolve(
        ALL_RULES,
        validate(select, ALL_RULES),
        validate(extend, ALL_RULES),
        validate(ignore, ALL_RULES),
    )


def per_file_ignores(config: Config) -> List[Tuple[PatternList, List[str]]]:
    """The configuration's `per-file-ignores`, compiled. Raises SelectionError."""
    return [
        (PatternList.from_patterns(config.root, [pattern]), validate(codes, ALL_RULES))
        for pattern, codes in config.per_file_ignores.items()
    ]


def codes_for(
    path: str, rules: Sequence[Type[Rule]], config: Config, per_file: Sequence[Tuple[PatternList, List[str]]]
) -> Tuple[str, ...]:
    """The codes of `rules` that run on `path` once its per-file ignores are taken out."""
    ignored: List[str] = []
    if per_file:
        relative = os.path.relpath(os.path.abspath(path), config.root)
        for patterns, codes in per_file:
            if patterns.ignored(relative, is_dir=False):
                ignored.extend(codes)
    return tuple(r.code for r in rules if not any(c == "ALL" or r.code.startswith(c) for c in ignored))
