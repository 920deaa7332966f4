"""`amplint server` end to end: a real LSP client (pytest-lsp) starts the server over stdio,
opens, edits, saves and closes documents and notebooks, and asks for code actions.

One server per client kind serves the whole module (each test works on its own files), so
the suite pays for a server's start once, not per test."""

import asyncio
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pygls")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402

from conftest import BUGGY  # noqa: E402

CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
FIXED = BUGGY.replace(CLIP, "scaler.unscale_(optimizer)\n    " + CLIP)
WAIT = 30  # seconds: a loaded CI machine, a cold interpreter
SERVER = ClientServerConfig(server_command=[sys.executable, "-m", "amplint", "server"])
# The tests share their module's event loop, where the module's server lives.
in_module_loop = pytest.mark.asyncio(loop_scope="module")


@pytest_lsp.fixture(config=SERVER, scope="module")
async def client(lsp_client: LanguageClient, tmp_path_factory):
    capabilities = client_capabilities("visual-studio-code")
    capabilities.notebook_document = types.NotebookDocumentClientCapabilities(
        synchronization=types.NotebookDocumentSyncClientCapabilities()
    )
    lsp_client.published = []  # every publishDiagnostics, in order, to count what is published
    original = lsp_client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS]

    def record(params):
        lsp_client.published.append(params)
        return original(params)

    lsp_client.protocol.fm.features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = record
    result = await lsp_client.initialize_session(
        types.InitializeParams(capabilities=capabilities, root_uri=tmp_path_factory.mktemp("vscode").as_uri())
    )
    lsp_client.server_capabilities = result.capabilities
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=SERVER, scope="module")
async def neovim(lsp_client: LanguageClient, tmp_path_factory):
    # Neovim 0.11 offers UTF-8 positions first, and the server takes them.
    result = await lsp_client.initialize_session(
        types.InitializeParams(
            capabilities=client_capabilities("neovim@v0.11.0"), root_uri=tmp_path_factory.mktemp("neovim").as_uri()
        )
    )
    lsp_client.server_capabilities = result.capabilities
    yield
    await lsp_client.shutdown_session()


