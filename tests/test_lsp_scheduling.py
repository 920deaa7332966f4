"""How the server schedules lints while the user types (issue 27): a change stops the lint of
an older version, a burst of changes is linted once, after it, and the last version's
diagnostics always come. The server runs in this process with a linter that waits to be told
to finish, so the order of events is the test's, not the machine's; and a real lint in a
worker is cancelled through its ticket."""

import asyncio
import os
import sys
import threading

import pytest

pytest.importorskip("pygls")

from lsprotocol import types  # noqa: E402
from pygls.workspace import Workspace  # noqa: E402

import amplint.lint.engine  # noqa: E402
from amplint.run.driver import FixRequest, Job, Runner  # noqa: E402
from amplint.lsp import server as server_module  # noqa: E402
from amplint.lsp.linting import Outcome, Ticket, lint_document, lint_isolated  # noqa: E402
from amplint.rules import ALL_RULES  # noqa: E402

from conftest import BUGGY  # noqa: E402

CODES = tuple(rule.code for rule in ALL_RULES)


class HeldLinter:
    """Stands for `Linter`: each lint waits until the test finishes it or its ticket is
    cancelled (then, as the real one, it answers None)."""

    def __init__(self):
        self.started = []  # (text, ticket), in the order the lints began
        self.finish = {}  # text -> asyncio.Event

    async def lint(self, name, path, data, ticket=None):
        text = data.decode()
        self.started.append((text, ticket))
        finish = self.finish.setdefault(text, asyncio.Event())
        while not finish.is_set():
            if ticket is not None and ticket.cancelled.is_set():
                return None
            await asyncio.sleep(0.01)
        return Outcome([])

    async def fix_all(self, name, path, text, ticket=None):
        self.started.append(("fix " + text, ticket))
        while not ticket.cancelled.is_set():
            await asyncio.sleep(0.01)
        return None


@pytest.fixture
def server(monkeypatch):
    # Generous: the quick changes of a test come far closer together than this.
    monkeypatch.setattr(server_module, "DEBOUNCE", 2.0)
    ls = server_module.AmplintLanguageServer()
    ls.protocol._workspace = Workspace(None)
    ls.linter = HeldLinter()
    ls.published = []
    ls.text_document_publish_diagnostics = lambda params: ls.published.append(params)
    ls.window_log_message = lambda params: None
    ls.window_show_message = lambda params: None
    return ls


URI = "file:///project/train.py"


def open_document(ls, text, version=1):
    ls.workspace.put_text_document(types.TextDocumentItem(uri=URI, language_id="python", version=version, text=text))
    ls.schedule(URI)


def change(ls, text, version):
    ls.workspace.update_text_document(
        types.VersionedTextDocumentIdentifier(uri=URI, version=version), types.TextDocumentContentChangeWholeDocument(text=text)
    )
    ls.schedule(URI, changed=True)


async def until(condition, what):
    for _ in range(3000):  # 30 s: the loop is this test's; nothing else delays it much
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


def finish(ls, text):
    ls.linter.finish.setdefault(text, asyncio.Event()).set()


@pytest.mark.asyncio
async def test_a_change_stops_the_lint_of_the_older_version(server):
    open_document(server, "v1")
    await until(lambda: len(server.linter.started) == 1, "the first lint starts")
    change(server, "v2", 2)  # the first change after opening: linted at once
    await until(lambda: len(server.linter.started) == 2, "the change is linted")
    (_, first), (text, second) = server.linter.started
    assert first.cancelled.is_set(), "the lint of version 1 is stopped, not waited for"
    assert text == "v2" and not second.cancelled.is_set()
    finish(server, "v2")
    await until(lambda: server.published, "diagnostics")
    assert [p.version for p in server.published] == [2], "version 1 is never published"


@pytest.mark.asyncio
async def test_a_burst_of_changes_is_linted_once_after_it(server):
    open_document(server, "v1")
    finish(server, "v1")
    await until(lambda: [p.version for p in server.published] == [1], "the first diagnostics")
    change(server, "v2", 2)  # after a pause: linted at once
    await until(lambda: len(server.linter.started) == 2, "the lint of the burst's first change")
    for version in range(3, 7):  # typing: each change hard on the heels of the one before
        change(server, f"v{version}", version)
    for text in ("v2", "v3", "v4", "v5", "v6"):
        finish(server, text)
    await until(lambda: len(server.published) == 2, "the burst's diagnostics")
    linted = [text for text, _ in server.linter.started]
    # The burst's first change is linted at once (it came after a pause) and stopped by the
    # second; the others wait for the typing to pause, and only the last is linted.
    assert linted == ["v1", "v2", "v6"]
    assert server.linter.started[1][1].cancelled.is_set()
    assert [p.version for p in server.published] == [1, 6]


