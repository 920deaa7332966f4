"""The torch a project's fixes must work on: `target-torch-version`, else the oldest torch the
project's declared requirement admits, else `ASSUMED`.

A rewrite to a newer API (`torch.amp.GradScaler`, torch 2.3) is safe only where every torch the
project supports has it; elsewhere it would break the project on the old torch it still
admits. The declaration is read, never guessed, from the project root (the nearest directory
from the start upwards with a `pyproject.toml`, `setup.cfg`, `setup.py` or requirements file):

- `pyproject.toml`: `[project] dependencies` and `optional-dependencies`,
  `[dependency-groups]`, `[tool.poetry.dependencies]` (and its groups);
- `requirements*.txt` and `requirements/*.txt`, following `-r`/`-c` includes;
- `setup.cfg`: `[options] install_requires` and `[options.extras_require]`.

The target is the oldest release a declaration admits: `torch>=1.13` -> 1.13, `torch==2.1.*` ->
2.1, `torch~=2.2.0` -> 2.2, `^2.1` (poetry) -> 2.1. A declaration with only an upper bound
(`torch<2.3`) admits every old torch: the target is `ASSUMED`, but never newer than its newest
release (2.2). `torch` with no bound says nothing. Several declarations: the oldest wins (the
project supports them all). A file that does not parse is passed over: it is not amplint's to
report. Every file is read the careful way (`amplint.run.source.read_declared`: a regular file
of at most 1 MiB, text, opened without blocking), since the repository names them all, an
include too (`-r /dev/stdin`, a FIFO, a `setup.py` linked to `/dev/zero`); one refused is
passed over with a note saying why, in `notes`.
"""

from __future__ import annotations

import configparser
import glob
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Iterator, List, Optional, Set, Tuple

from amplint.lint.diagnostics import FileError
from amplint.run.source import read_declared

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TorchVersion = Tuple[int, int]

# With nothing declared: a torch new enough that the deprecation warnings AMP014 reports fire
# (they were added in 2.4), which has every replacement it writes. A project that sees the
# warning runs such a torch; one that supports older releases says so in its requirement or
# in `target-torch-version`.
ASSUMED: TorchVersion = (2, 4)
# A release number standing for "any minor release of this major" (`torch<2` -> 1.x).
_ANY_MINOR = 999

_VERSION = re.compile(r"v?(\d+)(?:\.(\d+))?(?:\.\d+)*(?:[-_.+]?[0-9A-Za-z]+)*")
_CLAUSE = re.compile(r"\s*(~=|===|==|!=|<=|>=|<|>)\s*v?(\d+)(?:\.(\d+|\*))?(?:\.(\d+|\*))?[0-9A-Za-z.+*-]*\s*")
# `torch`, `torch[opt]`, `torch (>=1.13)`, then the specifier; a marker after `;` is dropped.
_REQUIREMENT = re.compile(r"\s*torch\s*(?:\[[^\]]*\])?\s*(?:\((?P<paren>[^)]*)\)|(?P<spec>[^;@#]*))", re.IGNORECASE)
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_PROJECT_FILES = ("pyproject.toml", "setup.cfg", "setup.py")


@dataclass(frozen=True)
class Declared:
    version: Optional[TorchVersion]  # None: a requirement on torch with no bound (`torch`)
    where: str  # "pyproject.toml: torch>=1.13"
    # The newest release the project's declarations admit, all of them together: None when one
    # has no upper bound (`torch>=1.13`). `torch==1.13.1` -> (1, 13).
    newest: Optional[TorchVersion] = None


class TorchTarget(tuple):
    """The oldest torch a project supports, as a (major, minor) tuple (what a fix must work
    on), that also knows the newest it admits (`newest`, None: no upper bound): a project
    pinned to `torch==2.1.0` never runs a torch whose old AMP names warn (AMP014)."""

    newest: Optional[TorchVersion]

    def __new__(cls, oldest: TorchVersion, newest: Optional[TorchVersion] = None) -> "TorchTarget":
        target = super().__new__(cls, tuple(oldest))
        target.newest = tuple(newest) if newest is not None else None  # type: ignore[assignment]
        return target

    def __reduce__(self) -> Any:  # to the workers, with its `newest`
        return (TorchTarget, (tuple(self), self.newest))