async def diagnostics_for(client, uri, count=None, settle=0.0):
    """Wait for diagnostics for `uri` (and, with `count`, for that many findings)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while loop.time() < deadline:
        found = client.diagnostics.get(uri)
        if found is not None and (count is None or len(found) == count):
            if settle:
                await asyncio.sleep(settle)
                found = client.diagnostics.get(uri)
            return list(found)
        await asyncio.sleep(0.05)
    raise AssertionError(f"no diagnostics ({count}) for {uri}: {client.diagnostics.get(uri)}")


def open_file(client, path, text, version=1, language="python"):
    path.write_text(text)
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text))
    )
    return uri


def replace_all(client, uri, text, version):
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


@in_module_loop
async def test_capabilities(client: LanguageClient):
    capabilities = client.server_capabilities
    assert list(capabilities.code_action_provider.code_action_kinds) == [
        types.CodeActionKind.QuickFix,
        types.CodeActionKind.SourceFixAll,
        "source.fixAll.amplint",
    ]
    (selector,) = capabilities.notebook_document_sync.notebook_selector
    assert selector.notebook == "jupyter-notebook"


@in_module_loop
async def test_diagnostics_on_open_with_severity_code_and_help(client: LanguageClient, tmp_path):
    uri = open_file(client, tmp_path / "train.py", BUGGY)
    (diagnostic,) = await diagnostics_for(client, uri, 1)
    assert diagnostic.source == "amplint"
    assert diagnostic.code == "AMP003"
    assert diagnostic.severity == types.DiagnosticSeverity.Error
    assert diagnostic.range == types.Range(start=types.Position(7, 4), end=types.Position(7, 4 + len(CLIP)))
    title, help_line = diagnostic.message.split("\n")
    assert title == f"`{CLIP}` clips gradients that still carry the loss scale"
    assert help_line.startswith("help: The loss scale is 65536")
    assert diagnostic.code_description.href.endswith("#amp003")


@in_module_loop
async def test_a_burst_of_edits_ends_with_the_last_version_and_never_goes_back(client: LanguageClient, tmp_path):
    uri = open_file(client, tmp_path / "train.py", BUGGY)
    await diagnostics_for(client, uri, 1)
    before = len(client.published)
    # Three quick edits: the last one fixes the mistake.
    replace_all(client, uri, BUGGY + "# 1\n", 2)
    replace_all(client, uri, BUGGY + "# 2\n", 3)
    replace_all(client, uri, FIXED, 4)
    assert await diagnostics_for(client, uri, 0, settle=1.0) == []
    after = [p.version for p in client.published[before:] if p.uri == uri]
    # The last version is published last, and no version after a newer one. Whether the first
    # of the burst is published depends on the machine's load (its lint may end before the
    # server reads the next change), so that is not asserted here.
    assert after[-1] == 4 and after == sorted(set(after)), after


@in_module_loop
async def test_save_and_close(client: LanguageClient, tmp_path):
    uri = open_file(client, tmp_path / "train.py", BUGGY)
    await diagnostics_for(client, uri, 1)
    client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))
    assert await diagnostics_for(client, uri, 0) == []
    uri = open_file(client, tmp_path / "train.py", FIXED)
    assert await diagnostics_for(client, uri, 0) == []


@in_module_loop
async def test_the_cli_configuration_applies(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.amplint]\nextend-exclude = ["generated"]\nper-file-ignores = { "scripts/*.py" = ["AMP003"] }\n'
    )
    (tmp_path / "scripts").mkdir()
    (tmp_path / "generated").mkdir()
    ignored = open_file(client, tmp_path / "scripts" / "bench.py", BUGGY)
    excluded = open_file(client, tmp_path / "generated" / "train.py", BUGGY)
    linted = open_file(client, tmp_path / "train.py", BUGGY)
    assert len(await diagnostics_for(client, linted, 1)) == 1
    assert await diagnostics_for(client, ignored) == []
    assert await diagnostics_for(client, excluded) == []
    # Saving pyproject.toml re-lints what is open with the new configuration.
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP003"]\n')
    client.text_document_did_save(
        types.DidSaveTextDocumentParams(types.TextDocumentIdentifier((tmp_path / "pyproject.toml").as_uri()))
    )
    assert await diagnostics_for(client, linted, 0) == []


@in_module_loop
async def test_noqa_code_action(client: LanguageClient, tmp_path):
    text = BUGGY.replace(CLIP, CLIP + "  # see #12")
    uri = open_file(client, tmp_path / "train.py", text)
    (diagnostic,) = await diagnostics_for(client, uri, 1)
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri),
            range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic]),
        )
    )
    fix, action = actions
    # The rule's own fix first, preferred: the line `amplint --fix` inserts.
    assert fix.title == "Unscale before clipping: `scaler.unscale_(optimizer)`" and fix.is_preferred
    (insert,) = fix.edit.changes[uri]
    assert insert.range == types.Range(start=types.Position(7, 0), end=types.Position(7, 0))
    assert insert.new_text == "    scaler.unscale_(optimizer)\n"
    assert action.title == "Disable AMP003 for this line"
    assert action.kind == types.CodeActionKind.QuickFix
    (edit,) = action.edit.changes[uri]
    line = text.splitlines()[7]
    assert edit.range == types.Range(start=types.Position(7, len(line)), end=types.Position(7, len(line)))
    assert edit.new_text == "  # noqa: AMP003"
    # Applied, the finding is gone, and the directive is used (no AMP100).
    lines = text.splitlines(keepends=True)
    lines[7] = line + edit.new_text + "\n"
    replace_all(client, uri, "".join(lines), 2)
    assert await diagnostics_for(client, uri, 0, settle=0.5) == []
    # A client that asks only for other kinds gets none.
    none = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri),
            range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic], only=[types.CodeActionKind.Refactor]),
        )
    )
    assert not none


@in_module_loop
async def test_unused_noqa_is_a_greyed_out_warning(client: LanguageClient, tmp_path):
    uri = open_file(client, tmp_path / "stale.py", "import torch\nx = torch.ones(1)  # noqa: AMP003\n")
    (diagnostic,) = await diagnostics_for(client, uri, 1)
    assert diagnostic.code == "AMP100"
    assert diagnostic.severity == types.DiagnosticSeverity.Warning
    assert list(diagnostic.tags) == [types.DiagnosticTag.Unnecessary]
    assert diagnostic.range.start == types.Position(1, 19)


@in_module_loop
async def test_columns_are_utf16_code_units(client: LanguageClient, tmp_path):
    # An emoji is one code point but two UTF-16 code units, LSP's default position encoding.
    text = BUGGY.replace("    " + CLIP, '    s = "😀"; ' + CLIP)
    uri = open_file(client, tmp_path / "train.py", text)
    (diagnostic,) = await diagnostics_for(client, uri, 1)
    start = len('    s = "😀"; '.encode("utf-16-le")) // 2
    assert diagnostic.range.start == types.Position(7, start)
    assert diagnostic.range.end == types.Position(7, start + len(CLIP))


@in_module_loop
async def test_columns_are_utf8_bytes_for_neovim(neovim: LanguageClient, tmp_path):
    assert neovim.server_capabilities.position_encoding == types.PositionEncodingKind.Utf8
    text = BUGGY.replace("    " + CLIP, '    s = "😀"; ' + CLIP)
    uri = open_file(neovim, tmp_path / "train.py", text)
    (diagnostic,) = await diagnostics_for(neovim, uri, 1)
    start = len('    s = "😀"; '.encode("utf-8"))
    assert diagnostic.range.start == types.Position(7, start)
    assert diagnostic.range.end == types.Position(7, start + len(CLIP))


@in_module_loop
async def test_a_syntax_error_while_typing_clears_stale_findings(client: LanguageClient, tmp_path):
    uri = open_file(client, tmp_path / "train.py", BUGGY)
    await diagnostics_for(client, uri, 1)
    replace_all(client, uri, BUGGY + "def broken(:\n", 2)
    assert await diagnostics_for(client, uri, 0) == []


# --------------------------------------------------------------------------- isolation and budget

# The reliability report's D12, grown: 8,000 chained helpers with findings, past the work
# limit (an editor's lint exports no summary: about 570 steps a helper, so 5,000 would fit),
# stopped there after 20 to 40 s of CPU.
CHAINED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n" + "".join(
    f"def f{i}(opt, loss):\n    with torch.autocast('cuda'):\n        loss.backward()\n    scaler.step(opt)\n    f{i + 1}(opt, loss)\n"
    for i in range(8000)
)
SLOW_WAIT = 180  # seconds: the budget is CPU time, and a loaded machine stretches wall time


async def published_for(client, uri, version=None, wait=WAIT):
    """The first publishDiagnostics for `uri` (and `version`) from now on... or so far."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while loop.time() < deadline:
        for params in client.published:
            if params.uri == uri and (version is None or params.version == version):
                return params
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing published for {uri} (version {version})")


