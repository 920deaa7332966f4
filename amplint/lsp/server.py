"""The language server: pygls features around amplint's own engine.

Diagnostics are published on open, change and save. Each lint runs in a worker process with
the command's per-file budget, a few at a time (`amplint.lsp.linting`), so the server keeps
answering and one slow document never stalls the others. A document is linted one version
at a time, the newest: a change stops the lint of an older version still in flight (its
worker is killed: `amplint.lsp.linting.Ticket`), and a change that comes within `DEBOUNCE`
of the one before waits until the typing pauses for that long, so a burst of keystrokes costs
one finished lint, of its last version; a change after a pause is linted at once. A result
for a version the editor has since changed is dropped, never published. A document that cannot be linted
(over the budget, a crash, not text) gets no diagnostics and a message saying why.
Severities are the rules' (`error` -> Error, `warning` -> Warning); AMP100's stale `# noqa`
is also tagged Unnecessary, which editors grey out.

Code actions: "Disable AMPxxx for this line" (adds `# noqa: AMPxxx`, or the code to the
line's `# noqa: ...`), and the rule's fix where it has one (`amplint.lint.fix`): the same edits
`amplint --fix` makes for that finding alone, preferred when safe, "(unsafe)" otherwise.
`source.fixAll` (asked for by kind, as on save): every safe fix at once, what `amplint --fix`
writes, for a Python document whose current version has a safe fix.

Notebooks: with the notebook document sync (VS Code, and other clients that implement LSP
3.17), the cells are joined as `amplint file.ipynb` joins them, so a scaler made in one cell
counts in another, and each finding is published on its cell. A client without it that opens
the `.ipynb` as a text document gets findings on the lines of the JSON, as `--output-format
github` places them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from amplint import __version__
from amplint.lint.diagnostics import Finding
from amplint.lsp.handshake import FIX_ALL, NOTEBOOK_SELECTOR
from amplint.lsp.linting import Linter, Outcome, Ticket
from amplint.lint.noqa import UNUSED_NOQA, edit_adding_code
from amplint.run.notebook import is_notebook

SOURCE = "amplint"
logger = logging.getLogger(__name__)

# Seconds: a change this soon after the document's previous one is typing, linted once the
# typing pauses this long (keystrokes come 80 to 200 ms apart; a lint takes longer).
DEBOUNCE = 0.15

SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning}


@dataclass(frozen=True)
class CellText:
    uri: str
    kind: types.NotebookCellKind
    language: str
    text: str


class AmplintLanguageServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "amplint",
            __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[
                    types.NotebookDocumentFilterWithCells(
                        notebook=selector["notebook"], cells=[types.NotebookCellLanguage(language=cell["language"]) for cell in selector["cells"]]
                    )
                    for selector in NOTEBOOK_SELECTOR
                ],
                save=True,
            ),
        )
        # Per document: the lint waiting to start (cancelled when a newer version comes),
        # the one in flight with its ticket (cancelled by a change: its version is old), and
        # when the document last changed (event loop time), for the debounce.
        self.pending: Dict[str, "asyncio.Task[None]"] = {}
        self.running: Dict[str, "asyncio.Future[None]"] = {}
        self.tickets: Dict[str, Ticket] = {}
        self.changed_at: Dict[str, float] = {}
        self.linter = Linter()
        self.reported_errors: Dict[str, str] = {}
        # Python documents: (version, whether its lint found a safe fix), for source.fixAll,
        # and the fixAll in flight, stopped by a change, a close or a newer fixAll.
        self.fixable: Dict[str, Tuple[int, bool]] = {}
        self.fixing: Dict[str, Ticket] = {}

    # ------------------------------------------------------------------ scheduling

    def schedule(self, uri: str, changed: bool = False) -> None:
        """Lint `uri`'s current version. `changed`: its text changed (the lint in flight is
        of an older version, and a change hard on the heels of another waits for a pause)."""
        loop = asyncio.get_running_loop()
        task = self.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        delay = 0.0
        if changed:
            for tickets in (self.tickets, self.fixing):
                ticket = tickets.get(uri)
                if ticket is not None:
                    ticket.cancel()
            now = loop.time()
            last = self.changed_at.get(uri)
            self.changed_at[uri] = now
            if last is not None and now - last < DEBOUNCE:
                delay = DEBOUNCE
        self.pending[uri] = loop.create_task(self._lint_when_free(uri, delay))

    async def _lint_when_free(self, uri: str, delay: float = 0.0) -> None:
        try:
            if delay:
                await asyncio.sleep(delay)
            # One version of a document at a time: wait for the one in flight (stopped
            # already if the text changed since).
            while uri in self.running:
                await asyncio.wait([self.running[uri]])
        except asyncio.CancelledError:
            return  # superseded by a newer version, or closed, before it started
        if self.pending.get(uri) is asyncio.current_task():
            del self.pending[uri]
        ticket = Ticket()
        job = asyncio.ensure_future(self._lint(uri, ticket))
        self.running[uri] = job
        self.tickets[uri] = ticket

        def finished(done: "asyncio.Future[None]") -> None:
            if self.running.get(uri) is done:
                del self.running[uri]
            if self.tickets.get(uri) is ticket:
                del self.tickets[uri]

        job.add_done_callback(finished)

    async def _lint(self, uri: str, ticket: Optional[Ticket] = None) -> None:
        try:
            if self.workspace.get_notebook_document(notebook_uri=uri) is not None:
                await self.lint_notebook(uri, ticket)
            else:
                await self.lint_text_document(uri, ticket)
        except Exception as error:  # a bug must not take the editor's server down with it
            logger.exception("amplint: linting %s failed", uri)
            self._give_up(uri, f"{_path(uri) or uri}: internal error: {type(error).__name__}: {error}")

    def relint_all(self) -> None:
        for uri in list(self.workspace.notebook_documents):
            self.schedule(uri)
        for uri in list(self.workspace.text_documents):
            if self.workspace.get_notebook_document(cell_uri=uri) is None:
                self.schedule(uri)

    # ------------------------------------------------------------------ text documents

    async def lint_text_document(self, uri: str, ticket: Optional[Ticket] = None) -> None:
        document = self._open_document(uri)
        if document is None:
            return
        if _scheme(uri) == "vscode-notebook-cell":
            # A cell alone lacks the rest of its notebook (the scaler made three cells up):
            # judged alone it would be wrongly flagged, so it is left to the notebook sync.
            return
        version, text = document.version, document.source
        path = _path(uri)
        name = path or "untitled.py"
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate, as some clients send (JSON "\ud800")
            line = text.count("\n", 0, error.start) + 1
            outcome = Outcome([], f"{name}: not text: a lone surrogate ({text[error.start]!a}) on line {line}; not linted")
        else:
            linted = await self.linter.lint(name, path, data, ticket)
            if linted is None:
                return  # a newer version is on its way, or the document was closed
            outcome = linted
        current = self._open_document(uri)
        if current is None or current.version != version:
            return
        findings = self._accept(uri, outcome)
        self.fixable[uri] = (version, any(f.fix is not None and f.fix.applicability == "safe" for f in findings))
        # An .ipynb opened as text is JSON: its findings sit on the file's lines.
        on_file = is_notebook(name)
        diagnostics = [_diagnostic(finding, current, on_file) for finding in findings]
        self.text_document_publish_diagnostics(
            types.PublishDiagnosticsParams(uri=uri, version=version, diagnostics=diagnostics)
        )

    def _open_document(self, uri: str) -> Optional[TextDocument]:
        # get_text_document() would read a closed file from disk; only what the editor holds counts.
        return self.workspace.text_documents.get(unquote(uri))

    # ------------------------------------------------------------------ notebooks

    async def lint_notebook(self, uri: str, ticket: Optional[Ticket] = None) -> None:
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is None:
            return
        version = notebook.version
        cells = []
        for cell in notebook.cells:
            document = self._open_document(cell.document)
            text = document.source if document is not None else ""
            language = (document.language_id if document is not None else None) or "python"
            cells.append(CellText(cell.document, cell.kind, language, text))
        path = _path(uri)
        name = path if path and is_notebook(path) else "notebook.ipynb"
        outcome = await self.linter.lint(name, path, _ipynb(cells, notebook.metadata), ticket)
        if outcome is None:
            return  # a newer version is on its way, or the notebook was closed
        current = self.workspace.get_notebook_document(notebook_uri=uri)
        if current is None or current.version != version:
            return
        findings = self._accept(uri, outcome)
        by_cell: Dict[str, List[types.Diagnostic]] = {cell.uri: [] for cell in cells}
        for finding in findings:
            if finding.cell is None or not 1 <= finding.cell <= len(cells):
                continue
            cell_uri = cells[finding.cell - 1].uri
            document = self._open_document(cell_uri)
            if document is not None:
                by_cell[cell_uri].append(_diagnostic(finding, document, on_file=False))
        for cell_uri, diagnostics in by_cell.items():
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=cell_uri, diagnostics=diagnostics))

    # ------------------------------------------------------------------ shared

    def _accept(self, uri: str, outcome: Outcome) -> List[Finding]:
        """The findings to publish. A problem goes to the log each time, and is shown once,
        not on every keystroke."""
        findings, problem = outcome
        if problem is not None:
            self.window_log_message(types.LogMessageParams(type=types.MessageType.Warning, message=f"amplint: {problem}"))
            if self.reported_errors.get(uri) != problem:
                self.reported_errors[uri] = problem
                self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"amplint: {problem}"))
        else:
            self.reported_errors.pop(uri, None)
        return findings

    def _give_up(self, uri: str, problem: str) -> None:
        """No diagnostics for `uri` (a notebook's cells, a text document), and why."""
        self._accept(uri, Outcome([], problem))
        notebook = self.workspace.get_notebook_document(notebook_uri=uri)
        uris = [cell.document for cell in notebook.cells] if notebook is not None else [uri]
        for each in uris:
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=each, diagnostics=[]))

    def clear(self, uris: Sequence[str]) -> None:
        for uri in uris:
            task = self.pending.pop(uri, None)
            if task is not None:
                task.cancel()
            for tickets in (self.tickets, self.fixing):
                ticket = tickets.get(uri)
                if ticket is not None:
                    ticket.cancel()
            self.changed_at.pop(uri, None)
            self.fixable.pop(uri, None)
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    # ------------------------------------------------------------------ fix all

    async def fix_all(self, uri: str) -> Optional[types.CodeAction]:
        """Every safe fix of a Python document, as `amplint --fix` applies them; None when the
        current version's lint found none (or has not finished). Fixed in a lane's worker
        (`amplint.lsp.linting`), and stopped when the document changes or closes, when the
        client cancels the request, or when a newer fixAll of the document comes."""
        document = self._open_document(uri)
        if document is None or _scheme(uri) == "vscode-notebook-cell" or is_notebook(_path(uri) or ""):
            return None
        version, text = document.version, document.source
        if self.fixable.get(uri) != (version, True):
            return None
        path = _path(uri)
        ticket = Ticket()
        previous = self.fixing.get(uri)
        if previous is not None:
            previous.cancel()
        self.fixing[uri] = ticket
        try:
            fixed = await self.linter.fix_all(path or "untitled.py", path, text, ticket)
        except asyncio.CancelledError:  # `$/cancelRequest`: its worker stops too
            ticket.cancel()
            raise
        except Exception:  # a broken configuration since the lint, a bug: no action, the server goes on
            logger.exception("amplint: fixing %s failed", uri)
            return None
        finally:
            if self.fixing.get(uri) is ticket:
                del self.fixing[uri]
        current = self._open_document(uri)
        if fixed is None or current is None or current.version != version:
            return None
        from amplint.lint.fix import edits as line_edits

        edits = [
            types.TextEdit(
                range=types.Range(start=types.Position(line=e.row - 1, character=0), end=types.Position(line=e.end_row - 1, character=0)),
                new_text=e.content,
            )
            for e in line_edits(text, fixed)
        ]
        return types.CodeAction(
            title="amplint: fix all safely fixable findings",
            kind=FIX_ALL,
            edit=types.WorkspaceEdit(
                document_changes=[
                    types.TextDocumentEdit(
                        text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version),
                        edits=edits,
                    )
                ]
            ),
        )


