"""What a lint run produces: findings, and errors for files that could not be linted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

if TYPE_CHECKING:
    from amplint.run.notebook import CellMap


@dataclass(frozen=True, order=True)
class FixSuggestion:
    """A finding's fix as output formats show it."""

    title: str
    applicability: str  # "safe" or "unsafe"
    edits: Tuple[Tuple[int, int, int, int, str], ...] = ()


@dataclass(frozen=True, order=True)
class Related:
    """A place that explains a finding: for a hazard in model code, where the autocast region
    it runs under is opened and each call on the way in."""

    path: str
    row: int
    column: int
    message: str


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
    # Notebooks: the cell (1-based, counting every cell as Jupyter shows them) and the row
    # within it; the column is the same in both.
    cell: Optional[int] = None
    cell_row: Optional[int] = None
    # Notebooks: (line, column, end line, end column) in the .ipynb file itself, for formats
    # that point into the file on disk (GitHub annotations, SARIF).
    file_span: Optional[Tuple[int, int, int, int]] = None
    # `message` is the short title; `help` says why it matters and what to write instead.
    help: Optional[str] = None
    severity: str = "error"  # the rule's: "error" or "warning"
    # The rule's fix for it, if it has one: what it does, "safe" or "unsafe", and the text
    # edits that make it (as `amplint.lint.fix.Edit` tuples: row, column, end row, end column,
    # new text; rows of the linted source).
    fix: Optional["FixSuggestion"] = None
    # What explains it, elsewhere (SARIF relatedLocations, the language server's related
    # information, JSON `related`): the way from an autocast region in another file.
    related: Tuple[Related, ...] = ()

    @property
    def text(self) -> str:
        """Title and help as one paragraph, for formats with a single message field."""
        return f"{self.message}. {self.help}" if self.help else self.message

    def span_in_file(self) -> Tuple[int, int, int, int]:
        """Where the finding is in the file on disk, 1-based, end column exclusive."""
        if self.file_span is not None:
            return self.file_span
        return (self.row, self.column, self.end_row or self.row, self.end_column or self.column)


@dataclass(frozen=True, order=True)
class FileError:
    path: str
    message: str
    # Where in the file, when the problem has a place (a syntax error): 1-based, in the
    # linted source (for a notebook: its joined code cells). None: the file as a whole.
    row: Optional[int] = field(default=None, compare=False)
    column: Optional[int] = field(default=None, compare=False)
    # Notebooks: the cell the place is in (as Jupyter numbers them) and the row within it.
    cell: Optional[int] = field(default=None, compare=False)
    cell_row: Optional[int] = field(default=None, compare=False)


@dataclass(frozen=True, order=True)
class NotAnalysed:
    """A function amplint could not follow within the analysis limit (`amplint.work`): it is
    analysed no further and reported, so that its silence is never read as a clean bill."""

    path: str
    row: int  # 1-based, in the linted source (for a notebook: the joined code cells)
    column: int
    name: str  # the function's name; `<module>` for a module's top-level code
    cell: Optional[int] = None  # notebooks, as for a Finding
    cell_row: Optional[int] = None
    file_row: Optional[int] = None  # notebooks: the line of the .ipynb that holds the `def`

    @property
    def message(self) -> str:
        return f"{self.name}: too complex to follow within the analysis limit; not analysed (raise it with --analysis-limit)"

    def line_in_file(self) -> int:
        return self.file_row if self.file_row is not None else self.row


@dataclass
class RunReport:
    """Everything an output format needs about one run."""

    findings: List[Finding]
    errors: List["FileError"]
    files_checked: int
    sources: Dict[str, str]  # path -> linted text, for files with findings
    notebooks: Dict[str, "CellMap"] = field(default_factory=dict)  # path -> cells, notebooks with findings
    # Functions too complex to follow within the analysis limit: reported, never silent.
    skipped_functions: List[NotAnalysed] = field(default_factory=list)
    # `--fix`: whether unsafe fixes are enabled (a finding is marked fixable by the fixes
    # `--fix` would apply), and how many fixes were applied in this run.
    unsafe_fixes: bool = False
    fixed: int = 0
    fixed_warnings: int = 0  # how many of the `fixed` were warnings
    # `--fail-level`: the severity from which a finding fails the run (`error`, `warning`).
    fail_level: str = "error"

    def fails(self, finding: Finding) -> bool:
        """Whether `finding` fails the run (exit 1) at the run's fail level."""
        return finding.severity == "error" or self.fail_level == "warning"

    def applicable(self, finding: Finding) -> bool:
        """Whether `--fix` would fix `finding` (with the run's --unsafe-fixes setting)."""
        return finding.fix is not None and (finding.fix.applicability == "safe" or self.unsafe_fixes)


@dataclass
class FileResult:
    path: str
    findings: List[Finding] = field(default_factory=list)
    error: Optional[FileError] = None
    skipped: bool = False  # not parsed: no AMP vocabulary, or it was deferred
    # AMP words, but no code any rule needs (amplint.lint.evidence): parsed only if a linted
    # module imports it or it imports one with a summary (amplint.project.link).
    deferred: bool = False
    may_export: bool = False  # deferred, and its functions may do AMP work to export
    source: Optional[str] = None  # kept only when there are findings, for code frames
    cells: Optional["CellMap"] = None  # notebooks: which rows of `source` came from which cell
    # What the file's functions do to mixed precision, for the modules that import them
    # (JSON; `amplint.semantic.foreign`), and the modules it imports: (module, level).
    summary: Optional[Dict[str, Any]] = None
    imports: Tuple[Tuple[str, int], ...] = ()
    # Skipped for having no AMP words: the names on its import lines (`catalogue.import_words`).
    import_words: Tuple[str, ...] = ()
    # What its analysis looked up in other modules' summaries (`foreign.Lookup`), with those it
    # was linted with (none, in a first lint); None: not known (amplint.project.link then lints
    # it again whenever they change).
    lookups: Optional[Tuple[Tuple[Optional[str], int, Optional[str]], ...]] = None
    # Functions too complex to follow within the analysis limit: analysed no further, and reported.
    skipped_functions: List[NotAnalysed] = field(default_factory=list)
    # What its code calls and what its functions would hit under autocast, for the project's
    # ambient pass (JSON; `amplint.project.ambient.facts`).
    ambient: Optional[Dict[str, Any]] = None
