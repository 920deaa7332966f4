"""Which files a run lints: the paths given, walked recursively, minus excludes and .gitignore."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import pathspec

from amplint.diagnostics import FileError

LINTED_SUFFIXES = (".py", ".ipynb")
DEFAULT_EXCLUDES = (
    ".bzr", ".direnv", ".eggs", ".git", ".git-rewrite", ".hg", ".ipynb_checkpoints", ".mypy_cache",
    ".nox", ".pants.d", ".pytype", ".ruff_cache", ".pytest_cache", ".svn", ".tox", ".venv", ".vscode",
    "__pypackages__", "__pycache__", "_build", "buck-out", "build", "dist", "node_modules",
    "site-packages", "venv", "*.egg-info",
)


@dataclass
class Discovery:
    root: str
    exclude: Sequence[str] = DEFAULT_EXCLUDES
    extend_exclude: Sequence[str] = ()
    respect_gitignore: bool = True
    force_exclude: bool = False
    _spec: pathspec.PathSpec = field(init=False)
    _gitignores: Dict[str, Optional[pathspec.PathSpec]] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.root = os.path.abspath(self.root)
        self._spec = pathspec.PathSpec.from_lines("gitwildmatch", [*self.exclude, *self.extend_exclude])

    def files(self, paths: Sequence[str]) -> Tuple[List[str], List[FileError]]:
        found: List[str] = []
        errors: List[FileError] = []
        for path in paths:
            if os.path.isdir(path):
                found.extend(self._walk(path))
            elif os.path.isfile(path):
                # A file named explicitly is linted whatever its name (pre-commit passes files
                # one by one), unless --force-exclude asks for the excludes to apply too.
                if not (self.force_exclude and self.is_excluded(path, is_dir=False)):
                    found.append(path)
            elif os.path.lexists(path):
                errors.append(FileError(path, "not a regular file or directory"))
            else:
                errors.append(FileError(path, "no such file or directory"))
        unique = list(dict.fromkeys(found))
        return unique, errors

    def _walk(self, given: str) -> Iterator[str]:
        top = os.path.abspath(given)
        top_in_project = os.path.relpath(top, self.root)
        # Inside the project, patterns rooted at the project root apply below `top` too,
        # unless `top` itself is excluded: a directory the user names is always walked, so
        # `amplint .venv/lib/python3.11/site-packages/pkg` lints pkg.
        rooted = not top_in_project.startswith("..") and not self._matches(top_in_project, True)

        def excluded(path: str, is_dir: bool) -> bool:
            path = os.path.abspath(path)
            if self._matches(os.path.relpath(path, top), is_dir):
                return True
            if rooted and self._matches(os.path.relpath(path, self.root), is_dir):
                return True
            return self.respect_gitignore and self._gitignored(path, is_dir)

        for directory, subdirs, filenames in os.walk(given):
            subdirs[:] = sorted(
                d
                for d in subdirs
                if not os.path.islink(os.path.join(directory, d)) and not excluded(os.path.join(directory, d), True)
            )
            for filename in sorted(filenames):
                path = os.path.join(directory, filename)
                if filename.endswith(LINTED_SUFFIXES) and not excluded(path, False):
                    yield os.path.normpath(path)  # `sub/train.py`, not `./sub/train.py`

    def is_excluded(self, path: str, is_dir: bool) -> bool:
        """For a path named on the command line (--force-exclude)."""
        absolute = os.path.abspath(path)
        relative = os.path.relpath(absolute, self.root)
        if relative.startswith(".."):
            relative = os.path.basename(absolute)
        return self._matches(relative, is_dir) or (self.respect_gitignore and self._gitignored(absolute, is_dir))

    def _matches(self, relative: str, is_dir: bool) -> bool:
        """gitignore semantics: `build` matches `build/` at any depth, `src/gen/` is rooted."""
        return self._spec.match_file(relative.replace(os.sep, "/") + ("/" if is_dir else ""))

    def _gitignored(self, absolute: str, is_dir: bool) -> bool:
        directory = os.path.dirname(absolute)
        while True:
            spec = self._gitignore(directory)
            if spec is not None:
                relative = os.path.relpath(absolute, directory).replace(os.sep, "/")
                if spec.match_file(relative + ("/" if is_dir else "")):
                    return True
            if os.path.isdir(os.path.join(directory, ".git")):
                return False
            parent = os.path.dirname(directory)
            if parent == directory:
                return False
            directory = parent

    def _gitignore(self, directory: str) -> Optional[pathspec.PathSpec]:
        if directory not in self._gitignores:
            path = os.path.join(directory, ".gitignore")
            spec = None
            if os.path.isfile(path):
                try:
                    with open(path, encoding="utf-8", errors="replace") as handle:
                        spec = pathspec.PathSpec.from_lines("gitwildmatch", handle)
                except OSError:
                    spec = None
            self._gitignores[directory] = spec
        return self._gitignores[directory]