def parse_torch_version(value: Any) -> Optional[TorchVersion]:
    """`"2.2"`, `"2.2.1"`, `"1.13.0+cu117"` -> (2, 2), (2, 2), (1, 13); None if not a torch version."""
    if not isinstance(value, str):
        return None
    match = _VERSION.fullmatch(value.strip())
    if match is None or match.group(2) is None:
        return None
    return int(match.group(1)), int(match.group(2))


def describe(version: TorchVersion) -> str:
    """(1, 13) -> "1.13"; (1, _ANY_MINOR) -> "1.x"."""
    return f"{version[0]}.{'x' if version[1] == _ANY_MINOR else version[1]}"


def oldest_admitted(specifier: str) -> Optional[TorchVersion]:
    """The oldest torch release (major, minor) a version specifier admits: `>=1.13,<3` ->
    (1, 13); only upper bounds -> `ASSUMED` but no newer than they allow; no bound or a
    specifier amplint cannot read -> None."""
    found = admitted(specifier)
    return found[0] if found is not None else None


def admitted(specifier: str) -> Optional[Tuple[TorchVersion, Optional[TorchVersion]]]:
    """The oldest release a version specifier admits (as `oldest_admitted` says) and the newest
    (None: no upper bound): `==1.13.1` -> ((1, 13), (1, 13)), `>=1.13,<2.4` -> ((1, 13), (2, 3)),
    `>=2.1` -> ((2, 1), None); None when there is no bound or amplint cannot read it."""
    lower: Optional[TorchVersion] = None
    upper: Optional[TorchVersion] = None  # the newest release admitted
    for clause in specifier.split(","):
        if not clause.strip():
            continue
        match = _CLAUSE.fullmatch(clause)
        if match is None:
            return None
        operator, major, minor, patch = match.group(1), int(match.group(2)), match.group(3), match.group(4)
        release = (major, int(minor) if minor not in (None, "*") else 0)
        if operator in (">=", ">", "==", "===", "~="):
            lower = release if lower is None else max(lower, release)
            newest: Optional[TorchVersion] = None
            if operator in ("==", "===") and minor not in (None, "*"):
                newest = release  # `==2.1.0`, `==2.1.*`
            elif operator in ("==", "===") or (operator == "~=" and patch is None):
                newest = (major, _ANY_MINOR)  # `==2.*`, `~=2.1`: the last 2.x
            elif operator == "~=":
                newest = release  # `~=2.1.0`: 2.1.x
            if newest is not None:
                upper = newest if upper is None else min(upper, newest)
        elif operator in ("<", "<="):
            if operator == "<=" or patch not in (None, "*", "0"):
                below = release  # `<=2.2`, `<2.3.1`: 2.2.x, 2.3.0
            elif minor not in (None, "*", "0"):
                below = (major, release[1] - 1)  # `<2.3`: 2.2.x
            else:
                below = (major - 1, _ANY_MINOR)  # `<2`, `<2.0`: the last 1.x
            upper = below if upper is None else min(upper, below)
    if lower is not None:
        return lower, upper
    if upper is not None:
        return min(ASSUMED, upper), upper
    return None


def poetry_oldest(constraint: str) -> Optional[TorchVersion]:
    """Poetry's constraints: `^2.1`, `~2.1`, `2.1.*`, `2.1` (exact), or PEP 440 specifiers."""
    found = poetry_admitted(constraint)
    return found[0] if found is not None else None


def poetry_admitted(constraint: str) -> Optional[Tuple[TorchVersion, Optional[TorchVersion]]]:
    """The oldest and newest releases a poetry constraint admits (`poetry_oldest`): `^2.1` ->
    2.1 to the last 2.x, `~2.1` -> 2.1 only."""
    text = constraint.strip()
    if text.startswith(("^", "~")) and not text.startswith("~="):
        oldest = parse_torch_version(text[1:].strip().rstrip(".*") or "x")
        if oldest is None:
            return None
        return oldest, (oldest[0], _ANY_MINOR) if text.startswith("^") else oldest
    if text and text[0].isdigit():
        return admitted("==" + text)
    return admitted(text)


