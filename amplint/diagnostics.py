"""What a lint run produces: findings, and errors for files that could not be linted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass(frozen=True, order=True)
class Finding:
    path: str
    row: int  # 1-based, in the linted source (for a notebook: the joined code cells)
    column: int  # 1-based
    code: str
    message: str
    end_row: int = 0
    end_column: int = 0
    name: str = ""
    url: str = ""
    cell: Optional[int] = None  # notebooks: 1-based code cell, and row/column within it
    cell_row: Optional[int] = None


@dataclass(frozen=True, order=True)
class FileError:
    path: str
    message: str


@dataclass
class RunReport:
    """Everything an output format needs about one run."""

    findings: List[Finding]
    errors: List["FileError"]
    files_checked: int
    sources: Dict[str, str]  # path -> linted text, for files with findings


@dataclass
class FileResult:
    path: str
    findings: List[Finding] = field(default_factory=list)
    error: Optional[FileError] = None
    skipped: bool = False  # no AMP vocabulary at all: not parsed
    source: Optional[str] = None  # kept only when there are findings, for code frames
