"""git's ignore rules, exactly as git applies them, without running git.

A file is ignored when git would ignore it: the `.gitignore` files from the repository root
down to the file's directory (a deeper file wins, and within a file the last matching
pattern), then `$GIT_DIR/info/exclude`, then `core.excludesFile` (default
`~/.config/git/ignore`). A path inside an ignored directory is ignored whatever a later `!`
pattern says, because git never looks inside that directory. Patterns are git's `wildmatch`
(`amplint.run.wildmatch`, regular expressions over bytes, so non-UTF-8 names match as git
matches them); `core.ignoreCase` is honoured.

git accepts every pattern: one it cannot use (`[z-a`, a lone `\\`) simply never matches, and
so it is here. Patterns the user gives amplint itself (`--exclude`) are checked with
`pattern_problem` first, and a bad one is a usage error.

Nothing here runs git: amplint must work where git is not installed (a Docker image, a
pre-commit environment). The tests compare every verdict with `git check-ignore`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Pattern, Sequence, Tuple

from amplint.run.source import read_regular
from amplint.run.wildmatch import Malformed, literal, lower, translate

# git skips ignore files larger than this (dir.c, PATTERN_MAX_FILE_SIZE).
_MAX_IGNORE_FILE = 100 * 1024 * 1024
_NEVER = re.compile(rb"(?!)")

# --------------------------------------------------------------------------- patterns


@dataclass(frozen=True)
class IgnorePattern:
    """One line of an ignore file, parsed as dir.c's parse_path_pattern does."""

    text: str  # as written, for messages
    negated: bool
    directory_only: bool  # a trailing `/`
    basename_only: bool  # no `/` except a trailing one: matches the name at any depth
    regex: Pattern[bytes]


def _simple_length(body: bytes) -> int:
    """How many leading bytes are plain (dir.c's simple_length)."""
    for index, c in enumerate(body):
        if c in b"*?[\\":
            return index
    return len(body)


def parse_pattern(line: bytes, casefold: bool = False) -> Tuple[IgnorePattern, Optional[str]]:
    """A pattern, and what is wrong with it for a user who typed it (None if nothing)."""
    line = line.split(b"\0", 1)[0]  # git reads each line as a C string
    text = line.decode("utf-8", "surrogateescape")
    body = line
    negated = body.startswith(b"!")
    if negated:
        body = body[1:]
    directory_only = body.endswith(b"/")
    if directory_only:
        body = body[:-1]
    basename_only = b"/" not in body
    problem: Optional[str] = None
    try:
        if basename_only:
            source, problem = translate(body, pathname=False, casefold=casefold)
        else:
            # match_pathname compares the plain head literally and wildmatches only the
            # rest, as a pattern of its own: so in `foo**/bar` the `**` counts as leading
            # and spans directories.
            body = body[1:] if body.startswith(b"/") else body
            head = _simple_length(body)
            rest, problem = translate(body[head:], pathname=True, casefold=casefold)
            source = b"".join(literal(lower(c) if casefold else c, casefold) for c in body[:head]) + rest
        regex = re.compile(source, re.DOTALL)
    except Malformed as error:
        regex, problem = _NEVER, str(error)
    if not body and problem is None:
        problem = "`!` negates nothing" if negated else "matches nothing"
    return IgnorePattern(text, negated, directory_only, basename_only, regex), problem


def pattern_problem(pattern: str) -> Optional[str]:
    """Why a pattern a user gave amplint is unusable, or None. git would silently ignore it."""
    if not pattern.strip():
        return "the pattern is empty"
    if pattern.startswith("#"):
        return "a pattern starting with `#` is a comment (write `\\#` for a name that starts with #)"
    return parse_pattern(_trim(os.fsencode(pattern)))[1]


