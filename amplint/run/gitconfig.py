"""The two git settings amplint's file discovery needs: core.excludesFile and core.ignoreCase.

Read from git's configuration files in git's order (system, global, repository, worktree,
then `GIT_CONFIG_COUNT` variables; the last value wins), following `include.path` and
`includeIf "gitdir:..."`, without running git. Other `includeIf` conditions (`onbranch:`,
`hasconfig:`) are not evaluated and their files are not read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from amplint.run.source import read_regular
from amplint.run.wildmatch import Malformed, translate

_MAX_INCLUDE_DEPTH = 10  # git's own limit
# Far above any configuration written by git or by hand (thousands of remotes and branches).
_MAX_CONFIG_FILE = 16 * 1024 * 1024
_SECTION = re.compile(r'\s*\[\s*([A-Za-z0-9.-]+)\s*(?:"((?:[^"\\]|\\.)*)"\s*)?\]')
_NAME = re.compile(r"\s*([A-Za-z][A-Za-z0-9-]*)\s*(=?)")


@dataclass
class GitConfig:
    # key ("core.excludesfile", subsection kept as written) -> values, each with the
    # directory of the file that set it
    values: Dict[str, List[Tuple[Optional[str], str]]] = field(default_factory=dict)

    def last(self, key: str) -> Optional[Tuple[Optional[str], str]]:
        found = self.values.get(key)
        return found[-1] if found else None

    def boolean(self, key: str, default: bool) -> bool:
        found = self.last(key)
        if found is None:
            return default
        value = found[0]
        if value is None:  # `ignoreCase` with no `=`
            return True
        lowered = value.strip().lower()
        if lowered in ("true", "yes", "on"):
            return True
        if lowered in ("false", "no", "off", ""):
            return False
        try:
            return int(lowered, 0) != 0
        except ValueError:
            return default

    def path(self, key: str, relative_to: str, home: Optional[str]) -> Optional[str]:
        """A pathname value: `~/` expanded, relative paths from `relative_to` (git's cwd)."""
        found = self.last(key)
        if found is None or not found[0]:
            return None
        return os.path.join(relative_to, _expand_user(found[0], home))


def _expand_user(value: str, home: Optional[str]) -> str:
    if value == "~" or value.startswith("~/"):
        return (home or "~") + value[1:]
    return os.path.expanduser(value) if value.startswith("~") else value


def read_config(git_dir: Optional[str], common_dir: Optional[str], environ: Dict[str, str]) -> GitConfig:
    config = GitConfig()
    home = environ.get("HOME")
    if not environ.get("GIT_CONFIG_NOSYSTEM"):
        _read(config, environ.get("GIT_CONFIG_SYSTEM") or "/etc/gitconfig", git_dir, environ, 0)
    if "GIT_CONFIG_GLOBAL" in environ:
        if environ["GIT_CONFIG_GLOBAL"]:
            _read(config, environ["GIT_CONFIG_GLOBAL"], git_dir, environ, 0)
    else:
        xdg = environ.get("XDG_CONFIG_HOME") or (os.path.join(home, ".config") if home else None)
        if xdg:
            _read(config, os.path.join(xdg, "git", "config"), git_dir, environ, 0)
        if home:
            _read(config, os.path.join(home, ".gitconfig"), git_dir, environ, 0)
    if common_dir is not None:
        _read(config, os.path.join(common_dir, "config"), git_dir, environ, 0)
        if git_dir is not None and config.boolean("extensions.worktreeconfig", False):
            _read(config, os.path.join(git_dir, "config.worktree"), git_dir, environ, 0)
    try:
        count = int(environ.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    for index in range(count):
        key = environ.get(f"GIT_CONFIG_KEY_{index}")
        if key:
            _set(config, _normalise_key(key), environ.get(f"GIT_CONFIG_VALUE_{index}", ""), None)
    return config


def _normalise_key(key: str) -> str:
    # Section and variable names are case-insensitive, a subsection is not.
    section, _, rest = key.partition(".")
    subsection, _, name = rest.rpartition(".")
    return ".".join(part for part in (section.lower(), subsection, name.lower()) if part)


def _set(config: GitConfig, key: str, value: Optional[str], directory: Optional[str]) -> None:
    config.values.setdefault(key, []).append((value, directory))


def _read(config: GitConfig, path: str, git_dir: Optional[str], environ: Dict[str, str], depth: int) -> None:
    if depth > _MAX_INCLUDE_DEPTH:
        return
    data = read_regular(path, _MAX_CONFIG_FILE)  # a regular file only: never a FIFO's wait
    if not isinstance(data, bytes):
        return
    text = data.decode("utf-8", "surrogateescape")
    directory = os.path.dirname(os.path.abspath(path))
    section = ""
    for key_in_section, value in _entries(text):
        if key_in_section.startswith("["):
            section = key_in_section[1:]
            continue
        key = f"{section}.{key_in_section}"
        _set(config, key, value, directory)
        if key == "include.path" or (key.startswith("includeif.") and key.endswith(".path")):
            if value is None:
                continue
            if key.startswith("includeif.") and not _condition_holds(key[len("includeif.") : -len(".path")], directory, git_dir, environ):
                continue
            included = _expand_user(value, environ.get("HOME"))
            _read(config, os.path.join(directory, included), git_dir, environ, depth + 1)


def _entries(text: str):  # type: ignore[no-untyped-def]
    """("[section" or "name", value) pairs of a config file; None for a value-less boolean."""
    lines = text.replace("\r\n", "\n").split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        stripped = line.lstrip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("["):
            match = _SECTION.match(stripped)
            if not match:
                return  # git stops at a bad line ("bad config line"): so do we
            name, subsection = match.group(1), match.group(2)
            if subsection is not None:
                section = name.lower() + "." + re.sub(r"\\(.)", r"\1", subsection)
            elif "." in name:  # the legacy [section.subsection] form
                head, _, tail = name.partition(".")
                section = f"{head.lower()}.{tail.lower()}"
            else:
                section = name.lower()
            yield "[" + section, None
            stripped = stripped[match.end() :].lstrip()
            if not stripped or stripped[0] in "#;":
                continue
        match = _NAME.match(stripped)
        if not match:
            return
        name = match.group(1).lower()
        if not match.group(2):
            yield name, None
            continue
        value, index = _value(stripped[match.end() :], lines, index)
        yield name, value


def _value(rest: str, lines: List[str], index: int) -> Tuple[str, int]:
    """A value after `=`: quotes, escapes, comments, and `\\` continuing onto the next line."""
    out: List[str] = []
    quoted = False
    trailing = 0  # unquoted whitespace at the end, dropped unless more follows
    rest = rest.lstrip(" \t")
    while True:
        i = 0
        continued = False
        while i < len(rest):
            c = rest[i]
            if c == "\\":
                if i + 1 >= len(rest):  # the value goes on on the next line
                    continued = True
                    break
                nxt = rest[i + 1]
                out.append({"n": "\n", "t": "\t", "b": "\b", "\\": "\\", '"': '"'}.get(nxt, ""))
                trailing = 0
                i += 2
                continue
            if c == '"':
                quoted = not quoted
                trailing = 0
            elif not quoted and c in "#;":
                return _strip(out, trailing), index
            elif not quoted and c in " \t":
                out.append(c)
                trailing += 1
            else:
                out.append(c)
                trailing = 0
            i += 1
        if continued and index < len(lines):
            rest = lines[index]
            index += 1
            continue
        return _strip(out, trailing), index


def _strip(out: List[str], trailing: int) -> str:
    return "".join(out[: len(out) - trailing] if trailing else out)


def _condition_holds(condition: str, directory: str, git_dir: Optional[str], environ: Dict[str, str]) -> bool:
    for prefix, casefold in (("gitdir:", False), ("gitdir/i:", True)):
        if condition.startswith(prefix):
            break
    else:
        return False  # onbranch:, hasconfig:: not evaluated
    if git_dir is None:
        return False
    pattern = condition[len(prefix) :]
    if pattern.startswith("~/"):
        pattern = _expand_user(pattern, environ.get("HOME"))
    elif pattern.startswith("./"):
        pattern = os.path.join(directory, pattern[2:])
    elif not os.path.isabs(pattern):
        pattern = "**/" + pattern
    if pattern.endswith("/"):
        pattern += "**"
    try:
        source, _ = translate(os.fsencode(pattern), pathname=True, casefold=casefold)
    except Malformed:
        return False
    regex = re.compile(source, re.DOTALL)
    candidates = {os.path.abspath(git_dir), os.path.realpath(git_dir)}
    return any(regex.fullmatch(os.fsencode(candidate)) for candidate in candidates)