def requirement_version(requirement: str) -> Optional[TorchVersion]:
    """The oldest torch a PEP 508 requirement admits; None for another package or no bound."""
    found = requirement_range(requirement)
    return found[0] if found is not None else None


def requirement_range(requirement: str) -> Optional[Tuple[Optional[TorchVersion], Optional[TorchVersion]]]:
    """The oldest and newest torch a PEP 508 requirement admits (`admitted`); (None, None)
    for a requirement on torch with no bound amplint can read (`torch`, a URL); None for
    another package."""
    name = _NAME.match(requirement)
    if name is None or name.group(1).lower() != "torch":
        return None
    match = _REQUIREMENT.match(requirement)
    specifier = (match.group("paren") if match.group("paren") is not None else match.group("spec")) if match is not None else None
    found = admitted(specifier.strip()) if specifier and specifier.strip() else None
    return found if found is not None else (None, None)


def project_root(start: str) -> Optional[str]:
    """The nearest directory from `start` upwards with a project file or a requirements file."""
    directory = os.path.abspath(start)
    if not os.path.isdir(directory):
        directory = os.path.dirname(directory)
    while True:
        if any(os.path.isfile(os.path.join(directory, name)) for name in _PROJECT_FILES) or _requirement_files(directory):
            return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def declared_torch(start: str, notes: Optional[List[str]] = None) -> Optional[Declared]:
    """The oldest torch the project above `start` declares, and where; None if it declares none
    with a lower bound (or none at all). `notes`: gets why a file was not read."""
    root = project_root(start)
    if root is None:
        return None
    reader = _Reader(root, notes if notes is not None else [])
    found: List[Declared] = []
    pyproject = os.path.join(root, "pyproject.toml")
    if os.path.isfile(pyproject):
        found += _from_pyproject(pyproject, reader)
    setup_cfg = os.path.join(root, "setup.cfg")
    if os.path.isfile(setup_cfg):
        found += _from_setup_cfg(setup_cfg, reader)
    seen: Set[str] = set()
    for path in _requirement_files(root):
        found += _from_requirements(path, reader, seen)
    bounded = [declared for declared in found if declared.version is not None]
    if not bounded:
        return None
    oldest = min(bounded, key=lambda declared: declared.version)  # type: ignore[arg-type,return-value]
    # The project supports every declaration: the newest any of them admits, none when one
    # has no upper bound (`torch` alone included), or when setup.py, a program, may declare one.
    unbounded = any(d.newest is None for d in found) or _mentions_torch(os.path.join(root, "setup.py"), reader)
    newest = None if unbounded else max(d.newest for d in found if d.newest is not None)
    return Declared(oldest.version, oldest.where, newest)


_TORCH_REQUIREMENT = re.compile(r"""["']\s*torch\s*(?:[<>=!~;\[@(][^"']*)?["']""", re.IGNORECASE)


class _Reader:
    """Reads a project's declarations for `declared_torch`, and notes the files it refuses."""

    def __init__(self, root: str, notes: List[str]) -> None:
        self.root = root
        self.notes = notes

    def text(self, path: str, included_as: Optional[str] = None) -> Optional[str]:
        """The file's text; None, with a note, when it cannot be read (`read_declared`)."""
        data = read_declared(path)
        if isinstance(data, FileError):
            named = f"{included_as!r} (an include)" if included_as is not None else os.path.relpath(path, self.root)
            self.notes.append(f"not reading {named} for the project's torch requirement: {data.message}")
            return None
        return data.decode("utf-8", "replace")


def _mentions_torch(path: str, reader: _Reader) -> bool:
    """Whether a setup.py has a requirement on torch as a string (`"torch>=1.13"`, `'torch'`;
    not `"torchvision"`)."""
    if not os.path.lexists(path):
        return False
    text = reader.text(path)
    return text is not None and _TORCH_REQUIREMENT.search(text) is not None