@pytest.mark.asyncio
async def test_a_change_after_a_pause_is_linted_at_once(server, monkeypatch):
    # A debounce far longer than the test waits: a change it delayed would never be linted.
    monkeypatch.setattr(server_module, "DEBOUNCE", 1000.0)
    open_document(server, "v1")
    finish(server, "v1")
    await until(lambda: server.published, "the first diagnostics")
    change(server, "v2", 2)
    finish(server, "v2")
    await until(lambda: [p.version for p in server.published] == [1, 2], "diagnostics of both")
    server.changed_at[URI] -= 2 * server_module.DEBOUNCE  # the user paused
    change(server, "v3", 3)
    await until(lambda: len(server.linter.started) == 3, "the lint starts at once")


@pytest.mark.asyncio
async def test_closing_a_document_stops_its_lint(server):
    open_document(server, "v1")
    await until(lambda: server.linter.started, "the lint starts")
    server.clear([URI])
    assert server.linter.started[0][1].cancelled.is_set()
    await until(lambda: URI not in server.running, "the lint ends")
    assert [list(p.diagnostics) for p in server.published] == [[]]  # the clearing only


@pytest.mark.asyncio
async def test_saving_does_not_stop_the_lint_of_the_same_version(server):
    open_document(server, "v1")
    await until(lambda: server.linter.started, "the lint starts")
    server.schedule(URI)  # as didSave does
    assert not server.linter.started[0][1].cancelled.is_set()
    finish(server, "v1")
    await until(lambda: len(server.published) == 2, "both lints published")


# --------------------------------------------------------------------------- a real lint


def _hang_on(marker):
    real = amplint.lint.engine.lint_bytes

    def lint_bytes(data, *args, **kwargs):
        if marker in data:
            while True:  # a lint far longer than the test waits
                pass
        return real(data, *args, **kwargs)

    return lint_bytes


def test_a_cancelled_lint_stops_its_worker_and_is_not_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(amplint.lint.engine, "lint_bytes", _hang_on(b"HANG"))
    cancel = threading.Event()
    runner = Runner(1)
    results = []
    lint = threading.Thread(target=lambda: results.extend(runner.lint([Job("hang.py", CODES, data=b"# HANG\n" + BUGGY.encode())], cancel)))
    lint.start()
    try:
        for _ in range(3000):
            if any(w.unit is not None for w in runner._pool):
                break
            lint.join(0.01)
        (worker,) = runner._pool
        cancel.set()
        runner.interrupt()
        lint.join(60)
        assert not lint.is_alive()
        (result,) = results
        assert result.error is not None and result.error.message == "not linted"
        assert not worker.alive() and runner._pool == []
        # The runner goes on with a fresh worker.
        (after,) = runner.lint([Job("train.py", CODES, data=BUGGY.encode())])
        assert [f.code for f in after.findings] == ["AMP003"]
    finally:
        runner.close()


def test_a_ticket_cancelled_before_its_lint_starts_lints_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(amplint.lint.engine, "lint_bytes", _hang_on(b"HANG"))
    ticket = Ticket()
    ticket.cancel()
    path = str(tmp_path / "train.py")
    assert lint_document(path, path, b"# HANG\n" + BUGGY.encode(), ticket) is None


def test_the_editor_lints_without_exporting_a_summary(tmp_path):
    # A module whose function a training script elsewhere could call: it has a summary.
    text = BUGGY + "\n\ndef train_step(scaler, loss, optimizer):\n    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n"
    path = str(tmp_path / "train.py")
    result = lint_isolated(path, CODES, text.encode(), None)
    assert [f.code for f in result.findings] == ["AMP003"]
    assert result.summary is None
    (whole,) = Runner(1, isolate=False).lint([Job(path, CODES, data=text.encode())])
    assert whole.summary is not None and [f.code for f in whole.findings] == ["AMP003"]
    assert os.listdir(tmp_path) == []  # nothing was cached or written


# --------------------------------------------------------------------------- fix all (issue 42, N2)


@pytest.mark.asyncio
@pytest.mark.parametrize("stop", ["the request is cancelled", "the document changes", "a newer fixAll comes", "the document closes"])
async def test_a_fix_all_is_stopped_when_it_is_worth_nothing(server, stop):
    open_document(server, "v1")
    server.fixable[URI] = (1, True)  # as a lint that found a safe fix leaves it
    request = asyncio.ensure_future(server.fix_all(URI))
    await until(lambda: fixes(server), "the fix starts")
    (ticket,) = fixes(server)
    if stop == "the request is cancelled":  # what pygls does on `$/cancelRequest`
        request.cancel()
    elif stop == "the document changes":
        change(server, "v2", 2)
    elif stop == "a newer fixAll comes":
        newer = asyncio.ensure_future(server.fix_all(URI))
        await until(lambda: len(fixes(server)) == 2, "the newer fix starts")
    else:
        server.clear([URI])
    await until(ticket.cancelled.is_set, "the fix is stopped")
    if stop != "the request is cancelled":
        assert await request is None
    if stop == "a newer fixAll comes":
        newer.cancel()