def _trim(line: bytes) -> bytes:
    """git's trim_trailing_spaces: drop unescaped trailing spaces (not tabs)."""
    last_space = None
    i = 0
    while i < len(line):
        c = line[i]
        if c == 0x20:
            if last_space is None:
                last_space = i
        elif c == ord("\\"):
            i += 1
            if i >= len(line):
                return line
            last_space = None
        else:
            last_space = None
        i += 1
    return line if last_space is None else line[:last_space]


def parse_lines(data: bytes, casefold: bool = False) -> List[IgnorePattern]:
    """The patterns of an ignore file, as add_patterns_from_buffer reads it."""
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    patterns = []
    for line in data.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line or line.startswith(b"#"):
            continue
        line = _trim(line)
        if line:
            patterns.append(parse_pattern(line, casefold)[0])
    return patterns


@dataclass
class PatternList:
    """The patterns of one ignore file (or of --exclude), relative to `base`."""

    base: bytes  # absolute directory, os.fsencode'd, no trailing separator
    patterns: Sequence[IgnorePattern]

    @classmethod
    def from_patterns(cls, base: str, lines: Iterable[str], casefold: bool = False) -> "PatternList":
        encoded = b"\n".join(os.fsencode(line) for line in lines)
        return cls(os.fsencode(base), parse_lines(encoded, casefold))

    def decide(self, relative: bytes, is_dir: bool) -> Optional[bool]:
        """True (ignored) or False (re-included by `!`) by the last matching pattern; None if none."""
        basename = relative.rsplit(b"/", 1)[-1]
        for pattern in reversed(self.patterns):
            if pattern.directory_only and not is_dir:
                continue
            if pattern.regex.fullmatch(basename if pattern.basename_only else relative):
                return not pattern.negated
        return None

    def decide_path(self, relative: str, is_dir: bool) -> bool:
        """For patterns used on their own (--exclude): whether `relative` itself is excluded."""
        return bool(self.decide(_posix(relative), is_dir))

    def ignored(self, relative: str, is_dir: bool) -> bool:
        """Whether `relative` or a directory above it is excluded."""
        parts = _posix(relative).split(b"/")
        for depth in range(1, len(parts)):
            if self.decide(b"/".join(parts[:depth]), True):
                return True
        return bool(self.decide(b"/".join(parts), is_dir))


def _posix(relative: str) -> bytes:
    return os.fsencode(relative.replace(os.sep, "/")).strip(b"/")


# --------------------------------------------------------------------------- repositories


@dataclass
class _Repository:
    root: str
    lists: List[PatternList]  # core.excludesFile, info/exclude: what .gitignore files override
    casefold: bool


@dataclass
class _Directory:
    repository: Optional[_Repository]
    lists: List[PatternList]  # .gitignore files from the repository root down to here
    ignored: bool  # the directory, or one above it, is ignored: so is everything inside


