"""Which rules apply to a file the editor holds: exactly what `amplint PATH --force-exclude`
would apply, from the `[tool.amplint]` found upwards from the file (amplint.config.per_file, which
the command uses too).

An open file that the configuration excludes (`exclude`, `extend-exclude`, the defaults such
as `site-packages`, `.gitignore`) gets no rules, as pre-commit's `--force-exclude` run would:
jumping to a library's definition does not fill the editor with its findings.
"""

from __future__ import annotations

import logging
import os
from typing import Optional, Set, Tuple, Type

from amplint.run.discovery import DEFAULT_EXCLUDES, Discovery
from amplint.run.driver import FixRequest
from amplint.lint.rule import Rule
from amplint.rules import ALL_RULES
from amplint.config.selection import validate
from amplint.config.per_file import DEFAULTS, codes_for, load_config, per_file_ignores, selected_rules
from amplint.lint.syntax import PythonVersion


logger = logging.getLogger(__name__)
_told: Set[str] = set()  # notes already logged: each once a session, not once a keystroke


def _anchor(path: Optional[str]) -> str:
    return path if path is not None else os.path.join(os.getcwd(), "untitled.py")


def rules_for(path: Optional[str]) -> Tuple[Tuple[Type[Rule], ...], Optional[PythonVersion], Tuple[int, int]]:
    """The rules for `path` (None: an unsaved buffer, configured from the working directory),
    the Python version its syntax is judged against (`target-version`), and the oldest torch
    its fixes must work on (`target-torch-version`, else the project's requirement).

    Raises ConfigError or SelectionError for a broken configuration, as the command does."""
    anchor = _anchor(path)
    config = load_config(DEFAULTS, [anchor])
    for note in config.notes:
        if note not in _told:
            _told.add(note)
            logger.warning("amplint: %s", note)
    rules = selected_rules(DEFAULTS, config)
    per_file = per_file_ignores(config)
    if path is not None:
        discovery = Discovery(
            root=config.root,
            exclude=config.exclude or DEFAULT_EXCLUDES,
            extend_exclude=config.extend_exclude,
            respect_gitignore=config.respect_gitignore,
            force_exclude=True,
        )
        if discovery.is_excluded(path, is_dir=False):
            return (), config.target_version, config.torch()[0]
    codes = codes_for(anchor, rules, config, per_file)
    return tuple(rule for rule in rules if rule.code in codes), config.target_version, config.torch()[0]


def safe_fixes_for(path: Optional[str]) -> FixRequest:
    """The fixes `source.fixAll` applies to `path`: the safe ones of the rules the
    configuration's `fixable` and `unfixable` leave fixable, as `amplint --fix` would."""
    config = load_config(DEFAULTS, [_anchor(path)])
    return FixRequest(False, tuple(validate(config.fixable, ALL_RULES)), tuple(validate(config.unfixable, ALL_RULES)))