async def message_about(client, text, wait=WAIT):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while loop.time() < deadline:
        for message in client.messages:
            if text in message.message:
                return message.message
        await asyncio.sleep(0.05)
    raise AssertionError(f"no message with {text!r}: {[m.message for m in client.messages]}")


@in_module_loop
async def test_a_document_over_the_budget_stalls_no_other(client: LanguageClient, tmp_path):
    slow = open_file(client, tmp_path / "chained.py", CHAINED)
    quick = open_file(client, tmp_path / "train.py", BUGGY)
    assert len(await diagnostics_for(client, quick, 1)) == 1
    # The small document's diagnostics came while the slow one was still being linted.
    assert not [p for p in client.published if p.uri == slow]
    # The slow one is stopped at the command's budget: no diagnostics, and a message saying why.
    assert list((await published_for(client, slow, wait=SLOW_WAIT)).diagnostics) == []
    message = await message_about(client, "chained.py")
    assert "work limit" in message and "not linted" in message


@in_module_loop
async def test_a_superseded_version_is_never_published(client: LanguageClient, tmp_path):
    uri = open_file(client, tmp_path / "train.py", CHAINED)
    replace_all(client, uri, BUGGY, 2)
    (params,) = [await published_for(client, uri, version=2, wait=SLOW_WAIT)]
    assert len(params.diagnostics) == 1
    await asyncio.sleep(0.5)
    assert [p.version for p in client.published if p.uri == uri] == [2]