def _ipynb(cells: Sequence[CellText], metadata: Optional[Any]) -> bytes:
    """The notebook as nbformat 4 JSON, so that it is linted exactly as `amplint x.ipynb` is."""
    document = {
        "cells": [
            {
                "cell_type": "code" if cell.kind == types.NotebookCellKind.Code else "markdown",
                "metadata": {"vscode": {"languageId": cell.language}},
                "source": cell.text,
                **({"outputs": [], "execution_count": None} if cell.kind == types.NotebookCellKind.Code else {}),
            }
            for cell in cells
        ],
        "metadata": metadata if isinstance(metadata, dict) else {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(document).encode("utf-8")


def _diagnostic(finding: Finding, document: TextDocument, on_file: bool) -> types.Diagnostic:
    if on_file:
        row, column, end_row, end_column = finding.span_in_file()
    elif finding.cell is not None:
        # Rows within the cell; the finding's columns are already the cell's.
        row = finding.cell_row or 1
        end_row = row + (finding.end_row or finding.row) - finding.row
        column, end_column = finding.column, finding.end_column or finding.column
    else:
        row, column, end_row, end_column = finding.row, finding.column, finding.end_row or finding.row, finding.end_column or finding.column
    lines = document.lines
    codec = document.position_codec
    start = codec.position_to_client_units(lines, types.Position(line=row - 1, character=column - 1))
    end = codec.position_to_client_units(lines, types.Position(line=end_row - 1, character=end_column - 1))
    message = f"{finding.message}\nhelp: {finding.help}" if finding.help else finding.message
    return types.Diagnostic(
        range=types.Range(start=start, end=end),
        message=message,
        severity=SEVERITY.get(finding.severity, types.DiagnosticSeverity.Error),
        code=finding.code,
        code_description=types.CodeDescription(href=finding.url) if finding.url else None,
        source=SOURCE,
        tags=[types.DiagnosticTag.Unnecessary] if finding.code == UNUSED_NOQA else None,
        # What a code action needs: where `# noqa` goes, and the rule's fix (whole-line edits
        # of the linted text; none for a notebook, whose rows are the joined cells').
        data={"code": finding.code, "noqa_row": None if on_file else row, "fix": _fix_data(finding, on_file)},
        related_information=[
            types.DiagnosticRelatedInformation(
                location=types.Location(uri=Path(r.path).resolve().as_uri(), range=types.Range(start=types.Position(line=r.row - 1, character=r.column - 1), end=types.Position(line=r.row - 1, character=r.column - 1))),
                message=r.message,
            )
            for r in finding.related
        ]
        or None,
    )


# ---------------------------------------------------------------------- code actions


def code_actions(document: TextDocument, diagnostics: Sequence[types.Diagnostic]) -> List[types.CodeAction]:
    actions: List[types.CodeAction] = []
    for diagnostic in diagnostics:
        if diagnostic.source != SOURCE or not isinstance(diagnostic.code, str):
            continue
        actions.extend(_fix_actions(document, diagnostic))
        noqa = _noqa_action(document, diagnostic)
        if noqa is not None:
            actions.append(noqa)
    return actions


def _fix_data(finding: Finding, on_file: bool) -> Optional[dict]:
    if finding.fix is None or on_file or finding.cell is not None:
        return None
    return {"title": finding.fix.title, "applicability": finding.fix.applicability, "edits": [list(e) for e in finding.fix.edits]}


def _fix_actions(document: TextDocument, diagnostic: types.Diagnostic) -> List[types.CodeAction]:
    """The rule's own fix, as a quick fix: preferred when it is safe, marked when it is not.
    Its edits replace whole lines, so their positions need no conversion of units."""
    data = diagnostic.data if isinstance(diagnostic.data, dict) else {}
    fix = data.get("fix")
    if not isinstance(fix, dict):
        return []
    safe = fix.get("applicability") == "safe"
    edits = [
        types.TextEdit(
            range=types.Range(start=types.Position(line=row - 1, character=0), end=types.Position(line=end_row - 1, character=0)),
            new_text=content,
        )
        for row, _, end_row, _, content in fix.get("edits", [])
    ]
    return [
        types.CodeAction(
            title=f"{fix.get('title')}" + ("" if safe else " (unsafe)"),
            kind=types.CodeActionKind.QuickFix,
            diagnostics=[diagnostic],
            is_preferred=safe,
            edit=types.WorkspaceEdit(changes={document.uri: edits}),
        )
    ]


def _noqa_action(document: TextDocument, diagnostic: types.Diagnostic) -> Optional[types.CodeAction]:
    code = str(diagnostic.code)
    data = diagnostic.data if isinstance(diagnostic.data, dict) else {}
    if code == UNUSED_NOQA or data.get("noqa_row", diagnostic.range.start.line + 1) is None:
        return None
    row = int(data.get("noqa_row") or diagnostic.range.start.line + 1)
    edit = edit_adding_code(document.source, row, code)
    if edit is None:
        return None
    lines = document.lines
    codec = document.position_codec
    start = codec.position_to_client_units(lines, types.Position(line=edit.row - 1, character=edit.start))
    end = codec.position_to_client_units(lines, types.Position(line=edit.row - 1, character=edit.end))
    return types.CodeAction(
        title=f"Disable {code} for this line",
        kind=types.CodeActionKind.QuickFix,
        diagnostics=[diagnostic],
        edit=types.WorkspaceEdit(
            changes={document.uri: [types.TextEdit(range=types.Range(start=start, end=end), new_text=edit.text)]}
        ),
    )


# ---------------------------------------------------------------------- wiring


def _scheme(uri: str) -> str:
    return urlparse(uri).scheme


def _path(uri: str) -> Optional[str]:
    return to_fs_path(uri) if _scheme(uri) == "file" else None


def build() -> AmplintLanguageServer:
    server = AmplintLanguageServer()

    @server.feature(types.INITIALIZED)
    async def initialized(ls: AmplintLanguageServer, params: types.InitializedParams) -> None:
        ls.linter.load()  # the engine, now that the editor has its answer to `initialize`

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: AmplintLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: AmplintLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri, changed=True)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    async def did_save(ls: AmplintLanguageServer, params: types.DidSaveTextDocumentParams) -> None:
        if params.text_document.uri.endswith(("/pyproject.toml", "/.gitignore")):
            ls.relint_all()  # the configuration changed
        else:
            ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    async def did_close(ls: AmplintLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.clear([params.text_document.uri])

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
    async def notebook_open(ls: AmplintLanguageServer, params: types.DidOpenNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
    async def notebook_change(ls: AmplintLanguageServer, params: types.DidChangeNotebookDocumentParams) -> None:
        removed = params.change.cells.structure.did_close if params.change.cells and params.change.cells.structure else None
        if removed:
            ls.clear([cell.uri for cell in removed])
        ls.schedule(params.notebook_document.uri, changed=True)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
    async def notebook_save(ls: AmplintLanguageServer, params: types.DidSaveNotebookDocumentParams) -> None:
        ls.schedule(params.notebook_document.uri)

    @server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
    async def notebook_close(ls: AmplintLanguageServer, params: types.DidCloseNotebookDocumentParams) -> None:
        ls.clear([params.notebook_document.uri, *(cell.uri for cell in params.cell_text_documents)])

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    async def watched_files(ls: AmplintLanguageServer, params: types.DidChangeWatchedFilesParams) -> None:
        ls.relint_all()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def configuration(ls: AmplintLanguageServer, params: types.DidChangeConfigurationParams) -> None:
        ls.relint_all()

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, types.CodeActionKind.SourceFixAll, FIX_ALL]),
    )
    async def actions(ls: AmplintLanguageServer, params: types.CodeActionParams) -> Optional[List[types.CodeAction]]:
        only = [str(getattr(kind, "value", kind)) for kind in params.context.only or []]
        found: List[types.CodeAction] = []
        document = ls._open_document(params.text_document.uri)
        if document is None:
            return None
        if not only or _asked_for(types.CodeActionKind.QuickFix.value, only):
            found.extend(code_actions(document, params.context.diagnostics))
        # Fixing everything costs a fix run: done when asked for by kind (on save, the
        # "Source Action" menu), not for every light bulb.
        if only and _asked_for(FIX_ALL, only):
            fix_all = await ls.fix_all(params.text_document.uri)
            if fix_all is not None:
                found.append(fix_all)
        return found or None

    return server


def _asked_for(kind: str, only: Sequence[str]) -> bool:
    """Whether `kind` is one of the kinds asked for, or under one (`source` covers
    `source.fixAll.amplint`)."""
    return any(kind == asked or kind.startswith(asked + ".") for asked in only)
