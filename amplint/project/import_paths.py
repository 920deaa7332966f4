"""Which linted file an import names, by path: the index the second phase of a run resolves
imports with (`amplint.project.link`), and a file's analysis too (`amplint.semantic.foreign`).

A leaf (it imports nothing of amplint): a warm run resolves the imports of thousands of
cached results with it, without importing LibCST and the semantic core.
"""

from __future__ import annotations

import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple


def module_name(path: str) -> str:
    """The last part of the module a file is imported as: its stem (`train_loop` of
    `engine/train_loop.py`), or its package's name for an `__init__.py`."""
    head, tail = os.path.split(path)
    return os.path.basename(head) if tail == "__init__.py" else tail[:-3] if tail.endswith(".py") else tail


class PathIndex:
    """The linted files by absolute path and by last name, so that finding the file an import
    names costs the few files of that name, not a pass over every linted file."""

    def __init__(self, paths: Iterable[str]) -> None:
        self.by_absolute: Dict[str, str] = {}
        self.by_name: Dict[str, List[Tuple[str, str]]] = {}
        for path in paths:
            absolute = os.path.abspath(path)
            self.by_absolute[absolute] = path
            self.by_name.setdefault(module_name(absolute), []).append(("/" + absolute.lstrip("/"), path))
        # What an import names, before `exclude`: an absolute one by its module, a relative
        # one by (the importer's directory, the module, the level). The same few imports
        # recur in every file of a project.
        self._absolute: Dict[Optional[str], Tuple[str, ...]] = {}
        self._relative: Dict[Tuple[str, Optional[str], int], Tuple[str, ...]] = {}
        self._directories: Dict[str, str] = {}

    def path_of(self, importer: str, name: Optional[str], level: int, exclude: Optional[str] = None) -> Optional[str]:
        """The linted file (not `exclude`) that `importer`'s `from <level dots><name> import
        ...` refers to: relative imports beside it, absolute ones as the one linted file whose
        path ends in `name`'s path (`.py` or `/__init__.py`); of several, the one whose root
        (the directory the import starts from) is the nearest directory above the importer, as
        the script's directory or the project's comes first on `sys.path` (`import val` in
        yolov5's `train.py` is `val.py` beside it, not `classify/val.py`). None when that does
        not decide."""
        matches = self.paths_of(importer, name, level, exclude)
        if len(matches) == 1:
            return matches[0]
        if not matches or level or not name:
            return None
        directory = os.path.dirname(os.path.abspath(importer))
        module = os.path.join(*name.split("."))
        nearest: List[Tuple[int, str]] = []
        for path in matches:
            absolute = os.path.abspath(path)
            for suffix in (os.sep + module + ".py", os.sep + os.path.join(module, "__init__.py")):
                if absolute.endswith(suffix):
                    root = absolute[: -len(suffix)] or os.sep
                    if directory == root or directory.startswith(root.rstrip(os.sep) + os.sep):
                        nearest.append((root.count(os.sep), path))
        nearest.sort(reverse=True)
        if not nearest or (len(nearest) > 1 and nearest[0][0] == nearest[1][0]):
            return None
        return nearest[0][1]

    def paths_of(self, importer: str, name: Optional[str], level: int, exclude: Optional[str] = None) -> Sequence[str]:
        """Every linted file (not `exclude`) the import may name: the first that exists
        beside the importer for a relative import; each whose path ends in `name`'s path
        for an absolute one (`path_of` takes it only when it is the one)."""
        if not level:
            named = self._absolute.get(name)
            if named is None:
                named = self._absolute[name] = self._paths_named(None, name, 0)
            return named if exclude not in named else [path for path in named if path != exclude]
        directory = self._directories.get(importer)
        if directory is None:
            directory = self._directories[importer] = os.path.dirname(os.path.abspath(importer))
        key = (directory, name, level)
        named = self._relative.get(key)
        if named is None:
            named = self._relative[key] = self._paths_named(directory, name, level)
        # The first that exists and is not `exclude`.
        return next(([path] for path in named if path != exclude), [])

    def _paths_named(self, directory: Optional[str], name: Optional[str], level: int) -> Tuple[str, ...]:
        parts = name.split(".") if name else []
        if level:
            assert directory is not None
            base = directory
            for _ in range(level - 1):
                base = os.path.dirname(base)
            found = [self.by_absolute.get(c) for c in (os.path.join(base, *parts) + ".py", os.path.join(base, *parts, "__init__.py"))]
            return tuple(path for path in found if path is not None)
        if not parts or parts[-1] not in self.by_name:  # `torch`, `numpy`: no linted file of that name
            return ()
        suffixes = (os.sep + os.path.join(*parts) + ".py", os.sep + os.path.join(*parts, "__init__.py"))
        return tuple(path for absolute, path in self.by_name.get(parts[-1], ()) if absolute.endswith(suffixes))
