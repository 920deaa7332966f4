"""Where a file is, as CI tools want it: relative to the root of the checked-out repository."""

from __future__ import annotations

import os
from typing import Optional


def workspace_root() -> str:
    """The repository root in GitHub Actions (also when amplint runs in a subdirectory), else cwd.

    GitHub resolves annotation paths and SARIF URIs against `GITHUB_WORKSPACE`, not against
    the step's `working-directory`.
    """
    cwd = os.getcwd()
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace and _inside(cwd, os.path.abspath(workspace)):
        return os.path.abspath(workspace)
    return cwd


def relative_path(path: str, root: str) -> Optional[str]:
    """`path` relative to `root` with `/` separators, or None when it is outside `root`."""
    if path == "-":
        return path
    absolute = os.path.abspath(path)
    if not _inside(absolute, root):
        return None
    return os.path.relpath(absolute, root).replace(os.sep, "/")


def _inside(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # different drives on Windows
        return False
