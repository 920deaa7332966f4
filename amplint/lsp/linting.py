"""How the server lints and fixes a document: in a worker process, under the command's
per-file budget, a few documents at a time, off the event loop.

- **Isolation and budget.** Every lint runs in a worker process, with exactly the budget and
  crash handling of `amplint PATH` (`amplint.run.driver`, reached only through `lint_isolated`):
  a document over the budget, a LibCST crash or a worker that dies costs that document's
  diagnostics, never the server. The document then gets a clear result: no diagnostics
  (none of an older version left on screen) and a message saying why.
- **Lanes.** `LANES` threads each keep a worker (forked once, not per lint: a fork copies
  the server's page tables and faults its pages in, ~30 ms of CPU per edit), replaced by the
  driver when it dies or overruns natively, and after `RECYCLE_AFTER` lints, which bounds
  what a long session leaves in it. A document that takes its whole budget holds one lane
  while the others go on; the server lints each document one version at a time
  (`amplint.lsp.server`), so one document never holds more than one lane.
- **Cancelling.** A lint of a version the editor has since changed is worth nothing: its
  `Ticket` stops it (`Runner.interrupt`: the lane's worker is killed, native code too, and
  the next lint of that lane forks a fresh one), and `lint` answers None, never an outcome
  to publish.
- **Summaries.** A document is linted alone, so the summary a run's second phase reads
  (`amplint.project.summary`, a fifth of a lint) is not exported.
- **Fix all.** `fix_all` runs the `--fix` loop on a document's text the same way: in a
  lane's worker (`Runner.fix`), under the budget, stopped by its `Ticket` (a newer version, a
  `$/cancelRequest`, a newer fixAll of the document), as `amplint --fix` does after its lint
  pass: only for a version whose lint, in a worker within the budget, found a safe fix.
- **Start.** The engine (LibCST with its native parser, the rules, the driver) is imported
  in a lane once the server has answered `initialize` (`Linter.load`), not before: an editor
  waits for that answer. Every lint and fix waits for it, so no lane forks a worker while a
  module is half imported (the child would find its import lock held for good).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Tuple

if TYPE_CHECKING:
    from amplint.lint.diagnostics import FileResult, Finding
    from amplint.lint.fix_loop import FileFix
    from amplint.lint.syntax import PythonVersion
    from amplint.run.driver import FixRequest, Runner

# Lints at once. Two: one document over its budget never stalls another's diagnostics.
LANES = 2
# Lints a lane's worker serves before a fresh one replaces it.
RECYCLE_AFTER = 200
logger = logging.getLogger(__name__)


class Outcome(NamedTuple):
    findings: List["Finding"]
    # What to tell the user: why the document has no diagnostics (a configuration error,
    # the budget, a crash, text that is not text); None when there is nothing to say.
    problem: Optional[str] = None


def load_engine() -> None:
    """Import what a lint needs, workers included (they are forked with it loaded), LibCST's
    native parser too (`driver.load_engine`)."""
    import amplint.lint.fix  # noqa: F401
    import amplint.lint.fix_loop  # noqa: F401
    import amplint.lsp.settings  # noqa: F401
    from amplint.run import driver

    driver.load_engine()


class Linter:
    """Runs `lint_document` (and `fix_document`) in `LANES` threads, each with its worker."""

    def __init__(self, lanes: int = LANES) -> None:
        self.executor = ThreadPoolExecutor(max_workers=lanes, thread_name_prefix="amplint-lint")
        self._loaded: "Optional[Future[None]]" = None

    def load(self) -> "Future[None]":
        """Start importing the engine in a lane (once); what every lint waits for."""
        if self._loaded is None:
            self._loaded = self.executor.submit(load_engine)
        return self._loaded

    async def lint(self, name: str, path: Optional[str], data: bytes, ticket: Optional["Ticket"] = None) -> Optional[Outcome]:
        """The document's outcome; None when `ticket` was cancelled meanwhile."""
        await asyncio.wrap_future(self.load())
        return await asyncio.get_running_loop().run_in_executor(self.executor, lint_document, name, path, data, ticket)

    async def fix_all(self, name: str, path: Optional[str], text: str, ticket: Optional["Ticket"] = None) -> Optional[str]:
        """`text` with every safe fix applied; None when there is none, or `ticket` was
        cancelled: then at once, not when its lane is done (a superseded fixAll is answered
        before anything that comes after it, and a fix finished as it was cancelled is
        dropped)."""
        await asyncio.wrap_future(self.load())
        work = asyncio.get_running_loop().run_in_executor(self.executor, fix_document, name, path, text, ticket)
        if ticket is None:
            return await work
        stopped = ticket.stopped()
        cancelled = True  # unless the wait ends (a `$/cancelRequest` ends the coroutine here)
        try:
            await asyncio.wait([work, stopped], return_when=asyncio.FIRST_COMPLETED)
            cancelled = ticket.cancelled.is_set()
        finally:
            stopped.cancel()
            if cancelled:
                # The lane goes on until its worker is killed; what it returns is nobody's.
                work.add_done_callback(_dropped)
        return None if cancelled else work.result()


def _dropped(work: "asyncio.Future[Any]") -> None:
    """Retrieve what a lane returned to nobody (so asyncio does not log it as lost)."""
    if not work.cancelled():
        work.exception()


class Ticket:
    """One lint's (or fix's) handle: `cancel` (from any thread) stops it wherever it is:
    before it starts, or in its worker."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._runner: Optional["Runner"] = None
        self._waiting: List[Callable[[], None]] = []

    def cancel(self) -> None:
        with self._lock:
            self.cancelled.set()
            if self._runner is not None:
                self._runner.interrupt()
            waiting, self._waiting = self._waiting, []
        for wake in waiting:
            wake()

    def stopped(self) -> "asyncio.Future[None]":
        """A future of the running loop, done once the ticket is cancelled (from any thread)."""
        loop = asyncio.get_running_loop()
        future: "asyncio.Future[None]" = loop.create_future()

        def done() -> None:
            if not future.done():
                future.set_result(None)

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(done)
            except RuntimeError:  # the loop has closed: nobody waits
                pass

        with self._lock:
            if not self.cancelled.is_set():
                self._waiting.append(wake)
                return future
        done()
        return future

    def attach(self, runner: "Runner") -> bool:
        """`runner` is about to lint for this ticket; False if it is cancelled already."""
        with self._lock:
            self._runner = None if self.cancelled.is_set() else runner
            return self._runner is not None

    def detach(self) -> None:
        # Under the lock: once `lint` has returned, a late `cancel` must not interrupt the
        # lane's next lint, which may already use the same runner.
        with self._lock:
            self._runner = None


def lint_document(name: str, path: Optional[str], data: bytes, ticket: Optional[Ticket] = None) -> Optional[Outcome]:
    """What `amplint NAME` would report for `data`, linted in a worker process; None when
    `ticket` is cancelled before the lint is done."""
    from amplint.config.options import ConfigError
    from amplint.config.selection import SelectionError
    from amplint.lsp.settings import rules_for
    from amplint.run.driver import internal_error

    if ticket is not None and ticket.cancelled.is_set():
        return None
    try:
        rules, target, torch_target = rules_for(path)
    except (ConfigError, SelectionError) as error:
        return Outcome([], str(error))
    if not rules:
        return Outcome([])
    try:
        result = lint_isolated(name, tuple(rule.code for rule in rules), data, target, torch_target, ticket)
    except Exception as error:  # a bug in starting the worker: the server goes on
        logger.exception("amplint: linting %s failed", name)
        return Outcome([], f"{name}: {internal_error(error)}")
    if ticket is not None and ticket.cancelled.is_set():
        return None
    if result.error is not None:
        if result.error.message.startswith("syntax error"):
            # Typing: the editor's Python support says where. The findings of the last
            # version would sit on the wrong lines, so none are kept.
            return Outcome([])
        return Outcome([], f"{name}: {result.error.message}")
    return Outcome(result.findings)


def lint_isolated(
    name: str,
    codes: Tuple[str, ...],
    data: bytes,
    target: Optional["PythonVersion"],
    torch_target: Optional[Tuple[int, int]] = None,
    ticket: Optional[Ticket] = None,
    fix: Optional["FixRequest"] = None,
) -> Any:
    """`data` linted as the file `name` in this lane's worker process, with the command's
    per-file budget: the server's one way into the driver. `target`: the Python the code runs
    on; `torch_target`: the oldest torch its fixes must work on; `ticket`: stops it when
    cancelled (the result is then "not linted"). With `fix`: fixed instead (`Runner.fix`), a
    `FileFix`, or the `FileResult` saying why not."""
    from amplint.lint.diagnostics import FileError, FileResult
    from amplint.run.driver import DEFAULT_BUDGET, Job, Runner
    from amplint.run.source import size_error

    too_large = size_error(name, len(data))
    if too_large:
        return FileResult(name, error=too_large)
    runners: Dict[Any, Runner] = _lane.__dict__.setdefault("runners", {})
    key = (target, torch_target, getattr(torch_target, "newest", None))
    runner = runners.get(key)
    if runner is None or runner.linted >= RECYCLE_AFTER:
        if runner is not None:
            runner.close()
        # The command's budget; the Python and torch the code runs on are the runner's.
        # Its worker keeps the statements of what it parses: an edit's lint parses what changed.
        runner = runners[key] = Runner(1, DEFAULT_BUDGET, target=target, torch_target=torch_target, keep_statements=True)
    if ticket is not None and not ticket.attach(runner):
        return FileResult(name, error=FileError(name, "not linted"))
    try:
        cancel = ticket.cancelled if ticket is not None else None
        job = Job(name, codes, data=data, summary=False, fix=fix)
        return runner.fix(job, cancel) if fix is not None else runner.lint([job], cancel)[0]
    except BaseException:
        del runners[key]
        runner.close()
        raise
    finally:
        if ticket is not None:
            ticket.detach()
        # The driver freezes the collector's view of the process before forking workers (a
        # run's whole life); a server lives on, and its later garbage must stay collectable.
        gc.unfreeze()


_lane = threading.local()  # each lane's runners, by Python and torch target


def fix_document(name: str, path: Optional[str], text: str, ticket: Optional[Ticket] = None) -> Optional[str]:
    """`text` with every safe fix applied, as `amplint --fix` leaves it, fixed in this lane's
    worker (`lint_isolated`); None when there is nothing to fix, it cannot be fixed, or
    `ticket` was cancelled."""
    from amplint.lint.diagnostics import FileResult
    from amplint.lsp.settings import rules_for, safe_fixes_for

    if ticket is not None and ticket.cancelled.is_set():
        return None
    rules, target, torch_target = rules_for(path)
    if not rules:
        return None
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: not linted either
        return None
    fixed: "FileFix | FileResult" = lint_isolated(name, tuple(rule.code for rule in rules), data, target, torch_target, ticket, safe_fixes_for(path))
    if isinstance(fixed, FileResult):
        if fixed.error is not None and not (ticket is not None and ticket.cancelled.is_set()):
            logger.info("amplint: %s: not fixed: %s", name, fixed.error.message)
        return None
    if fixed.outcome.error is not None and fixed.outcome.count == 0:
        logger.info("amplint: %s: %s", name, fixed.outcome.error)
    if fixed.text_before != text:  # decoded otherwise (a coding line): its edits would not fit
        return None
    return fixed.text_after if fixed.outcome.count and fixed.text_after != text else None