def fixes(server):
    return [ticket for text, ticket in server.linter.started if text.startswith("fix ")]


@pytest.mark.asyncio
async def test_a_cancelled_fix_all_is_answered_at_once_while_its_lane_stops(monkeypatch):
    from amplint.lsp import linting

    release = threading.Event()

    def held(name, path, text, ticket=None):  # the lane's fix, not done until the test says
        release.wait(60)
        return text + "# fixed\n"

    monkeypatch.setattr(linting, "fix_document", held)
    linter, ticket = linting.Linter(), Ticket()
    try:
        request = asyncio.ensure_future(linter.fix_all("train.py", None, "v1\n", ticket))
        await asyncio.sleep(0.05)
        assert not request.done()
        ticket.cancel()
        await until(request.done, "the cancelled fixAll is answered")
        assert request.result() is None
        assert not release.is_set()  # answered while its lane was still busy
        release.set()
        assert await linter.fix_all("train.py", None, "v1\n", Ticket()) == "v1\n# fixed\n"
    finally:
        release.set()
        linter.executor.shutdown(wait=True)


@pytest.mark.asyncio
async def test_a_fix_done_as_its_fix_all_was_superseded_is_dropped(monkeypatch):
    from amplint.lsp import linting

    def superseded_as_it_ends(name, path, text, ticket=None):  # a newer fixAll comes as it returns
        ticket.cancel()
        return text + "# fixed\n"

    monkeypatch.setattr(linting, "fix_document", superseded_as_it_ends)
    linter = linting.Linter()
    try:
        assert await linter.fix_all("train.py", None, "v1\n", Ticket()) is None
    finally:
        linter.executor.shutdown(wait=True)


@pytest.mark.asyncio
async def test_a_ticket_cancelled_before_it_is_watched_is_stopped_already():
    ticket = Ticket()
    ticket.cancel()
    stopped = ticket.stopped()
    assert stopped.done()


def _fix_forever(*args, **kwargs):
    while True:
        pass


def test_a_fix_runs_in_a_worker_within_the_budget(tmp_path, monkeypatch):
    import amplint.lint.fix_loop

    with Runner(1) as runner:
        fixed = runner.fix(Job("train.py", CODES, data=BUGGY.encode(), summary=False, fix=FixRequest()))
        assert fixed.outcome.count == 1 and "scaler.unscale_(optimizer)" in fixed.text_after
    monkeypatch.setattr(amplint.lint.fix_loop, "fix_file", _fix_forever)  # forked into the worker with it
    with Runner(1, budget=1) as runner:
        result = runner.fix(Job("train.py", CODES, data=BUGGY.encode(), summary=False, fix=FixRequest()))
    assert result.error.message == "analysis exceeded the 1 s CPU safety limit; not linted (raise it with --file-budget)"


class CancelledAsItIsHandedOut:
    """A `cancel` set just after the runner's first look: the ticket's `interrupt` came while
    no worker had a unit yet, so it stopped nothing."""

    def __init__(self):
        self.looks = 0

    def is_set(self):
        self.looks += 1
        return self.looks > 1


def test_a_cancel_that_comes_as_a_fix_is_handed_out_stops_it_at_once(monkeypatch):
    import multiprocessing.connection

    import amplint.lint.fix_loop

    monkeypatch.setattr(amplint.lint.fix_loop, "fix_file", _fix_forever)
    waits = []  # the runner's waits on its busy workers
    wait = multiprocessing.connection.wait

    def watched(*args, **kwargs):
        if sys._getframe(1).f_code.co_name == "_execute":
            waits.append(args)
        return wait(*args, **kwargs)

    monkeypatch.setattr(multiprocessing.connection, "wait", watched)
    with Runner(1) as runner:
        result = runner.fix(Job("train.py", CODES, data=BUGGY.encode(), summary=False, fix=FixRequest()), CancelledAsItIsHandedOut())
    # Not a wait on the worker first (a whole file, or the wait's timeout, before it is stopped).
    assert result.error.message == "not linted" and waits == []


def test_a_cancelled_fix_stops_its_worker(monkeypatch):
    import amplint.lint.fix_loop

    monkeypatch.setattr(amplint.lint.fix_loop, "fix_file", _fix_forever)
    ticket = Ticket()
    results = []
    fixing = threading.Thread(target=lambda: results.append(lint_isolated("train.py", CODES, BUGGY.encode(), None, ticket=ticket, fix=FixRequest())))
    fixing.start()
    for _ in range(3000):
        if ticket._runner is not None and any(w.unit is not None for w in ticket._runner._pool):
            break
        fixing.join(0.01)
    ticket.cancel()
    fixing.join(60)
    assert not fixing.is_alive() and results[0].error.message == "not linted"
