"""Which files a run lints: the paths given, walked recursively, minus excludes and .gitignore.

Only regular files are linted. A FIFO or a device found while walking (or named on the
command line) would block the run or never end, so it is a per-path error, as is a directory
that cannot be read; the walk goes on with everything else.

Paths named on the command line are linted as ruff lints them: excludes and .gitignore decide
what a walk *finds*, never whether a named file or directory is linted (inside a named
directory they apply as usual). With `--force-exclude` they apply to named paths too (what
pre-commit and editors need), and `skipped` says which named paths that left out, and why.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from amplint.lint.diagnostics import FileError
from amplint.run.gitignore import GitIgnores, PatternList, is_repository_root, pattern_problem
from amplint.run.source import file_kind

LINTED_SUFFIXES = (".py", ".ipynb")
DEFAULT_EXCLUDES = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache",
    ".nox", ".pants.d", ".pytype", ".ruff_cache", ".pytest_cache", ".svn", ".tox", ".venv", ".vscode",
    "__pypackages__", "__pycache__", "_build", "buck-out", "build", "dist", "node_modules",
    "site-packages", "venv", "*.egg-info",
)


class PatternError(ValueError):
    """A pattern the user gave amplint that can never do what it says (a usage error)."""


def check_patterns(patterns: Sequence[str], where: str) -> None:
    for pattern in patterns:
        problem = pattern_problem(pattern)
        if problem:
            raise PatternError(f"invalid pattern `{pattern}` in {where}: {problem}")


@dataclass
class Discovery:
    root: str
    exclude: Sequence[str] = DEFAULT_EXCLUDES
    extend_exclude: Sequence[str] = ()
    respect_gitignore: bool = True
    force_exclude: bool = False
    _excludes: PatternList = field(init=False)
    _gitignores: GitIgnores = field(default_factory=GitIgnores, init=False)
    # Paths named on the command line that --force-exclude left out: (path, why).
    skipped: List[Tuple[str, str]] = field(default_factory=list, init=False)
    # Every directory the walks read, linted file in it or not: what `--watch` watches for
    # a new file (a package made empty, then given its first module).
    walked: List[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.root = os.path.abspath(self.root)
        self._excludes = PatternList.from_patterns(self.root, [*self.exclude, *self.extend_exclude])

    def files(self, paths: Sequence[str]) -> Tuple[List[str], List[FileError]]:
        found: List[str] = []
        errors: List[FileError] = []
        for path in paths:
            if os.path.isdir(path):
                why = self.force_exclude and self.exclusion(path, is_dir=True)
                if why:
                    self.skipped.append((path, why))
                    continue
                for item in self._walk(path):
                    if isinstance(item, FileError):
                        errors.append(item)
                    else:
                        found.append(item)
            elif os.path.isfile(path):
                # A file named explicitly is linted whatever its name (pre-commit passes files
                # one by one), unless --force-exclude asks for the excludes to apply too.
                why = self.force_exclude and self.exclusion(path, is_dir=False)
                if why:
                    self.skipped.append((path, why))
                else:
                    found.append(path)
            elif os.path.lexists(path):
                errors.append(FileError(path, not_a_regular_file(path)))
            else:
                errors.append(FileError(path, "no such file or directory"))
        unique = list(dict.fromkeys(found))
        return unique, errors

    def _walk(self, given: str) -> Iterator[Union[str, FileError]]:
        top = os.path.abspath(given)
        top_in_project = os.path.relpath(top, self.root)
        # Inside the project, patterns rooted at the project root apply below `top` too,
        # unless `top` itself is excluded: a directory the user names is always walked, so
        # `amplint .venv/lib/python3.11/site-packages/pkg` lints pkg.
        rooted = not top_in_project.startswith("..") and not self._excludes.ignored(top_in_project, True)
        # A directory the user names is walked even when git ignores it (as ruff does): what
        # is inside is judged as if the directory itself were not ignored. Its own cache of
        # .gitignore verdicts, so that the walks of other named paths are not changed.
        gitignores = self._gitignores
        if self.respect_gitignore and not is_repository_root(top) and gitignores.ignored(top, True):
            gitignores = GitIgnores()
            gitignores.named(top)

        def excluded(below: str, is_dir: bool) -> bool:
            # `below`: the path relative to `top`, as walked (names joined: no `.` or `..`).
            if self._excludes.decide_path(below, is_dir):
                return True
            if rooted and self._excludes.decide_path(below if top_in_project == "." else os.path.join(top_in_project, below), is_dir):
                return True
            return self.respect_gitignore and gitignores.ignored(os.path.join(top, below), is_dir)

        pending = [(given, "")]
        while pending:
            directory, below_directory = pending.pop()
            try:
                with os.scandir(directory) as listing:
                    entries = sorted(listing, key=lambda entry: entry.name)
            except OSError as error:
                yield FileError(os.path.normpath(directory), f"cannot read directory: {error.strerror or error}")
                continue
            self.walked.append(os.path.normpath(directory))
            subdirectories = []
            for entry in entries:
                path = os.path.join(directory, entry.name)
                below = os.path.join(below_directory, entry.name) if below_directory else entry.name
                if entry.is_dir(follow_symlinks=False):
                    if not excluded(below, True):
                        subdirectories.append((path, below))
                    continue
                if not entry.name.endswith(LINTED_SUFFIXES) or excluded(below, False):
                    continue
                problem = _file_problem(entry)
                if problem == "":
                    continue  # a symbolic link to a directory: not followed, like any linked directory
                if problem:
                    yield FileError(os.path.normpath(path), problem)
                else:
                    yield os.path.normpath(path)  # `sub/train.py`, not `./sub/train.py`
            pending.extend(reversed(subdirectories))

    def is_excluded(self, path: str, is_dir: bool) -> bool:
        """For a path named on the command line (--force-exclude)."""
        return bool(self.exclusion(path, is_dir))

    def exclusion(self, path: str, is_dir: bool) -> str:
        """Why --force-exclude leaves out a path named on the command line ("" if it does not)."""
        absolute = os.path.abspath(path)
        relative = os.path.relpath(absolute, self.root)
        if relative.startswith(".."):
            relative = os.path.basename(absolute)
        if self._excludes.ignored(relative, is_dir):
            return "excluded by `exclude`/`extend-exclude` (--force-exclude)"
        if self.respect_gitignore and self._gitignores.ignored(absolute, is_dir):
            return "ignored by .gitignore (--force-exclude; --no-respect-gitignore lints it)"
        return ""


def _file_problem(entry: "os.DirEntry[str]") -> Optional[str]:
    """None for a regular file (or a link to one); "" for a link to a directory; else why not."""
    try:
        if entry.is_file():
            return None
        if entry.is_dir():
            return ""
    except OSError:
        pass
    return not_a_regular_file(entry.path)


def not_a_regular_file(path: str) -> str:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "broken symbolic link" if os.path.islink(path) else "no such file or directory"
    except OSError as error:
        return f"cannot read file: {error.strerror or error}"
    return f"not a regular file ({file_kind(mode)})"