@in_module_loop
async def test_a_lone_surrogate_clears_the_diagnostics_and_says_why(client: LanguageClient, tmp_path):
    # D13: JSON "\ud800" is a str no UTF-8 encoder takes.
    uri = open_file(client, tmp_path / "train.py", BUGGY)
    await diagnostics_for(client, uri, 1)
    before = len(client.published)
    replace_all(client, uri, 'x = "\ud800"\n' + BUGGY, 2)
    assert await diagnostics_for(client, uri, 0) == []
    assert [p.version for p in client.published[before:] if p.uri == uri] == [2]
    message = await message_about(client, "lone surrogate")
    assert "train.py: not text" in message and "line 1" in message
    # Typing on, the text is text again and linted as usual.
    replace_all(client, uri, BUGGY, 3)
    assert len(await diagnostics_for(client, uri, 1)) == 1


# A server whose worker dies as LibCST's parser can (a segfault) on any text with "CRASH".
CRASHING = ClientServerConfig(
    server_command=[
        sys.executable,
        "-c",
        textwrap.dedent(
            """\
            import os, signal
            import amplint.lint.engine
            real = amplint.lint.engine.lint_bytes
            def lint_bytes(data, *args, **kwargs):
                if b"CRASH" in data:
                    os.kill(os.getpid(), signal.SIGSEGV)
                return real(data, *args, **kwargs)
            amplint.lint.engine.lint_bytes = lint_bytes
            from amplint.lsp.stdio import serve
            serve()
            """
        ),
    ]
)


@pytest_lsp.fixture(config=CRASHING, scope="module")
async def crashing(lsp_client: LanguageClient, tmp_path_factory):
    await lsp_client.initialize_session(
        types.InitializeParams(capabilities=client_capabilities("visual-studio-code"), root_uri=tmp_path_factory.mktemp("crash").as_uri())
    )
    yield
    await lsp_client.shutdown_session()


@in_module_loop
async def test_a_crashing_worker_costs_one_document_not_the_server(crashing: LanguageClient, tmp_path):
    uri = open_file(crashing, tmp_path / "train.py", BUGGY)
    await diagnostics_for(crashing, uri, 1)
    replace_all(crashing, uri, BUGGY + "# CRASH\n", 2)
    assert await diagnostics_for(crashing, uri, 0) == []
    message = await message_about(crashing, "train.py")
    assert "crashed" in message and "SIGSEGV" in message and "not linted" in message
    # The server lives on: other documents, and this one once it no longer crashes.
    other = open_file(crashing, tmp_path / "other.py", BUGGY)
    assert len(await diagnostics_for(crashing, other, 1)) == 1
    replace_all(crashing, uri, BUGGY, 3)
    assert len(await diagnostics_for(crashing, uri, 1)) == 1


# --------------------------------------------------------------------------- fix all


def applied(text, edits):
    """`text` with whole-line edits (as the server makes them) applied at once."""
    lines = text.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: (e.range.start.line, e.range.end.line), reverse=True):
        lines[edit.range.start.line : edit.range.end.line] = [edit.new_text]
    return "".join(lines)


async def fix_all(client, uri, kind=types.CodeActionKind.SourceFixAll):
    return await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri),
            range=types.Range(start=types.Position(0, 0), end=types.Position(0, 0)),
            context=types.CodeActionContext(diagnostics=[], only=[kind]),
        )
    )


