"""The language server: pygls features around amplint's own engine.

Diagnostics are published on open and save at once, and after `DEBOUNCE_SECONDS` of quiet
while typing; a lint runs in a worker thread so the server keeps answering, and a result
for a version of the document the editor has since changed is dropped (the newer version's
lint is already scheduled). Severities are the rules' (`error` -> Error, `warning` ->
Warning); AMP100's stale `# noqa` is also tagged Unnecessary, which editors grey out.

Code actions: "Disable AMPxxx for this line" (adds `# noqa: AMPxxx`, or the code to the
line's `# noqa: ...`), and the rule's fix where it has one (`amplint.fix`): the same edits
`amplint --fix` makes for that finding alone, preferred when safe, "(unsafe)" otherwise.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path
from pygls.workspace import TextDocument

from amplint import __version__
from amplint.config import ConfigError
from amplint.diagnostics import FileError, Finding
from amplint.engine import lint_bytes
from amplint.lsp.settings import rules_for
from amplint.noqa import UNUSED_NOQA, edit_adding_code
from amplint.notebook import is_notebook
from amplint.selection import SelectionError

DEBOUNCE_SECONDS = 0.3
SOURCE = "amplint"
logger = logging.getLogger(__name__)

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
                        notebook="jupyter-notebook", cells=[types.NotebookCellLanguage(language="python")]
                    )
                ],
                save=True,
            ),
        )
        self.pending: Dict[str, "asyncio.Task[None]"] = {}
        # One lint at a time, off the event loop: LibCST is CPU-bound.
        self.linter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amplint-lint")
        self.reported_errors: Dict[str, str] = {}

    # ------------------------------------------------------------------ scheduling

    def schedule(self, uri: str, delay: float = 0.0) -> None:
        task = self.pending.pop(uri, None)
        if task is not None:
            task.cancel()
        self.pending[uri] = asyncio.get_running_loop().create_task(self._lint_after(uri, delay))

    async def _lint_after(self, uri: str, delay: float) -> None:
        try:
            if delay:
                await asyncio.sleep(delay)
            if self.workspace.get_notebook_document(notebook_uri=uri) is not None:
                await self.lint_notebook(uri)
            else:
                await self.lint_text_document(uri)
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug must not take the editor's server down with it
            logger.exception("amplint: linting %s failed", uri)
        finally:
            if self.pending.get(uri) is asyncio.current_task():
                del self.pending[uri]

    def relint_all(self) -> None:
        for uri in list(self.workspace.notebook_documents):
            self.schedule(uri)
        for uri in list(self.workspace.text_documents):
            if self.workspace.get_notebook_document(cell_uri=uri) is None:
                self.schedule(uri)

    # ------------------------------------------------------------------ text documents

    async def lint_text_document(self, uri: str) -> None:
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
        outcome = await self._run(_lint, name, path, text.encode("utf-8"))
        current = self._open_document(uri)
        if current is None or current.version != version:
            return
        findings = self._accept(uri, outcome)
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

    async def lint_notebook(self, uri: str) -> None:
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
        outcome = await self._run(_lint, name, path, _ipynb(cells, notebook.metadata))
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

    async def _run(self, *call: Any) -> Any:
        function, *args = call
        return await asyncio.get_running_loop().run_in_executor(self.linter, function, *args)

    def _accept(self, uri: str, outcome: "Tuple[List[Finding], Optional[str]]") -> List[Finding]:
        """The findings to publish; a configuration error is shown once, not on every keystroke."""
        findings, problem = outcome
        if problem is not None and self.reported_errors.get(uri) != problem:
            self.reported_errors[uri] = problem
            self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error, message=f"amplint: {problem}"))
        elif problem is None:
            self.reported_errors.pop(uri, None)
        return findings

    def clear(self, uris: Sequence[str]) -> None:
        for uri in uris:
            task = self.pending.pop(uri, None)
            if task is not None:
                task.cancel()
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


def _lint(name: str, path: Optional[str], data: bytes) -> "Tuple[List[Finding], Optional[str]]":
    """(findings, a problem to show the user): what `amplint NAME` would report for `data`."""
    try:
        rules, target, torch_target = rules_for(path)
    except (ConfigError, SelectionError) as error:
        return [], str(error)
    if not rules:
        return [], None
    result = lint_bytes(data, name, rules, target=target, torch_target=torch_target)
    if isinstance(result.error, FileError):
        # A syntax error while typing: the editor's Python support says where. The findings
        # of the last version would sit on the wrong lines, so none are kept.
        return [], None
    return result.findings, None


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

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    async def did_open(ls: AmplintLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    async def did_change(ls: AmplintLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        ls.schedule(params.text_document.uri, DEBOUNCE_SECONDS)

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
        ls.schedule(params.notebook_document.uri, DEBOUNCE_SECONDS)

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
        types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix]),
    )
    def actions(ls: AmplintLanguageServer, params: types.CodeActionParams) -> Optional[List[types.CodeAction]]:
        only = [str(getattr(kind, "value", kind)) for kind in params.context.only or []]
        quickfix = types.CodeActionKind.QuickFix.value
        if only and not any(kind == quickfix or quickfix.startswith(kind + ".") for kind in only):
            return None
        document = ls._open_document(params.text_document.uri)
        if document is None:
            return None
        return code_actions(document, params.context.diagnostics) or None

    return server


def serve() -> None:
    build().start_io()