@dataclass
class GitIgnores:
    """Answers "would git ignore this path?" for paths in any number of repositories."""

    environ: Dict[str, str] = field(default_factory=lambda: dict(os.environ))
    _directories: Dict[str, _Directory] = field(default_factory=dict, init=False)

    def ignored(self, path: str, is_dir: bool) -> bool:
        path = os.path.abspath(path)
        parent = os.path.dirname(path)
        if parent == path:
            return False
        state = self._directory(parent)
        return state.ignored or self._decide(state, path, is_dir)

    def named(self, directory: str) -> None:
        """Judge what is inside `directory` as git would if the directory (and any ignored one
        above it) were not ignored: a directory named on the command line is linted, as ruff
        does, and the patterns of the .gitignore files above and in it still apply inside."""
        chain = []
        current = os.path.abspath(directory)
        while os.path.dirname(current) != current:
            chain.append(current)
            if not self._directory(os.path.dirname(current)).ignored:
                break
            current = os.path.dirname(current)
        for path in reversed(chain):
            if not is_repository_root(path):
                above = self._directory(os.path.dirname(path))
                self._directories[path] = _Directory(above.repository, above.lists + self._gitignore(path, above.repository), False)

    def _decide(self, state: _Directory, path: str, is_dir: bool) -> bool:
        lists = list(reversed(state.lists))
        if state.repository is not None:
            lists += list(reversed(state.repository.lists))
        encoded = os.fsencode(path)
        for patterns in lists:
            relative = encoded[len(patterns.base) :].lstrip(b"/" if os.sep == "/" else b"/\\")
            if os.sep != "/":
                relative = relative.replace(os.fsencode(os.sep), b"/")
            verdict = patterns.decide(relative, is_dir)
            if verdict is not None:
                return verdict
        return False

    def _directory(self, directory: str) -> _Directory:
        state = self._directories.get(directory)
        if state is not None:
            return state
        parent = os.path.dirname(directory)
        if is_repository_root(directory):
            repository = _open_repository(directory, self.environ)
            state = _Directory(repository, self._gitignore(directory, repository), False)
        elif parent == directory:  # the filesystem root, outside any repository
            state = _Directory(None, self._gitignore(directory, None), False)
        else:
            above = self._directory(parent)
            if above.ignored or self._decide(above, directory, True):
                state = _Directory(above.repository, [], True)
            else:
                state = _Directory(above.repository, above.lists + self._gitignore(directory, above.repository), False)
        self._directories[directory] = state
        return state

    @staticmethod
    def _gitignore(directory: str, repository: Optional[_Repository]) -> List[PatternList]:
        # git reads an in-tree .gitignore only if it is not a symbolic link (git >= 2.32).
        data = _read_ignore_file(os.path.join(directory, ".gitignore"), follow_symlinks=False)
        if not data:
            return []
        casefold = repository.casefold if repository else False
        return [PatternList(os.fsencode(directory), parse_lines(data, casefold))]


def is_repository_root(directory: str) -> bool:
    return os.path.lexists(os.path.join(directory, ".git"))


def _read_ignore_file(path: str, follow_symlinks: bool = True) -> Optional[bytes]:
    """The file's bytes, or None if git would not read it (missing, unreadable, a link, huge,
    not a regular file)."""
    data = read_regular(path, _MAX_IGNORE_FILE, follow_symlinks=follow_symlinks)
    return data if isinstance(data, bytes) else None


def _git_directories(root: str) -> Tuple[Optional[str], Optional[str]]:
    """($GIT_DIR, $GIT_COMMON_DIR) of the repository at `root`; a `.git` file points elsewhere."""
    dot_git = os.path.join(root, ".git")
    if os.path.isdir(dot_git):
        git_dir = dot_git
    else:
        data = _read_ignore_file(dot_git)
        if data is None or not data.startswith(b"gitdir:"):
            return None, None
        target = os.fsdecode(data[len(b"gitdir:") :].strip())
        git_dir = os.path.normpath(os.path.join(root, target))
    common = git_dir
    pointer = _read_ignore_file(os.path.join(git_dir, "commondir"))
    if pointer is not None:
        common = os.path.normpath(os.path.join(git_dir, os.fsdecode(pointer.strip())))
    return git_dir, common


def _open_repository(root: str, environ: Dict[str, str]) -> _Repository:
    from amplint.run.gitconfig import read_config

    git_dir, common_dir = _git_directories(root)
    config = read_config(git_dir, common_dir, environ)
    casefold = config.boolean("core.ignorecase", False)
    # Read in git's order, core.excludesFile then info/exclude; the list read last is asked first.
    lists: List[PatternList] = []
    excludes_file = config.path("core.excludesfile", root, environ.get("HOME"))
    if excludes_file is None:
        config_home = environ.get("XDG_CONFIG_HOME") or (
            os.path.join(environ["HOME"], ".config") if environ.get("HOME") else None
        )
        excludes_file = os.path.join(config_home, "git", "ignore") if config_home else None
    for source in (excludes_file, os.path.join(common_dir, "info", "exclude") if common_dir else None):
        data = _read_ignore_file(source) if source else None
        if data:
            lists.append(PatternList(os.fsencode(root), parse_lines(data, casefold)))
    return _Repository(root, lists, casefold)