@in_module_loop
async def test_fix_all_applies_every_safe_fix(client: LanguageClient, tmp_path):
    second = BUGGY.replace(
        "import torch\n",
        "import torch\n\ndef again():\n    for x in loader:\n        scaler.scale(loss).backward()\n        "
        + CLIP
        + "\n        scaler.step(optimizer)\n        scaler.update()\n\n",
    )
    uri = open_file(client, tmp_path / "train.py", second)
    assert len(await diagnostics_for(client, uri, 2)) == 2
    for kind in (types.CodeActionKind.SourceFixAll, types.CodeActionKind.Source, "source.fixAll.amplint"):
        (action,) = await fix_all(client, uri, kind)
        assert action.kind == "source.fixAll.amplint"
        (change,) = action.edit.document_changes
        assert change.text_document.uri == uri and change.text_document.version == 1
        fixed = applied(second, change.edits)
        # What `amplint --fix` writes.
        assert fixed == second.replace("        " + CLIP, "        scaler.unscale_(optimizer)\n        " + CLIP).replace(
            "\n    " + CLIP, "\n    scaler.unscale_(optimizer)\n    " + CLIP
        )
    replace_all(client, uri, fixed, 2)
    assert await diagnostics_for(client, uri, 0) == []
    assert await fix_all(client, uri) is None  # nothing left to fix


@in_module_loop
async def test_fix_all_leaves_what_the_configuration_makes_unfixable(client: LanguageClient, tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nunfixable = ["AMP003"]\n')
    uri = open_file(client, tmp_path / "train.py", BUGGY)
    (diagnostic,) = await diagnostics_for(client, uri, 1)
    assert diagnostic.data["fix"]["applicability"] == "safe"
    assert await fix_all(client, uri) is None


# --------------------------------------------------------------------------- notebooks

SETUP = "import torch\nscaler = torch.amp.GradScaler()\n"
STEP = textwrap.dedent(
    f"""\
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        {CLIP}
        scaler.step(optimizer)
        scaler.update()"""
)


def open_notebook(client, path, cells):
    uri = path.as_uri()
    cell_items = []
    documents = []
    for index, (kind, text) in enumerate(cells):
        cell_uri = f"vscode-notebook-cell:{path}#cell{index}"
        cell_items.append(types.NotebookCell(kind=kind, document=cell_uri))
        documents.append(types.TextDocumentItem(uri=cell_uri, language_id="python" if kind == 2 else "markdown", version=1, text=text))
    client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(uri=uri, notebook_type="jupyter-notebook", version=1, cells=cell_items),
            cell_text_documents=documents,
        )
    )
    return [document.uri for document in documents]


@in_module_loop
async def test_notebook_cells_are_linted_together(client: LanguageClient, tmp_path):
    markup, code = types.NotebookCellKind.Markup, types.NotebookCellKind.Code
    cells = open_notebook(client, tmp_path / "train.ipynb", [(markup, "# Train"), (code, SETUP), (code, STEP)])
    (diagnostic,) = await diagnostics_for(client, cells[2], 1)
    # Cell 3, row 5: the scaler from cell 2 counts.
    assert diagnostic.code == "AMP003"
    assert diagnostic.range.start == types.Position(4, 4)
    assert await diagnostics_for(client, cells[1]) == []
    # Editing a cell (the fix) re-lints the notebook.
    fixed = STEP.replace("    " + CLIP, "    scaler.unscale_(optimizer)\n    " + CLIP)
    client.notebook_document_did_change(
        types.DidChangeNotebookDocumentParams(
            notebook_document=types.VersionedNotebookDocumentIdentifier(version=2, uri=(tmp_path / "train.ipynb").as_uri()),
            change=types.NotebookDocumentChangeEvent(
                cells=types.NotebookDocumentCellChanges(
                    text_content=[
                        types.NotebookDocumentCellContentChanges(
                            document=types.VersionedTextDocumentIdentifier(uri=cells[2], version=2),
                            changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)],
                        )
                    ]
                )
            ),
        )
    )
    assert await diagnostics_for(client, cells[2], 0) == []