def _requirement_files(directory: str) -> List[str]:
    paths = glob.glob(os.path.join(glob.escape(directory), "requirements*.txt"))
    paths += glob.glob(os.path.join(glob.escape(directory), "requirements", "*.txt"))
    return sorted(path for path in paths if os.path.isfile(path))


def _declared(requirement: str, path: str, root: str) -> Iterator[Declared]:
    found = requirement_range(requirement)
    if found is not None:
        yield Declared(found[0], f"{os.path.relpath(path, root)}: {requirement.strip()}", found[1])


def _from_pyproject(path: str, reader: _Reader) -> List[Declared]:
    text = reader.text(path)
    try:
        document = tomllib.loads(text) if text is not None else {}
    except (tomllib.TOMLDecodeError, RecursionError):
        return []
    root = os.path.dirname(path)
    found: List[Declared] = []
    project = document.get("project")
    if isinstance(project, dict):
        for requirement in _strings(project.get("dependencies")):
            found += _declared(requirement, path, root)
        optional = project.get("optional-dependencies")
        for extra in optional.values() if isinstance(optional, dict) else ():
            for requirement in _strings(extra):
                found += _declared(requirement, path, root)
    groups = document.get("dependency-groups")
    for group in groups.values() if isinstance(groups, dict) else ():
        for requirement in _strings(group):
            found += _declared(requirement, path, root)
    tool = document.get("tool")
    poetry = tool.get("poetry") if isinstance(tool, dict) else None
    if isinstance(poetry, dict):
        tables = [poetry.get("dependencies"), poetry.get("dev-dependencies")]
        poetry_groups = poetry.get("group")
        if isinstance(poetry_groups, dict):
            tables += [group.get("dependencies") for group in poetry_groups.values() if isinstance(group, dict)]
        for table in tables:
            if isinstance(table, dict):
                found += _from_poetry(table.get("torch"), path, root)
    return found


def _from_poetry(value: Any, path: str, root: str) -> List[Declared]:
    constraints = value if isinstance(value, list) else [value]
    found = []
    for constraint in constraints:
        if isinstance(constraint, dict):
            # `{path = ...}`, `{url = ...}`, `{git = ...}`: any torch.
            constraint = constraint.get("version", "*")
        if isinstance(constraint, str):
            admits = poetry_admitted(constraint) or (None, None)  # `"*"`: any torch
            found.append(Declared(admits[0], f"{os.path.relpath(path, root)}: torch = {constraint!r}", admits[1]))
    return found


def _from_setup_cfg(path: str, reader: _Reader) -> List[Declared]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(reader.text(path) or "", path)
    except configparser.Error:
        return []
    root = os.path.dirname(path)
    values = []
    if parser.has_option("options", "install_requires"):
        values.append(parser.get("options", "install_requires"))
    if parser.has_section("options.extras_require"):
        values += [value for _, value in parser.items("options.extras_require")]
    return [declared for value in values for line in value.splitlines() for declared in _declared(line, path, root)]


def _from_requirements(path: str, reader: _Reader, seen: Set[str], depth: int = 0, included_as: Optional[str] = None) -> List[Declared]:
    real = os.path.realpath(path) if "\0" not in path else path  # a NUL: refused by the read
    if real in seen or depth > 8:
        return []
    seen.add(real)
    text = reader.text(path, included_as)
    if text is None:
        return []
    root = reader.root
    found: List[Declared] = []
    for line in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*", "", line).strip()
        include = re.match(r"(?:-r|--requirement|-c|--constraint)(?:\s+|=)(\S+)", line)
        if include is not None:
            included = os.path.join(os.path.dirname(path), include.group(1))
            found += _from_requirements(included, reader, seen, depth + 1, include.group(1))
        elif line and not line.startswith("-"):
            found += _declared(re.split(r"\s+--?[a-z]", line)[0], path, root)
    return found


def _strings(value: Any) -> List[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def declared_or_assumed(declared: Optional[Declared]) -> Tuple[TorchVersion, str]:
    """The target and why: the declaration's, else `ASSUMED`."""
    if declared is not None:
        return declared.version, declared.where
    return ASSUMED, "assumed: the project declares no lower bound on torch"

