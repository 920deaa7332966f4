"""The run driver: which process lints which file, in what order, within what budget, and what
the cache already knows.

- **Isolation.** Files are linted in worker processes, never in the process that reports, even
  at `-j 1`: LibCST's native parser can crash the process it runs in (a segfault on deeply
  nested code), and one file's crash must never hide another file's findings. A worker that
  dies costs the one file it was linting: that file is retried alone in a fresh worker, and
  if it kills that one too it becomes the file's error ("crashed while parsing or
  analysing"). Workers are forked once per run (on Linux; started fresh elsewhere) and
  reused, so isolation costs a few milliseconds per run, not per file.
- **Limits.** What a file may cost is counted in steps (`amplint.work`), so the verdict is the
  same on any machine under any load; that limit is the engine's. Here each file also gets
  `budget` seconds of CPU, only as a safety net far above what the step limit allows (for
  native code that is never counted, such as a pathological LibCST parse). Python code that
  runs over is stopped by a profiling timer (SIGPROF); native code that never returns to
  Python is stopped by the kernel's CPU limit (SIGXCPU kills the worker a second later).
  Either way the file becomes an error ("analysis exceeded the N s CPU safety limit"), the
  worker moves on or is replaced, and the run never stalls. A worker that makes no progress
  at all (blocked, not computing) is killed after `_stall_seconds`.
- **Scheduling.** Work per file is very uneven: a file without AMP vocabulary costs a syntax
  check, one with it a LibCST parse and the analysis, ten times as much per byte, and a few
  large training scripts dominate. Files that will be parsed go to workers one at a time,
  the largest first; the cheap ones go in batches after them and fill the gaps (`plan`). A
  worker takes the next unit as soon as it is free, so the wall time approaches the total
  CPU divided by the workers. Results come back in the order the files were given.
- **Cache.** Before anything is scheduled, each file's result is looked up in the cache
  (`amplint.run.cache`) under a key naming its content, path, rules, settings and the summaries it
  is linted with; only misses are linted. Budget overruns, crashes and internal errors are
  never cached: they say something about the run, not the file. A file over the step limit
  is cached like any result: the limit is part of the key, and the verdict is the file's.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple, Union

from amplint.run.cache import Cache, content_digest, json_digest, result_key
from amplint.lint.diagnostics import FileError, FileResult, Finding, FixSuggestion, NotAnalysed, Related
from amplint.lint.noqa import UNUSED_NOQA, might_have_reportable_directives
from amplint.run.notebook import is_notebook
from amplint.run.progress import Progress
from amplint.run.source import decode_notebook, decode_python, read_file, size_error, source_encoding
from amplint.lint.syntax import PythonVersion

if TYPE_CHECKING:
    import multiprocessing.process

    from amplint.lint.fix_loop import FileFix

# multiprocessing is imported when a worker is started: a warm run, all of it cached, starts none.

# CPU seconds one file may take (parse and analysis): a safety net only, far above what the
# step limit of amplint.work allows, so that no machine or load reaches it first: the full
# limit took 6 to 9 s where it was calibrated and 36 s on a slower shared machine (a step
# there cost 7 to 13 us in every phase). --file-budget changes it, 0 lifts it.
DEFAULT_BUDGET = 120.0
# MiB of memory a worker may take beyond what it holds when it starts (its address space, the
# kernel's RLIMIT_AS): a safety net like the CPU one. The costliest real files measured take a
# worker under 250 MiB in all; a file past it is an error, the worker goes on. 0 lifts it.
DEFAULT_MEMORY = 2048
# Cheap files travel in batches of at most this many bytes or files.
_BATCH_BYTES = 128 * 1024
_BATCH_FILES = 64
# Estimated CPU per byte, relative: a file the pre-check lets through costs a LibCST parse
# and the analysis, about 12x a syntax check per byte (measured on timm, diffusers,
# pytorch/examples and accelerate).
_HEAVY_COST, _LIGHT_COST = 12.0, 1.0
# The kernel's CPU limit (whole seconds) stops native code within a second after this: the
# profiling timer gets the first chance, since stopping Python code keeps the worker.
_NATIVE_GRACE_SECONDS = 0.1
# How often an idle worker looks whether the process that started it is still there.
_PARENT_CHECK_SECONDS = 0.5


class FixRequest(NamedTuple):
    """Which fixes a fix job applies: `amplint.lint.fix_loop.wanted_by`'s arguments (a worker
    gets them pickled, which the function they make could not be)."""

    unsafe: bool = False
    fixable: Tuple[str, ...] = ("ALL",)
    unfixable: Tuple[str, ...] = ()


class Job(NamedTuple):
    path: str
    codes: Tuple[str, ...]
    # The second phase of a run: the summaries of the linted modules the file imports.
    imported: Optional[Mapping[str, Any]] = None
    # Contents given directly (standard input) instead of read from `path`; never cached.
    data: Optional[bytes] = None
    # Analysed even where the code alone gives no rule what it needs (`engine.lint_bytes`).
    whole: bool = False
    # Export the module's summary (the second phase reads it); False: not needed, never cached.
    summary: bool = True
    # Fix the contents (`data`) instead, with these fixes (`Runner.fix`): the `--fix` loop in a
    # worker, under the same budget, isolation and cancelling as a lint.
    fix: Optional[FixRequest] = None
    # Work out its functions' float16 hazards for the ambient pass now (`engine.lint_bytes`).
    hazards: bool = False


class _Task(NamedTuple):
    index: int
    path: str
    data: bytes
    codes: Tuple[str, ...]
    imported: Optional[Mapping[str, Any]]
    target: Optional[PythonVersion]
    whole: bool = False
    analysis_limit: float = 1.0
    torch_target: Optional[Tuple[int, int]] = None
    summary: bool = True
    every_syntax: bool = False  # the syntax verdict of files the engine does not analyse too
    fix: Optional[FixRequest] = None
    hazards: bool = False
    # The pre-check's verdict on `data` (`_will_parse`), made once in the parent, which needs
    # it to plan: the worker does not search the text for the rules' words again.
    parse: Optional[bool] = None


class Runner:
    """Lints jobs in isolated worker processes; reusable across the phases of one run.

        with Runner(workers=4, cache=Cache(directory)) as runner:
            results = runner.lint(jobs)
    """

    def __init__(
        self,
        workers: int = 1,
        budget: float = DEFAULT_BUDGET,
        cache: Optional[Cache] = None,
        settings: Optional[Mapping[str, Any]] = None,
        isolate: bool = True,
        target: Optional[PythonVersion] = None,
        progress: Optional[Progress] = None,
        analysis_limit: float = 1.0,
        torch_target: Optional[Tuple[int, int]] = None,
        memory: int = DEFAULT_MEMORY,
        every_syntax: bool = False,
        keep_statements: bool = False,
    ) -> None:
        self.workers = max(1, workers)
        self.budget = budget
        self.memory = memory  # MiB a worker may grow by (DEFAULT_MEMORY); 0: no limit
        self.cache = cache
        # The Python the code runs on decides what is a syntax error, the factor on the work
        # limits what is analysed, and the torch the project supports which fixes are safe:
        # part of every key.
        self.target = target
        self.analysis_limit = analysis_limit
        self.torch_target = torch_target
        # Syntax errors of the files the engine analyses only (the default), or of every file.
        self.every_syntax = every_syntax
        # The workers keep the statements they parse for the next lints of the same files: the
        # editor's, which lint a file after each edit (`amplint.lint.reparse`).
        self.keep_statements = keep_statements
        self.settings = dict(
            settings or {},
            target=str(target) if target is not None else None,
            analysis_limit=analysis_limit,
            torch_target=list(torch_target) if torch_target is not None else None,
            # A project pinned below the release whose old AMP names warn reports none (AMP014).
            torch_newest=list(torch_newest) if (torch_newest := getattr(torch_target, "newest", None)) is not None else None,
            # A parser that runs out of memory may report what it could not finish as the
            # file's verdict ("nested too deeply"): a result is only as good as its limit.
            file_memory=memory,
            every_syntax=every_syntax,
        )
        self.progress = progress  # advanced once per file whose result is in
        # Tests and benchmarks only: lint in this process, unprotected.
        self.isolate = isolate
        self._pool: List[_Worker] = []
        self.cpu_by_path: Dict[str, float] = {}  # worker CPU per linted file, for the benchmark
        self.linted = 0  # files linted this run (cache misses)
        # The cache key of each result this runner returned that the cache holds, by the
        # result's identity (the result kept with it, so that its id is not reused).
        self._keyed: Dict[int, Tuple[FileResult, str]] = {}
        # id(result) -> the job it is the result of, kept through a project's run only (`lint_project`)
        self._made_by: Optional[Dict[int, Tuple[FileResult, Job]]] = None
        # (path, codes) -> (hash of the bytes, whether the pre-check let them through), from a
        # project's ordering (`_analysable_texts`): its task takes the verdict for the same bytes.
        self._searched: Dict[Tuple[str, Tuple[str, ...]], Tuple[int, bool]] = {}

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._pool:
            worker.stop()
        self._pool = []
        if self.cache is not None:
            self.cache.save()

    # ------------------------------------------------------------------ a whole run

    def lint_project(self, jobs: Sequence[Job], facts: bool = True) -> List[FileResult]:
        """The jobs' results: each file the pre-check lets through linted after the linted
        modules it imports, with their summaries (`amplint.project.order`), then again only
        where a summary it uses changed since (an import cycle, a module analysed late:
        `amplint.project.link`).

        With a cache, each file's final result key (with what the project's ambient autocast
        added to it) is remembered (`Cache.run`) under a key of every file's path and
        content: a run over the same files takes every result from the cache without reading
        a file or working out again which files import which (a warm run's largest cost).
        `facts`: the results come with their summaries, imports and ambient facts (`--fix`
        follows another module's functions as the lint did); a run that only reports them
        asks without, and a warm one then reads no facts from the cache."""
        bases = [self._base_key(job) for job in jobs]
        run = json_digest([[job.path, key] for job, (key, _) in zip(jobs, bases)]) if self.cache is not None and all(key for key, _ in bases) else None
        if run is not None:
            remembered = self._remembered(run, jobs, bases, facts)
            if remembered is not None:
                return remembered
        from amplint.project.link import link, read_text
        from amplint.project.order import lint_in_order

        texts = self._analysable_texts(jobs, bases)

        def read(path: str) -> Optional[str]:
            text = texts.get(path)
            return text if text is not None else read_text(path)

        def lint_wave(items: Sequence[Tuple[int, Optional[Dict[str, dict]], bool]]) -> List[FileResult]:
            return self.lint([Job(jobs[place].path, jobs[place].codes, used, whole=whole) for place, used, whole in items])

        self._made_by = {}
        results, linked = lint_in_order([job.path for job in jobs], texts, lint_wave, read)
        self.progress = None  # what is linted again is not counted twice
        codes = {job.path: job.codes for job in jobs}
        results = link(results, lambda relinted: self.lint([Job(path, codes[path], summaries, whole=True) for path, summaries in relinted]), read, linked)
        results = self._ambient_completed(results, read, codes)
        self._made_by = None  # kept for the ambient rounds only
        reported = _with_ambient(results, codes)
        if run is not None and self.cache is not None:
            final = [self._key_of(result) for result in results]
            if all(final):
                self.cache.put_run(run, [(place, self._remember_ambient(run, key, result, reported[place])) for place, (key, result) in enumerate(zip(final, results)) if key is not None])
        return reported

    def _remember_ambient(self, run: str, key: str, result: FileResult, reported: FileResult) -> str:
        """The key of the file's final result: its own, or, where the run's ambient autocast
        added findings to it, that of the result with them (cached under a key of the run's, so
        that a warm run neither reads the project's facts again nor works out their ways)."""
        if reported is result:
            return key
        assert self.cache is not None
        key = json_digest(["ambient", run, key])
        self.cache.put(reported.path, key, _to_payload(reported))
        return key

    def _ambient_completed(self, results: List[FileResult], read: Any, codes: Mapping[str, Tuple[str, ...]]) -> List[FileResult]:
        """`results`, with the files the regions' calls lead into analysed whole, round after
        round along the ways (`amplint.project.ambient.to_analyse`): the model code a training
        script runs under its autocast, which never says `autocast` itself; and those analysed
        already whose float16 hazards are still to come analysed again as they were (with the
        same summaries), with them."""
        from amplint.project.ambient import MAX_ROUNDS, to_analyse
        from amplint.project.import_paths import PathIndex
        from amplint.project.reexports import ReExports

        if not any(result.ambient and result.ambient.get("regions") for result in results):
            return results
        index = PathIndex([r.path for r in results])
        reexports = ReExports.found([r.path for r in results if r.error is None], read, index)
        results = list(results)
        tried: Set[str] = set()
        for _ in range(MAX_ROUNDS):
            wanted = to_analyse(results, read, index, reexports, tried)
            if not wanted:
                break
            tried.update(results[place].path for place in wanted)
            analysed = {place for place in wanted if results[place].ambient is not None}
            for place, result in zip(wanted, self.lint([self._with_hazards(results[place], codes) for place in wanted])):
                # A model file the pre-check passed by that cannot be analysed stays passed by;
                # one analysed already whose hazards fail (over the work limit) says so, as it
                # would have when they were worked out with the rest.
                if result.error is None or place in analysed:
                    results[place] = result
        return results

    def _with_hazards(self, result: FileResult, codes: Mapping[str, Tuple[str, ...]]) -> Job:
        """The job that analyses `result`'s file with its float16 hazards: the one `result` is
        of, again, where its facts say they are to come; else the file whole."""
        made = self._made_by.get(id(result)) if self._made_by is not None else None
        if made is not None and made[0] is result and result.ambient and result.ambient.get("later"):
            return made[1]._replace(hazards=True)
        return Job(result.path, codes.get(result.path, ()), whole=True, hazards=True)

    def _base_key(self, job: Job) -> Tuple[Optional[str], Optional[bytes]]:
        """The key of the file's result linted alone (`result_key` without summaries), and
        its bytes where they had to be read for it (a stat the cache does not trust). (None,
        None) without a cache, or for a file that cannot be read (linting says why)."""
        if self.cache is None or job.data is not None or not job.summary:
            return None, None
        read_at = time.time_ns()  # before the stat: see Cache.trusted_digest
        try:
            st = os.stat(job.path)
        except OSError:
            return None, None
        if size_error(job.path, st.st_size):
            return None, None
        digest = self.cache.trusted_digest(job.path, st)
        data: Optional[bytes] = None
        if digest is None:
            read = _read(job.path)
            if isinstance(read, FileResult):
                return None, None
            data, digest = read, content_digest(read)
            self.cache.note_content(job.path, st, digest, read_at)
        return result_key(digest, job.path, job.codes, self.settings), data

    def _analysable_texts(self, jobs: Sequence[Job], bases: Sequence[Tuple[Optional[str], Optional[bytes]]]) -> Dict[str, str]:
        """The text (as `project.link.read_text` reads it) of each file the pre-check lets
        through to the engine (`_will_parse`): the files a run orders by their imports."""
        from amplint.lint.catalogue import RULES, might_use_amp

        texts: Dict[str, str] = {}
        self._searched = {}
        for job, (_, data) in zip(jobs, bases):
            rules = [rule for rule in RULES if rule.code in job.codes and rule.code != UNUSED_NOQA]
            if not rules or is_notebook(job.path):
                continue
            if data is None:
                read = job.data if job.data is not None else _read(job.path)
                if isinstance(read, FileResult):
                    continue
                data = read
            text = data.decode("latin-1")
            found = might_use_amp(text, rules)
            self._searched[job.path, job.codes] = (hash(data), found)
            if found:
                texts[job.path] = text
        return texts

    def _remembered(self, run: str, jobs: Sequence[Job], bases: Sequence[Tuple[Optional[str], Optional[bytes]]], facts: bool = True) -> Optional[List[FileResult]]:
        """The results the run `run` ended with, from the cache; None when it does not have them all."""
        assert self.cache is not None
        final = self.cache.run(run)
        if final is None or len(final) != len(jobs):
            return None
        results: List[FileResult] = []
        for place, ((row, key), job, (_, data)) in enumerate(zip(final, jobs, bases)):
            if row != place:
                return None
            result = self._cached(job.path, key, content_digest(data) if data is not None else self._digest_of(job.path), data, facts)
            if result is None:
                return None  # pushed out of the cache since: the run lints again
            results.append(result)
            self._advance()
        return results

    def _digest_of(self, path: str) -> Optional[str]:
        assert self.cache is not None
        try:
            return self.cache.trusted_digest(path, os.stat(path))
        except OSError:
            return None

    def _key_of(self, result: FileResult) -> Optional[str]:
        kept = self._keyed.get(id(result))
        return kept[1] if kept is not None and kept[0] is result else None

    def _keep(self, result: FileResult, key: str) -> FileResult:
        self._keyed[id(result)] = (result, key)
        return result

    def _cached(self, path: str, key: str, digest: Optional[str], data: Optional[bytes] = None, facts: bool = True) -> Optional[FileResult]:
        """The result the cache holds under `key`, with the text its code frames show (read
        now, for the few files with findings, and only if it is still the text of `digest`).
        `facts`: with what only the linting of other files reads (its summary, imports,
        ambient facts); a run's remembered results, which are only reported, go without."""
        assert self.cache is not None
        payload = self.cache.get(path, key, facts)
        if payload is None:
            return None
        result = _from_payload(path, payload)
        if result.findings:
            data = data if data is not None else _read(path)
            if isinstance(data, FileResult) or digest is None or content_digest(data) != digest or not _attach_source(result, data):
                return None
        return self._keep(result, key)

    def fix(self, job: Job, cancel: Optional[Any] = None) -> Union["FileFix", FileResult]:
        """A fix job's outcome (`Job.fix`, with its `data`): the `FileFix`, or the `FileResult`
        saying why there is none (over the budget, crashed, cancelled through `cancel`)."""
        assert job.fix is not None and job.data is not None
        return self.lint([job], cancel)[0]

    # ------------------------------------------------------------------ one phase

    def lint(self, jobs: Sequence[Job], cancel: Optional[Any] = None) -> List[FileResult]:
        """The jobs' results, in order. `cancel` (a `threading.Event`): once it is set (and
        `interrupt` called), what is not linted yet is left as "not linted", never cached."""
        results: List[Optional[FileResult]] = [None] * len(jobs)
        tasks: List[_Task] = []
        keys: Dict[int, Tuple[str, str]] = {}  # task index -> (path, cache key)
        for index, job in enumerate(jobs):
            outcome = self._prepare(index, job, keys)
            if isinstance(outcome, FileResult):
                results[index] = outcome
                self._advance()
            else:
                tasks.append(outcome)
        if tasks:
            self.linted += len(tasks)
            cacheable = self._execute(tasks, results, cancel)
            if self.cache is not None:
                for task in tasks:
                    result = results[task.index]
                    if task.index in keys and task.index in cacheable and result is not None:
                        path, key = keys[task.index]
                        self.cache.put(path, key, _to_payload(result))
                        self._keep(result, key)
        done = [r if r is not None else FileResult(j.path, error=FileError(j.path, "not linted")) for r, j in zip(results, jobs)]
        if self._made_by is not None:
            self._made_by.update((id(result), (result, job)) for result, job in zip(done, jobs))
        return done

    def _advance(self) -> None:
        if self.progress is not None:
            self.progress.advance()

    def _prepare(self, index: int, job: Job, keys: Dict[int, Tuple[str, str]]) -> Any:
        """The file's result when the cache has it or the file cannot be read; else a task."""
        if job.data is not None:
            return self._task(index, job, job.data)
        if not job.summary:  # a result without its summary is not what the cache holds
            data = _read(job.path)
            return data if isinstance(data, FileResult) else self._task(index, job, data)
        read_at = time.time_ns()  # before the stat: see Cache.trusted_digest
        try:
            st = os.stat(job.path)
        except OSError as error:
            return _unreadable(job.path, error)
        too_large = size_error(job.path, st.st_size)
        if too_large:
            return FileResult(job.path, error=too_large)
        cache = self.cache
        data: Optional[bytes] = None
        digest = cache.trusted_digest(job.path, st) if cache is not None else None
        if digest is None or cache is None:
            data = _read(job.path)
            if isinstance(data, FileResult):
                return data
            if cache is None:
                return self._task(index, job, data)
            digest = content_digest(data)
            cache.note_content(job.path, st, digest, read_at)
        cached = self._cached(job.path, result_key(digest, job.path, job.codes, self.settings, job.imported, job.whole, job.hazards), digest, data)
        if cached is not None:
            return cached
        if data is None:  # the stat was trusted, but the file changed since: lint what is there now
            data = _read(job.path)
            if isinstance(data, FileResult):
                return data
        digest = content_digest(data)
        keys[index] = (job.path, result_key(digest, job.path, job.codes, self.settings, job.imported, job.whole, job.hazards))
        return self._task(index, job, data)

    def _task(self, index: int, job: Job, data: bytes) -> _Task:
        task = _Task(index, job.path, data, job.codes, job.imported, self.target, job.whole, self.analysis_limit, self.torch_target, job.summary, self.every_syntax, job.fix, job.hazards)
        searched = self._searched.get((job.path, job.codes))
        found = searched[1] if searched is not None and searched[0] == hash(data) else None
        return task._replace(parse=_will_parse(task, found))

    # ------------------------------------------------------------------ execution

    def interrupt(self) -> None:
        """Stop the files being linted now, from another thread, after setting the `cancel`
        that `lint` was given: their workers are killed (native code too) and not retried."""
        for worker in list(self._pool):
            if worker.unit is not None:
                worker.process.kill()

    def _execute(self, tasks: List[_Task], results: List[Optional[FileResult]], cancel: Optional[Any] = None) -> Set[int]:
        """Lint `tasks` into `results`; the indices whose results may be cached."""
        by_index = {task.index: task for task in tasks}
        units = [[tasks[i].index for i in unit] for unit in plan([_estimate(t) for t in tasks])]
        cacheable: Set[int] = set()
        if not self.isolate:
            for task in tasks:
                result, ok, cpu = _lint_task(task, self.budget, in_process=True)
                results[task.index] = result
                self.cpu_by_path[task.path] = cpu
                self._advance()
                if ok:
                    cacheable.add(task.index)
            return cacheable
        if any(_needs_engine(task) for task in tasks):
            _preload_engine()
        queue: Deque[List[int]] = deque(units)
        retried: Set[int] = set()
        wanted = min(self.workers, len(units))
        while queue or any(w.unit for w in self._pool):
            if cancel is not None and cancel.is_set():
                for worker in self._pool:
                    if worker.unit is not None:
                        worker.kill()
                self._pool = [w for w in self._pool if w.unit is None and w.alive()]
                break
            # A worker that died between units (killed from outside) is replaced, not handed work.
            self._pool = [w for w in self._pool if w.unit is not None or w.alive()]
            for worker in self._pool:
                if worker.unit is None and queue:
                    worker.assign(queue.popleft(), by_index)
            while queue and len(self._pool) < wanted:
                worker = _Worker.start(self.budget, self.memory, self.keep_statements)
                if worker is None:  # cannot fork: lint here rather than not at all
                    if not self._pool:
                        for index in queue.popleft():
                            result, ok, cpu = _lint_task(by_index[index], self.budget, in_process=True)
                            results[index] = result
                            self._advance()
                            if ok:
                                cacheable.add(index)
                    break
                self._pool.append(worker)
                worker.assign(queue.popleft(), by_index)
            busy = [w for w in self._pool if w.unit is not None]
            if not busy or (cancel is not None and cancel.is_set()):
                # Cancelled while units were handed out: `interrupt` found no unit to stop, so
                # the loop's top does (a wait would last a whole file).
                continue
            from multiprocessing.connection import wait

            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=1.0)
            for worker in busy:
                if worker.conn in ready or worker.process.sentinel in ready:
                    self._collect(worker, results, cacheable, by_index)
                if worker.unit is not None and not worker.alive():
                    self._collect(worker, results, cacheable, by_index)  # what it sent before dying
                    self._bury(worker, results, queue, retried, by_index)
                elif worker.unit is not None and worker.stalled(self._stall_seconds()):
                    worker.kill()
                    self._collect(worker, results, cacheable, by_index)
                    self._bury(worker, results, queue, retried, by_index, stalled=True)
        return cacheable

    def _collect(self, worker: "_Worker", results, cacheable: Set[int], by_index: Dict[int, _Task]) -> None:
        while worker.unit is not None:
            try:
                if not worker.conn.poll():
                    return
                index, result, ok, cpu = worker.conn.recv()
            except (EOFError, OSError):
                return  # it died: the caller buries it
            except Exception:  # a garbled message (killed mid-write): the file is retried
                worker.kill()
                return
            results[index] = result
            self.cpu_by_path[by_index[index].path] = cpu
            self._advance()
            if ok:
                cacheable.add(index)
            worker.done_one()

    def _bury(self, worker: "_Worker", results, queue: Deque[List[int]], retried: Set[int], by_index, stalled: bool = False) -> None:
        """A worker died with a unit unfinished: its current file is the culprit."""
        self._pool.remove(worker)
        worker.process.join(timeout=5)
        remaining = worker.unit[worker.done :] if worker.unit else []
        worker.unit = None
        if not remaining:
            return
        culprit, rest = remaining[0], remaining[1:]
        if rest:
            queue.appendleft(rest)
        path = by_index[culprit].path
        code = worker.process.exitcode
        if stalled or code == -getattr(signal, "SIGXCPU", -1000) or culprit in retried:
            self._advance()
        if stalled:
            results[culprit] = FileResult(path, error=FileError(path, f"stalled: no progress in {self._stall_seconds():.0f} s; not linted"))
        elif code == -getattr(signal, "SIGXCPU", -1000):
            results[culprit] = FileResult(path, error=_budget_error(path, self.budget))
        elif culprit not in retried:
            # Alone in a fresh worker: a crash caused by something else (memory pressure, a
            # signal from outside) is not pinned on this file.
            retried.add(culprit)
            queue.appendleft([culprit])
        else:
            reason = _exit_reason(code)
            if code == -getattr(signal, "SIGABRT", -1000) and self.memory:
                # What LibCST's native parser does when an allocation fails: it cannot raise.
                reason += f", as the native parser does past the {self.memory} MiB memory safety limit: raise it with --file-memory"
            results[culprit] = FileResult(path, error=FileError(path, f"crashed while parsing or analysing ({reason}); not linted"))

    def _stall_seconds(self) -> float:
        # Wall time with no result from a busy worker: generous, since a loaded machine
        # stretches wall time far beyond CPU time; the CPU budget is the real limit.
        return max(120.0, 10 * self.budget) if self.budget else float("inf")


def _with_ambient(results: List[FileResult], codes: Mapping[str, Tuple[str, ...]]) -> List[FileResult]:
    """`results` with what the project's ambient autocast adds to them: the hazards model code
    hits under regions other files open (`amplint.project.ambient`), of the codes selected for
    the file they are in. Worked out again every run that lints a file, from what each result
    says of its file (kept in the cache): the regions and the model code may be in different
    files, and either may change; a run over the same files as one before takes the results
    with them from the cache (`Runner._remember_ambient`)."""
    if not any(result.ambient for result in results):
        return results
    from amplint.project.ambient import report

    return report(results, codes=codes)


def _read(path: str) -> Union[bytes, FileResult]:
    """The file's bytes, read the careful way (a regular file only, never past the size
    limit: `amplint.run.source.read_file`), or its result saying why it cannot be."""
    data = read_file(path)
    return FileResult(path, error=data) if isinstance(data, FileError) else data


def _unreadable(path: str, error: OSError) -> FileResult:
    return FileResult(path, error=FileError(path, f"cannot read file: {error.strerror or error}"))


def _budget_error(path: str, budget: float) -> FileError:
    return FileError(path, f"analysis exceeded the {budget:g} s CPU safety limit; not linted (raise it with --file-budget)")


def _exit_reason(code: Optional[int]) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"worker exited with status {code}"


# --------------------------------------------------------------------------- scheduling


def _estimate(task: _Task) -> Tuple[int, bool]:
    return len(task.data), _will_parse(task)


def _will_parse(task: _Task, found: Optional[bool] = None) -> bool:
    """Whether the pre-check will let the file through to a LibCST parse. Latin-1 maps bytes
    to characters one to one, so the ASCII words the pre-check looks for are found as they are
    in any encoding Python source may use, and in a notebook's JSON. `found`: what the text
    search (`might_use_amp`) already said of these bytes, if it was made."""
    from amplint.lint.catalogue import RULES, might_use_amp

    if task.parse is not None:
        return task.parse
    # The unused-noqa check reads comments: it alone never has a file parsed.
    rules = [rule for rule in RULES if rule.code in task.codes and rule.code != UNUSED_NOQA]
    # Linted whole, a file is analysed whatever its words (a helper module another imports).
    if not rules or task.whole:
        return bool(rules)
    return found if found is not None else might_use_amp(task.data.decode("latin-1"), rules)


def _needs_engine(task: _Task) -> bool:
    """Whether linting the file needs the engine (LibCST, the rules): a notebook, a file the
    pre-check lets through, or one with a `# noqa` the unused-noqa check may judge. Any
    other Python file is only its syntax verdict (`_syntax_only`)."""
    if task.fix is not None or is_notebook(task.path) or _will_parse(task):
        return True
    return UNUSED_NOQA in task.codes and might_have_reportable_directives(task.data.decode("latin-1"))


def _syntax_only(task: _Task) -> FileResult:
    """What `engine.lint_bytes` makes of a Python file in which no selected rule can find
    anything and with no `# noqa` to judge: its syntax verdict, without importing LibCST."""
    from amplint.lint.catalogue import import_words
    from amplint.lint.syntax import quiet_collector, recursion_room, syntax_error

    source = decode_python(task.data, task.path)
    if isinstance(source, FileError):
        return FileResult(task.path, error=source)
    if _engine_once_decoded(task, source):
        # Its encoding hid a word from the byte search (`# coding: unicode_escape`): the engine
        # (loaded before the file's CPU timer started: `_hidden_words`).
        from amplint.lint.engine import lint_source
        from amplint.rules import ALL_RULES
        from amplint.semantic import ExternalModules

        external = ExternalModules(task.path, task.imported) if task.imported else None
        return lint_source(source, task.path, [r for r in ALL_RULES if r.code in task.codes], external=external, target=task.target, whole=task.whole, analysis_limit=task.analysis_limit, torch_target=task.torch_target, summary=task.summary, every_syntax=task.every_syntax, hazards=task.hazards)
    if not task.every_syntax:
        return FileResult(task.path, skipped=True, import_words=import_words(source))
    with recursion_room(), quiet_collector():
        return FileResult(task.path, skipped=True, error=syntax_error(source, task.path, task.target), import_words=import_words(source))


def _hidden_words(task: _Task) -> bool:
    """Whether the file's encoding hides from the byte search a word that calls for the engine
    (`_syntax_only` then hands the file to it). Only a source in another encoding than UTF-8
    can (read from its first two lines: the text is decoded only then)."""
    try:
        if source_encoding(task.data) in ("utf-8", "utf-8-sig"):
            return False
    except (SyntaxError, LookupError):
        return False  # it cannot be decoded: its error is `_syntax_only`'s
    source = decode_python(task.data, task.path)
    return not isinstance(source, FileError) and _engine_once_decoded(task, source)


def _engine_once_decoded(task: _Task, source: str) -> bool:
    """Whether `source`, the file decoded, has a word of a selected rule its bytes did not
    show (`_words_as_searched`), or a `# noqa` the unused-noqa check may judge."""
    from amplint.lint.catalogue import RULES, rules_matching_words

    rules = [rule for rule in RULES if rule.code in task.codes and rule.code != UNUSED_NOQA]
    return bool(not _words_as_searched(task.data, source) and rules_matching_words(source, rules)) or (UNUSED_NOQA in task.codes and might_have_reportable_directives(source))


def _words_as_searched(data: bytes, source: str) -> bool:
    """Whether `source`, decoded from `data`, has exactly the ASCII words the pre-check found
    in `data` read as Latin-1 (the rules' words are ASCII): the same text, or UTF-8, which
    writes an ASCII character as its byte and every other as bytes above 127. Another
    encoding may hide a word (`# coding: unicode_escape`) or show one the bytes do not have."""
    if data.isascii():
        return source == data.decode("ascii")
    return source_encoding(data) in ("utf-8", "utf-8-sig")


def plan(files: Sequence[Tuple[int, bool]]) -> List[List[int]]:
    """Units of work in dispatch order, for files given as (size in bytes, will be parsed).

    Files that will be parsed are units of one, so a crash or an overrun costs one file and
    no worker waits behind a large file stuck in a batch; the cheap ones form batches. All
    units go largest estimate first (longest-processing-time-first scheduling), so the
    small ones are left to fill the gaps at the end."""
    heavy = [i for i, (_, parse) in enumerate(files) if parse]
    light = sorted((i for i, (_, parse) in enumerate(files) if not parse), key=lambda i: -files[i][0])
    units: List[List[int]] = [[i] for i in heavy]
    batch: List[int] = []
    size = 0
    for index in light:
        if batch and (size + files[index][0] > _BATCH_BYTES or len(batch) >= _BATCH_FILES):
            units.append(batch)
            batch, size = [], 0
        batch.append(index)
        size += files[index][0]
    if batch:
        units.append(batch)

    def estimate(unit: List[int]) -> float:
        return sum(files[i][0] * (_HEAVY_COST if files[i][1] else _LIGHT_COST) for i in unit)

    return sorted(units, key=estimate, reverse=True)


def simulate(units: Sequence[Sequence[int]], cost: Sequence[float], workers: int) -> float:
    """The wall time of dispatching `units` in order to `workers` that each take the next
    unit when free, given each file's measured `cost`: what `Runner` does, without its
    processes (the scheduler's replay test and the benchmark use it)."""
    import heapq

    free = [0.0] * max(1, workers)
    for unit in units:
        start = heapq.heappop(free)
        heapq.heappush(free, start + sum(cost[i] for i in unit))
    return max(free)


# --------------------------------------------------------------------------- workers


class _Worker:
    def __init__(self, process: multiprocessing.process.BaseProcess, conn: Any) -> None:
        self.process = process
        self.conn = conn
        self.unit: Optional[List[int]] = None
        self.done = 0
        self.last_progress = time.monotonic()

    @classmethod
    def start(cls, budget: float, memory: int = DEFAULT_MEMORY, keep_statements: bool = False) -> Optional["_Worker"]:
        context = _context()
        ours, theirs = context.Pipe()
        process = context.Process(target=_worker_main, args=(theirs, budget, memory, keep_statements), daemon=True, name="amplint-worker")
        try:
            process.start()
        except OSError:
            return None
        theirs.close()
        return cls(process, ours)

    def assign(self, unit: List[int], by_index: Dict[int, _Task]) -> None:
        self.unit, self.done = unit, 0
        self.last_progress = time.monotonic()
        try:
            self.conn.send([by_index[i] for i in unit])
        except (OSError, EOFError):
            pass  # it died; the next wait() sees its sentinel

    def done_one(self) -> None:
        self.done += 1
        self.last_progress = time.monotonic()
        if self.unit is not None and self.done >= len(self.unit):
            self.unit = None

    def alive(self) -> bool:
        return self.process.is_alive()

    def stalled(self, limit: float) -> bool:
        return time.monotonic() - self.last_progress > limit

    def kill(self) -> None:
        self.process.kill()
        self.process.join(timeout=5)

    def stop(self) -> None:
        # Nothing is left to say to it, and nothing of its own to clean up: killing it costs
        # the run nothing, where a polite exit costs the wait for an interpreter's shutdown.
        # It is reaped later (multiprocessing joins its children at exit), not waited for here.
        self.conn.close()
        self.process.kill()


def _context() -> Any:
    import multiprocessing

    # fork is cheap and the child inherits the imported engine; elsewhere the platform's
    # default start method (spawn on macOS and Windows) imports it in each worker a file
    # needs it in (`load_engine`).
    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _preload_engine() -> None:
    """Load the linter and LibCST's native parser before forking, so workers start with them
    loaded; and keep the collector off what is already loaded, so a worker does not copy
    every page it walks."""
    import gc

    load_engine()
    gc.freeze()


def _worker_main(conn: Any, budget: float, memory: int = DEFAULT_MEMORY, keep_statements: bool = False) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    import faulthandler

    faulthandler.disable()  # a crash is reported as the file's error, not as a traceback
    try:
        import resource

        # A crash must not leave a core file in the user's project.
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    except (ImportError, ValueError, OSError):
        pass
    # The engine, with LibCST's native parser, is loaded outside the cap (loading it past the
    # cap would fail as a parse error): by the parent before it forked, for this run's files
    # (`_preload_engine`), else when a file first needs it (`load_engine`). A run on files
    # without AMP code (most pre-commit runs) never loads it.
    global _cap
    _cap = _Cap(memory, _soft_memory_limit())
    _limit_memory(memory)
    if keep_statements:
        from amplint.lint import reparse

        reparse.keep_statements()
    parent = os.getppid()
    while True:
        try:
            # A parent killed outright (SIGKILL: an editor's hard restart of the language
            # server) sends no EOF: this worker and the workers forked after it hold the
            # parent's end of the pipe too. Its death shows as a new parent.
            while not conn.poll(_PARENT_CHECK_SECONDS):
                if os.getppid() != parent:
                    return
            unit = conn.recv()
        except (EOFError, OSError):
            return
        if unit is None:
            return
        for task in unit:
            result, ok, cpu = _lint_task(task, budget, memory=memory)
            conn.send((task.index, result, ok, cpu))


class _Cap(NamedTuple):
    """A worker's memory cap: `memory` MiB above what it holds (0: none), under the soft
    limit it started with (the user's `ulimit -v`; None: unknown)."""

    memory: int
    soft: Optional[int]


_cap: Optional[_Cap] = None  # this worker's; None in any other process


def _soft_memory_limit() -> Optional[int]:
    try:
        import resource

        return resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return None


def load_engine() -> None:
    """Load the linter and LibCST's native parser (which LibCST loads at its first parse), if
    not loaded yet: in a process that forks workers, before it does (`_preload_engine`, the
    language server's `load_engine`); in a capped worker, outside the cap, which is then set
    again above what the worker holds now, as for a worker that started with them loaded.
    What fails to load is imported again where it is needed (LibCST's parser, under the cap,
    at the file's first parse)."""
    if "libcst.native" in sys.modules and "amplint.rules" in sys.modules and "amplint.lint.engine" in sys.modules:
        return
    capped = _cap is not None and _cap.memory > 0 and _cap.soft is not None
    if capped:
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (_cap.soft, resource.getrlimit(resource.RLIMIT_AS)[1]))
        except (ImportError, OSError, ValueError):
            pass
    try:
        import amplint.lint.engine  # noqa: F401
        import amplint.rules  # noqa: F401
        from libcst import native  # noqa: F401
    except Exception:  # noqa: B902 (ImportError, MemoryError: tried again where it is needed)
        pass
    finally:
        if capped:
            _limit_memory(_cap.memory)


class BudgetExceeded(BaseException):
    """Raised by the CPU timer inside whatever the file's analysis was doing. A BaseException,
    so that no `except Exception` in the analysis swallows it."""


_armed = False


_fired = False  # the timer went off during the current task


def _on_cpu_timer(signum: int, frame: Any) -> None:
    global _fired
    if _armed:
        _fired = True
        raise BudgetExceeded()


def _lint_task(task: _Task, budget: float, in_process: bool = False, memory: int = 0) -> Tuple[FileResult, bool, float]:
    """(result, cacheable, CPU seconds): whatever goes wrong becomes this file's error."""
    global _armed, _fired
    started = time.process_time()
    _fired = False
    try:
        engine = _needs_engine(task)
        if engine or _hidden_words(task):  # loaded before the CPU timer starts: its cost is not the file's
            load_engine()
        if engine:
            from amplint.lint.engine import lint_bytes
            from amplint.rules import ALL_RULES
            from amplint.semantic import ExternalModules

            by_code = {rule.code: rule for rule in ALL_RULES}
            external = ExternalModules(task.path, task.imported) if task.imported else None
            rules = [by_code[code] for code in task.codes]
            if task.fix is not None:
                import amplint.lint.fix_loop  # noqa: F401
        timer = budget > 0 and hasattr(signal, "setitimer") and not in_process
        if timer:
            _arm_native_limit(budget)
            signal.signal(signal.SIGPROF, _on_cpu_timer)
            _armed = True
            signal.setitimer(signal.ITIMER_PROF, budget)
        try:
            if task.fix is not None:
                result = _fix(task, rules, external)
            elif engine:
                result = lint_bytes(task.data, task.path, rules, external, task.target, task.whole, task.analysis_limit, task.torch_target, task.summary, task.every_syntax, task.hazards)
            else:
                result = _syntax_only(task)
        finally:
            _armed = False
            if timer:
                signal.setitimer(signal.ITIMER_PROF, 0)
        if _fired:  # caught on the way by library code, which then failed or went on: still over budget
            raise BudgetExceeded()
        return result, True, time.process_time() - started
    except BudgetExceeded:
        return FileResult(task.path, error=_budget_error(task.path, budget)), False, time.process_time() - started
    except Exception as error:  # a bug in amplint must not end the run
        if _fired:  # LibCST turned the interruption into an error of its own
            return FileResult(task.path, error=_budget_error(task.path, budget)), False, time.process_time() - started
        if memory and _out_of_memory(error):  # past the worker's limit: what the file held is freed by now
            _forget_kept_statements()
            return FileResult(task.path, error=_memory_error(task.path, memory)), False, time.process_time() - started
        return FileResult(task.path, error=FileError(task.path, internal_error(error))), False, time.process_time() - started


def _fix(task: _Task, rules: Sequence[Any], external: Any) -> "FileFix":
    """A fix job: the `--fix` loop on the task's contents (`fix_loop.fix_file`). Functions are
    followed as far as a lint follows them, and there is no file step limit: a fix analyses the
    file again round after round, after its lint has passed that limit."""
    from amplint.lint.fix_loop import fix_file, wanted_by
    from amplint.work import metered

    assert task.fix is not None
    with metered(task.analysis_limit, limited=False):
        return fix_file(task.path, task.data, rules, wanted_by(*task.fix), external, task.target, task.torch_target)


def internal_error(error: BaseException) -> str:
    """A bug's message, short: an exception about a syntax tree can print the whole tree."""
    text = str(error)
    if len(text) > 200:
        text = text[:200].rstrip() + " ..."
    return f"internal error while linting: {type(error).__name__}: {text}"


def _forget_kept_statements() -> None:
    """An editor's worker drops the statements it keeps of the files before (`amplint.lint.
    reparse`) when a lint runs out of memory: the next lint starts with nothing of them."""
    reparse = sys.modules.get("amplint.lint.reparse")
    if reparse is not None:
        reparse.forget()


def _out_of_memory(error: BaseException) -> bool:
    """Whether `error` is a MemoryError, or an error library code made of one."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, MemoryError):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1  # type: ignore[assignment]
    return False


def _memory_error(path: str, memory: int) -> FileError:
    return FileError(path, f"analysis exceeded the {memory} MiB memory safety limit; not linted (raise it with --file-memory)")


def _limit_memory(memory: int) -> None:
    """Cap the worker's address space at what it holds now plus `memory` MiB (RLIMIT_AS): an
    allocation past it fails (MemoryError in Python, the file's error) instead of taking the
    machine's memory. Where the platform cannot say or set it, there is no cap."""
    if memory <= 0:
        return
    try:
        import resource

        with open("/proc/self/statm", "rb") as statm:
            held = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = held + memory * 2**20
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        if soft == resource.RLIM_INFINITY or limit < soft:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, ValueError, IndexError):
        pass


def _arm_native_limit(budget: float) -> None:
    """Native code (LibCST's parser) never returns to Python for the timer to interrupt: the
    kernel's CPU limit kills the worker shortly after the budget instead."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return
    soft = math.ceil(time.process_time() + budget + _NATIVE_GRACE_SECONDS)
    hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
    if hard != resource.RLIM_INFINITY and soft > hard:
        return
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ValueError, OSError):
        pass


# --------------------------------------------------------------------------- cache payloads


_FINDING_FIELDS = [f.name for f in dataclasses.fields(Finding) if f.name != "path"]


def _to_payload(result: FileResult) -> Dict[str, Any]:
    return {
        "findings": [[_field_payload(f, name) for name in _FINDING_FIELDS] for f in result.findings],
        "error": result.error.message if result.error is not None else None,
        "error_at": [result.error.row, result.error.column, result.error.cell, result.error.cell_row] if result.error is not None else None,
        "skipped": result.skipped,
        "deferred": result.deferred,
        "may_export": result.may_export,
        "summary": result.summary,
        "imports": [list(i) for i in result.imports],
        "import_words": list(result.import_words),
        "lookups": [list(i) for i in result.lookups] if result.lookups is not None else None,
        "skipped_functions": [[s.row, s.column, s.name, s.cell, s.cell_row, s.file_row] for s in result.skipped_functions],
        "ambient": result.ambient,
    }


def _field_payload(finding: Finding, name: str) -> Any:
    value = getattr(finding, name)
    if name == "fix" and value is not None:
        return [value.title, value.applicability, [list(edit) for edit in value.edits]]
    if name == "related":
        return [[r.path, r.row, r.column, r.message] for r in value]
    return value


def _field_value(name: str, value: Any) -> Any:
    if name == "fix" and value is not None:
        title, applicability, edits = value
        return FixSuggestion(title, applicability, tuple(tuple(edit) for edit in edits))
    if name == "related":
        return tuple(Related(*row) for row in value)
    return tuple(value) if isinstance(value, list) else value


def _from_payload(path: str, payload: Dict[str, Any]) -> FileResult:
    findings = [
        Finding(path=path, **{name: _field_value(name, v) for name, v in zip(_FINDING_FIELDS, values)})
        for values in payload["findings"]
    ]
    error = FileError(path, payload["error"], *(payload.get("error_at") or ())) if payload.get("error") is not None else None
    return FileResult(
        path,
        findings=findings,
        error=error,
        skipped=payload.get("skipped", False),
        deferred=payload.get("deferred", False),
        may_export=payload.get("may_export", False),
        summary=payload.get("summary"),
        imports=tuple(map(tuple, payload.get("imports") or ())),
        import_words=tuple(payload.get("import_words") or ()),
        lookups=tuple(tuple(i) for i in payload["lookups"]) if payload.get("lookups") is not None else None,
        skipped_functions=[NotAnalysed(path, *fields) for fields in payload.get("skipped_functions") or ()],
        ambient=payload.get("ambient"),
    )


def _attach_source(result: FileResult, data: bytes) -> bool:
    """The text code frames show, as linting would have kept it; False if it cannot be had."""
    from amplint.run.notebook import is_notebook, parse_notebook

    if is_notebook(result.path):
        text = decode_notebook(data, result.path)
        notebook = parse_notebook(text, result.path) if isinstance(text, str) else None
        if notebook is None or isinstance(notebook, FileError):
            return False
        result.source, result.cells = notebook.display, notebook.cells
        return True
    text = decode_python(data, result.path)
    if isinstance(text, FileError):
        return False
    result.source = text
    return True