@in_module_loop
async def test_noqa_action_in_a_notebook_cell(client: LanguageClient, tmp_path):
    code = types.NotebookCellKind.Code
    cells = open_notebook(client, tmp_path / "n.ipynb", [(code, SETUP), (code, STEP)])
    (diagnostic,) = await diagnostics_for(client, cells[1], 1)
    (action,) = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(cells[1]),
            range=diagnostic.range,
            context=types.CodeActionContext(diagnostics=[diagnostic]),
        )
    )
    (edit,) = action.edit.changes[cells[1]]
    assert edit.range.start == types.Position(4, len(STEP.splitlines()[4]))
    assert edit.new_text == "  # noqa: AMP003"


# --------------------------------------------------------------------------- without pygls


def test_without_pygls_the_server_says_how_to_install_it(tmp_path):
    poison = tmp_path / "poison" / "pygls"
    poison.mkdir(parents=True)
    (poison / "__init__.py").write_text('raise ImportError("No module named pygls (poisoned)")\n')
    import os

    env = {**os.environ, "PYTHONPATH": str(tmp_path / "poison")}
    result = subprocess.run(
        [sys.executable, "-m", "amplint", "server"], capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 2
    assert "pip install 'amplint[lsp]'" in result.stderr
    # The linter itself does not need it.
    (tmp_path / "train.py").write_text(BUGGY)
    lint = subprocess.run([sys.executable, "-m", "amplint", "--concise", "train.py"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert lint.returncode == 1 and "AMP003" in lint.stdout


def test_the_server_settings_do_not_import_the_command():
    # One settings module (amplint.config.per_file) serves both: no cli <-> lsp import cycle.
    code = "import sys, amplint.lsp.settings; print('amplint.cli' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr


# --------------------------------------------------------------------------- initialize (issues 38, 41, 42)


def _initialize_answer(capabilities, first=b""):
    """The server's answer to `initialize` (after `first`, raw frames sent before it)."""
    import json

    def frame(message):
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        return b"Content-Length: %d\r\n\r\n" % len(body) + body

    stream = first + frame({"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": capabilities}})
    stream += frame({"id": 2, "method": "shutdown"}) + frame({"method": "exit"})
    done = subprocess.run([sys.executable, "-m", "amplint", "server"], input=stream, capture_output=True, timeout=60)
    answers = []
    for chunk in done.stdout.split(b"Content-Length: ")[1:]:
        message = json.loads(chunk.partition(b"\r\n\r\n")[2])
        if message.get("id") == 1:
            answers.append(message)
    assert done.returncode == 0 and b"otherwise than amplint did" not in done.stderr, done.stderr
    (answer,) = answers  # one answer: pygls's own is dropped
    return answer


@pytest.mark.parametrize("client_file", ["visual_studio_code_v1.65.2.json", "neovim_v0.11.0.json", "neovim_v0.6.1.json", "emacs_v29.1.json", None])
def test_initialize_is_answered_as_pygls_answers_it(client_file):
    """The server answers `initialize` before it imports pygls (amplint.lsp.handshake): with
    what pygls answers when it is asked first, for the clients amplint is used with."""
    import json
    import os

    capabilities = {}
    if client_file is not None:
        with open(os.path.join(os.path.dirname(pytest_lsp.__file__), "clients", client_file)) as handle:
            capabilities = json.load(handle)["capabilities"]
    early = _initialize_answer(capabilities)
    # A notification first: the first message is not `initialize`, and pygls answers it.
    note = json.dumps({"jsonrpc": "2.0", "method": "$/setTrace", "params": {"value": "off"}}).encode()
    by_pygls = _initialize_answer(capabilities, b"Content-Length: %d\r\n\r\n" % len(note) + note)
    assert early == by_pygls


def test_initialize_is_answered_before_pygls_and_the_engine_are_imported():
    """What runs before the answer: the standard library and amplint's stdio loop only."""
    code = (
        "import sys, amplint.lsp.stdio, amplint.lsp.handshake, amplint.lsp.framing; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pygls', 'lsprotocol', 'libcst', 'cattrs', 'attrs')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr
