"""The lint cache: what linting a file produced, kept under a key that names everything the
result depends on, so that a re-run over unchanged files lints nothing.

Layout, after ruff's `.ruff_cache` (the design and its reasons: docs/cache.md):

    .amplint_cache/                  (--cache-dir, AMPLINT_CACHE_DIR; default: the project root)
        CACHEDIR.TAG, .gitignore     amplint's marker; backup tools and git leave it alone
        <version>-<16 hex>/          one directory per amplint build (see `engine_fingerprint`)
            lock                     serialises the writers
            files-<xx>.json          the records of the files whose path hashes to <xx>
            facts-<xx>.json          their results' summaries, imports and ambient facts
            runs.json                what the second phase made of the last runs' first

A record belongs to one path and holds:

- the file's content digest, with the `os.stat` it was read under: a later run whose stat
  matches trusts the digest without reading the file (as git and ruff do). A file modified
  within two seconds of being read is "racily clean" (git's term): its stat is not trusted,
  and the next run hashes it again;
- results: payloads under keys made by `result_key` from the content digest, the path,
  the rules selected for the file, the settings, and the digest of the other modules'
  summaries it was linted with (the second phase of a run). A key changes whenever anything
  the result depends on changes, so an entry is never stale, only unused; the few most
  recent are kept. The parts of a result that only the linting of other files reads (a
  module's summary, its imports, its ambient facts: most of the bytes) are in the facts
  shard beside, under the same keys: a warm run, which only reports, never reads them.

The cache owns only what it made. It writes into a directory only if it created it (and
marked it with its own CACHEDIR.TAG), never replaces a file it did not name, follows no
symbolic link it finds (every write goes through directory descriptors opened with
O_NOFOLLOW), and removes only old build directories of its own name, marker and files.
A directory the user names that is not amplint's gets an `.amplint_cache` of its own inside.

Nothing is believed that this user did not write: each shard carries an HMAC-SHA256
under a per-user secret kept outside the tree (`$XDG_CACHE_HOME/amplint/key`), so a cache
that comes with a repository, or was written by someone else, is a miss. What passes is
checked once more for shape (records, and result payloads as `amplint.run.driver` writes them):
a corrupt cache is a miss, whatever its shape, never an error.

Concurrent runs are safe: a shard is written to a temporary file and renamed into place
(readers see the old or the new file, never half of one), under an advisory lock where the
platform has one, and merged with what another run wrote meanwhile.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import importlib.util
import json
import os
import re
import secrets
import stat
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from amplint.lint.diagnostics import Finding

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

CACHE_DIR_NAME = ".amplint_cache"
ENV_CACHE_DIR = "AMPLINT_CACHE_DIR"
# The file holding this user's cache key (default: $XDG_CACHE_HOME/amplint/key).
ENV_KEY_FILE = "AMPLINT_CACHE_KEY_FILE"
_FORMAT = 3  # bump when the record layout changes
# The parts of a result that only the linting of other files reads (a module's summary, its
# imports, what its analysis looked up, the ambient pass's facts): most of a shard's bytes,
# kept in shards of their own (facts-XX.json) that a run reads only when it lints a file. A
# warm run, which reports what it finds in the cache, reads none of them.
_FACT_FIELDS = ("summary", "imports", "import_words", "lookups", "ambient")
_SHARDS = 256
# Results kept per file. One run may store several for a file (its own lint, a whole lint
# for its summary, one per round of the second phase: amplint.project.link.MAX_ROUNDS), and
# switching between a few selections (pre-commit's, CI's) should keep hitting: fewer, and
# each of a run's results would push out the one the next run asks for first.
_RESULTS_PER_FILE = 12
# Runs remembered (`Cache.run`): a few projects, or selections, linted in turn.
_RUNS_KEPT = 16
_RUNS_NAME = "runs.json"
_FILES, _FACTS = "files", "facts"  # the two kinds of shard: records and results; facts
# A stat is trusted only for content read at least this long after the file's last change:
# coarse file-system clocks (FAT: 2 s) cannot then hide an edit made right after the read.
_RACY_NS = 2_000_000_000
# Builds whose directory nobody has written for this long are removed.
_STALE_BUILD_SECONDS = 14 * 24 * 3600
# A shard larger than this is not read (a legitimate one holds a few MB for 100,000 files).
_MAX_SHARD_BYTES = 64 << 20

_TAG_NAME = "CACHEDIR.TAG"
_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by amplint.\n"
# What amplint 0.1.0 wrote: recognised only on a directory named .amplint_cache, since that
# version also wrote it into whatever --cache-dir named (a project root, a source directory).
_OLD_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This directory is amplint's cache.\n"
_GITIGNORE = "# Created by amplint.\n*\n"
_BUILD_NAME = re.compile(r"[A-Za-z0-9.+!_]+-[0-9a-f]{16}\Z")  # engine_fingerprint's
_OWN_FILE = re.compile(r"(?:lock|runs\.json|(?:files|facts)-[0-9a-f]{2}\.json|\.tmp-[0-9a-f]{16}\.part)\Z")
_MAGIC = b"amplint-cache-%d " % _FORMAT  # then the MAC in hex, a newline and the JSON
_KEY_TEXT = re.compile(rb"[0-9a-f]{64}\n?\Z")

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# Writing through directory descriptors is what makes "no link is followed" hold; a platform
# without them (Windows) reads no cache and writes none.
_SAFE_PLATFORM = (
    bool(_O_NOFOLLOW and _O_DIRECTORY)
    and {os.open, os.mkdir, os.unlink, os.rmdir, os.rename, os.stat} <= os.supports_dir_fd
    and {os.listdir, os.utime} <= os.supports_fd
)

Payload = Any  # JSON: dicts, lists, strings, numbers, booleans, None
Stat = Tuple[int, int, int, int]  # mtime_ns, ctime_ns, size, inode


def content_digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def stat_key(st: os.stat_result) -> Stat:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


def result_key(
    digest: str,
    path: str,
    codes: Sequence[str],
    settings: Mapping[str, Any] = {},
    imported: Optional[Mapping[str, Any]] = None,
    whole: bool = False,
    hazards: bool = False,
) -> str:
    """The key of one lint result: the content, the path (summaries and relative imports
    name it), the rules selected for this file, every setting that changes what linting
    reports, the summaries of the imported modules it was linted with, whether it was
    analysed whole (the second phase of a run), and whether its float16 hazards were worked
    out for the ambient pass.

    The parts are joined with NUL, which no path, rule code, digest or JSON text holds, so
    different parts never make one text; the settings' JSON is made once per settings
    object (a run's files share one), not per file."""
    text = "\0".join(
        (
            f"key-{_FORMAT}",
            digest,
            path,
            ",".join(codes),
            _settings_text(settings),
            _summaries_text(imported) if imported else "",
            "whole" if whole else "",
            "hazards" if hazards else "",
        )
    )
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


_settings_seen: List[Tuple[Dict[str, Any], str]] = []  # the last settings (a copy) and their JSON


def _settings_text(settings: Mapping[str, Any]) -> str:
    if _settings_seen and _settings_seen[0][0] == settings:  # a few keys: cheap to compare
        return _settings_seen[0][1]
    text = json.dumps(settings, sort_keys=True, separators=(",", ":"), default=repr)
    _settings_seen[:] = [(dict(settings), text)]
    return text


def json_digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


# The digest of each summary a run has keyed results with, by identity (the summary kept
# alive here, so its id is not reused): a module imported by many files, or linted again
# in each round, is written out as JSON once a run, not once a key. Summaries are never
# changed once made (a worker's result, or a shard's JSON).
_summary_digests: Dict[int, Tuple[Any, str]] = {}
_SUMMARY_DIGESTS = 4096


def _summaries_text(imported: Mapping[str, Any]) -> str:
    parts = []
    for path in sorted(imported):
        summary = imported[path]
        known = _summary_digests.get(id(summary))
        if known is None or known[0] is not summary:
            if len(_summary_digests) >= _SUMMARY_DIGESTS:
                _summary_digests.clear()
            known = _summary_digests[id(summary)] = (summary, json_digest(summary))
        parts.append((path, known[1]))
    return json.dumps(parts)


def default_cache_dir(project_root: str) -> str:
    return os.environ.get(ENV_CACHE_DIR) or os.path.join(project_root, CACHE_DIR_NAME)


def open_cache(cache_dir: Optional[str], project_root: str, configured: Optional[str] = None) -> "Cache":
    """The run's cache: the directory the user named (--cache-dir, else $AMPLINT_CACHE_DIR),
    else the configuration's `cache-dir`, else `.amplint_cache` in the project root. The last
    two come with the tree: each is used only if it is a real directory that amplint made (or
    it does not exist yet), and a configured one only inside the project, so that a
    repository cannot point amplint's writes elsewhere."""
    named = cache_dir or os.environ.get(ENV_CACHE_DIR)
    if named:
        return Cache(named, named=True)
    if configured:
        root = os.path.realpath(project_root)
        inside = os.path.realpath(configured)
        if os.path.commonpath([root, inside]) != root:
            return Cache(configured, refused=f"the configured cache-dir {configured} is outside the project (name it with --cache-dir to use it)")
        try:
            os.makedirs(os.path.dirname(inside), exist_ok=True)  # inside the project, as checked
        except OSError:
            pass  # then there is no cache, and the note says why
        return Cache(configured, named=False)
    return Cache(os.path.join(project_root, CACHE_DIR_NAME), named=False)


def engine_fingerprint() -> str:
    """Which amplint build wrote an entry: its version, a digest of its own source (a rule
    edited in a checkout invalidates, whatever the version says), the Python that parsed
    (syntax errors are CPython's) and LibCST's version."""
    import amplint

    digest = hashlib.blake2b(digest_size=8)
    digest.update(f"{_FORMAT}|{amplint.__version__}|{sys.version}|{_libcst_version()}".encode())
    for path in _own_sources():
        try:
            with open(path, "rb") as handle:
                digest.update(path.encode("utf-8", "replace") + b"\0" + handle.read() + b"\0")
        except OSError:
            digest.update(path.encode("utf-8", "replace") + b"\0?\0")
    return f"{amplint.__version__}-{digest.hexdigest()}"


def _own_sources() -> Iterable[str]:
    import amplint

    roots = list(getattr(amplint, "__path__", []))
    # Shipped from rules/ by package-dir: a separate directory in a checkout. Found without
    # importing the rules (a run that needs none does not import them).
    rules = importlib.util.find_spec("amplint.rules")
    if rules is not None:
        roots += [p for p in rules.submodule_search_locations or [] if p not in roots]
    found = []
    for root in roots:
        for directory, subdirs, names in os.walk(root):
            subdirs[:] = sorted(d for d in subdirs if d not in ("__pycache__", "harness"))
            found.extend(os.path.join(directory, n) for n in sorted(names) if n.endswith(".py"))
    return found


def _libcst_version() -> str:
    # importlib.metadata costs more than a warm run; the installed dist-info's name says it.
    try:
        spec = importlib.util.find_spec("libcst")  # where it is, without importing it
        assert spec is not None and spec.origin is not None
        site = os.path.dirname(os.path.dirname(spec.origin))
        found = [n for n in os.listdir(site) if n.lower().startswith("libcst-") and n.endswith(".dist-info")]
        return ",".join(sorted(found)) or site
    except Exception:
        return "?"


class Cache:
    """One amplint build's records under a cache directory. Loads shards as paths ask for
    them; `save` writes the ones that changed.

    `named`: the user named `directory` (--cache-dir, AMPLINT_CACHE_DIR): a symbolic link
    there is followed, and an existing directory that is not amplint's gets an
    `.amplint_cache` inside. Otherwise (the default, found in the tree) it must be amplint's
    own real directory or not exist. When no cache can be used, `problem` says why, and the
    records live only as long as this object."""

    def __init__(
        self, directory: str, fingerprint: Optional[str] = None, *, named: bool = False, refused: Optional[str] = None
    ) -> None:
        self.fingerprint = fingerprint or engine_fingerprint()
        if refused is not None:  # `refused`: why this directory is not to be used at all
            self.root, self.named, self.problem = None, False, refused
        else:
            self.root, self.named, self.problem = _choose_root(os.path.abspath(directory), named)
        self.key: Optional[bytes] = None
        if self.root is not None:
            self.key, self.problem = user_key()
            if self.key is None:
                self.root = None
        self.directory = os.path.join(self.root, self.fingerprint) if self.root is not None else None
        self._shards: Dict[str, Dict[str, dict]] = {}  # shard's name -> its records
        self._dirty: Dict[str, Dict[str, dict]] = {}  # shard's name -> the records this run wrote
        self._places: Dict[str, Tuple[str, int]] = {}  # path -> (record key, shard)
        self._runs: Optional[Dict[str, List[List[Any]]]] = None  # run key -> what its second phase changed
        self._dirty_runs: Dict[str, List[List[Any]]] = {}
        self.hits = 0
        self.misses = 0

    # ------------------------------------------------------------------ content

    def trusted_digest(self, path: str, st: os.stat_result) -> Optional[str]:
        """The recorded content digest of `path` when its stat says it has not changed
        since it was read; None when the file must be read and hashed."""
        record = self._record(path)
        if record is None or tuple(record.get("stat") or ()) != stat_key(st):
            return None
        if st.st_mtime_ns + _RACY_NS > record.get("read_at", 0):
            return None
        return record.get("digest")

    def note_content(self, path: str, st: os.stat_result, digest: str, read_at: int) -> None:
        """`path` was read at `read_at` (time.time_ns() before the stat) and hashed to `digest`."""
        record = self._writable(path)
        if record.get("digest") == digest and tuple(record.get("stat") or ()) == stat_key(st):
            if record.get("read_at", 0) >= st.st_mtime_ns + _RACY_NS:
                return
        record.update(stat=list(stat_key(st)), read_at=read_at, digest=digest)

    # ------------------------------------------------------------------ results

    def get(self, path: str, key: str, facts: bool = True) -> Optional[Payload]:
        """The result stored under `key`, if there is one of the shape `amplint.run.driver`
        writes (anything else is a miss). `facts`: with the parts only other files' linting
        reads (`_FACT_FIELDS`); without, none of them is read."""
        record = self._record(path)
        results = record.get("results") if record else None
        payload = results.get(key) if results else None
        if payload is not None and facts:
            kept = (self._record(path, _FACTS) or {}).get(key)
            payload = {**payload, **kept} if type(kept) is dict else None
        if payload is not None and valid_result(payload):
            self.hits += 1
            return payload
        self.misses += 1
        return None

    def put(self, path: str, key: str, payload: Payload) -> None:
        record = self._writable(path)
        results = dict(record.get("results") or {})
        results.pop(key, None)
        results[key] = {name: value for name, value in payload.items() if name not in _FACT_FIELDS}
        while len(results) > _RESULTS_PER_FILE:
            results.pop(next(iter(results)))
        record["results"] = results
        kept = self._writable(path, _FACTS)  # the same keys, pushed out in the same order
        for stale in [k for k in kept if k not in results or k == key]:
            del kept[stale]
        kept[key] = {name: payload[name] for name in _FACT_FIELDS if name in payload}

    # ------------------------------------------------------------------ runs

    def run(self, key: str) -> Optional[List[Tuple[int, str]]]:
        """What the second phase of a run made of the results of its first, remembered under
        `key` (made by `amplint.run.driver` from every file's path and first result key): each
        file whose final result is another one, by its place among the run's files, with
        that result's key. None when no run of these results is remembered."""
        if self._runs is None:
            self._runs = self._parse_runs(_read_regular(os.path.join(self.directory, _RUNS_NAME))) if self.directory else {}
        found = self._runs.get(key)
        return [(place, result) for place, result in found] if found is not None else None

    def put_run(self, key: str, changed: Sequence[Tuple[int, str]]) -> None:
        self.run(key)  # read what is there first, so that saving keeps it
        assert self._runs is not None
        rows = [[place, result] for place, result in changed]
        self._runs.pop(key, None)
        self._runs[key] = self._dirty_runs[key] = rows

    def _parse_runs(self, data: Optional[bytes]) -> Dict[str, List[List[Any]]]:
        value = self._unseal(data, _RUNS_NAME)
        runs = value.get("runs") if value is not None else None
        if type(runs) is not dict:
            return {}
        return {key: rows for key, rows in runs.items() if type(key) is str and _RUN_ROWS(rows)}

    # ------------------------------------------------------------------ storage

    def save(self) -> None:
        """Write the shards this run changed, merged with what other runs wrote since."""
        dirty, self._dirty = self._dirty, {}
        runs, self._dirty_runs = self._dirty_runs, {}
        if not (dirty or runs) or self.root is None or self.key is None:
            return
        try:
            root = self._open_root()
        except (OSError, ValueError):
            return  # a read-only checkout or a full disk costs speed, never the run
        try:
            try:
                os.mkdir(self.fingerprint, dir_fd=root)
                created = True
            except FileExistsError:
                created = False
            build = os.open(self.fingerprint, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=root)
            try:
                with _Lock(build):
                    for name, records in dirty.items():
                        merged = self._parse_shard(_read_regular(name, build), name)
                        merged.update(records)
                        body = json.dumps({"format": _FORMAT, "files": _prune(merged)}, separators=(",", ":"))
                        _write_new(build, name, self._seal(name, body.encode("utf-8", "surrogatepass")))
                    if runs:
                        kept = self._parse_runs(_read_regular(_RUNS_NAME, build))
                        for key, rows in runs.items():
                            kept.pop(key, None)
                            kept[key] = rows
                        kept = dict(list(kept.items())[-_RUNS_KEPT:])
                        body = json.dumps({"format": _FORMAT, "runs": kept}, separators=(",", ":"))
                        _write_new(build, _RUNS_NAME, self._seal(_RUNS_NAME, body.encode("utf-8", "surrogatepass")))
            finally:
                os.close(build)
            if created:
                _remove_stale_builds(root, keep=self.fingerprint)
        except (OSError, TypeError, ValueError, RecursionError):
            pass
        finally:
            os.close(root)

    def _open_root(self) -> int:
        """A descriptor of the cache root, made now if it does not exist; raises OSError
        unless it is amplint's."""
        assert self.root is not None
        flags = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC | (0 if self.named else _O_NOFOLLOW)
        try:
            root = os.open(self.root, flags)
        except FileNotFoundError:
            _create_root(self.root, parents=self.named)
            root = os.open(self.root, flags)
        if not _is_tagged(root, os.path.basename(self.root)):
            os.close(root)
            raise OSError(f"{self.root} is not amplint's cache directory")
        return root

    def _where(self, path: str) -> Tuple[str, int]:
        """`path`'s record key and shard (asked for twice per file: its digest, its result)."""
        found = self._places.get(path)
        if found is None:
            key = _path_key(path)
            found = self._places[path] = (key, _shard_of(key))
        return found

    def _record(self, path: str, kind: str = _FILES) -> Optional[dict]:
        key, shard = self._where(path)
        return self._shard(_shard_name(shard, kind)).get(key)

    def _writable(self, path: str, kind: str = _FILES) -> dict:
        key, shard = self._where(path)
        name = _shard_name(shard, kind)
        records = self._shard(name)
        record = dict(records.get(key) or {})
        records[key] = record
        self._dirty.setdefault(name, {})[key] = record
        return record

    def _shard(self, name: str) -> Dict[str, dict]:
        if name not in self._shards:
            records: Dict[str, dict] = {}
            if self.directory is not None:
                records = self._parse_shard(_read_regular(os.path.join(self.directory, name)), name)
            self._shards[name] = records
        return self._shards[name]

    def _mac(self, name: str, body: bytes) -> bytes:
        assert self.key is not None
        mac = hmac.new(self.key, b"amplint-shard\0" + f"{self.fingerprint}/{name}".encode("utf-8", "surrogatepass") + b"\0", "sha256")
        mac.update(body)
        return mac.hexdigest().encode("ascii")

    def _seal(self, name: str, body: bytes) -> bytes:
        return _MAGIC + self._mac(name, body) + b"\n" + body

    def _parse_shard(self, data: Optional[bytes], name: str) -> Dict[str, dict]:
        """The well-formed records of a shard this user wrote; {} for anything else."""
        value = self._unseal(data, name)
        if value is None or type(value.get("files")) is not dict:
            return {}
        valid = _valid_facts if name.startswith(_FACTS) else _valid_record
        return {path: record for path, record in value["files"].items() if valid(record)}

    def _unseal(self, data: Optional[bytes], name: str) -> Optional[Dict[str, Any]]:
        """The JSON object of a file named `name` that this user's amplint sealed in this
        format; None for anything else."""
        if data is None or self.key is None or not data.startswith(_MAGIC):
            return None
        mac, newline, body = data[len(_MAGIC) :].partition(b"\n")
        if not newline or not hmac.compare_digest(mac, self._mac(name, body)):
            return None
        try:
            value = json.loads(body)
        except (ValueError, RecursionError):  # RecursionError: JSON nested too deep to parse
            return None
        return value if type(value) is dict and value.get("format") == _FORMAT else None


# --------------------------------------------------------------------------- the root


def _choose_root(directory: str, named: bool) -> Tuple[Optional[str], bool, Optional[str]]:
    """(the cache root, whether it is the user-named directory itself, why there is none)."""
    if not _SAFE_PLATFORM:  # pragma: no cover - Windows
        return None, False, "this platform cannot write a cache without following links"
    state = _root_state(directory, follow=named)
    if state in ("amplint's", "absent"):
        return directory, named, None
    if named and state == "a directory":
        inner = os.path.join(directory, CACHE_DIR_NAME)
        state = _root_state(inner, follow=False)
        if state in ("amplint's", "absent"):
            return inner, False, None
        directory = inner
    why = {
        "a link": "is a symbolic link found in the tree (amplint follows none: name the directory with --cache-dir)",
        "a directory": "is not amplint's cache directory (it has no CACHEDIR.TAG of amplint's)",
    }.get(state, f"is {state}")
    return None, False, f"{directory} {why}"


def _root_state(path: str, follow: bool) -> str:
    try:
        st = os.lstat(path)
        if follow and stat.S_ISLNK(st.st_mode):
            st = os.stat(path)
    except FileNotFoundError:
        return "a dangling link" if follow and os.path.islink(path) else "absent"
    except OSError as error:
        return f"unusable ({error.strerror or error})"
    if stat.S_ISLNK(st.st_mode):
        return "a link"
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    try:
        flags = os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC | (0 if follow else _O_NOFOLLOW)
        fd = os.open(path, flags)
    except OSError as error:
        return f"unusable ({error.strerror or error})"
    try:
        return "amplint's" if _is_tagged(fd, os.path.basename(path)) else "a directory"
    finally:
        os.close(fd)


def _is_tagged(directory_fd: int, basename: str) -> bool:
    """Whether the directory holds amplint's marker: a regular CACHEDIR.TAG saying so."""
    data = _read_regular(_TAG_NAME, directory_fd, limit=4096)
    if data is None:
        return False
    return data == _TAG.encode() or (data == _OLD_TAG.encode() and basename == CACHE_DIR_NAME)


def _create_root(root: str, parents: bool) -> None:
    """Make the cache root with its marker and .gitignore, all at once: built under a
    temporary name beside it and renamed into place, so that a directory without the marker
    is never amplint's, and nothing is written into a directory that was there before."""
    parent = os.path.dirname(root)
    if parents:
        os.makedirs(parent, exist_ok=True)
    temporary = os.path.join(parent, f"{os.path.basename(root)}.tmp-{secrets.token_hex(8)}")
    os.mkdir(temporary)
    try:
        fd = os.open(temporary, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
        try:
            _write_new(fd, _TAG_NAME, _TAG.encode())
            _write_new(fd, ".gitignore", _GITIGNORE.encode())
        finally:
            os.close(fd)
        if os.path.lexists(root):  # another run made it meanwhile (or something else is there)
            raise FileExistsError(root)
        os.rename(temporary, root)
    except FileExistsError:
        _remove_own(temporary)
    except BaseException:
        _remove_own(temporary)
        raise


def _remove_own(temporary: str) -> None:
    for name in (_TAG_NAME, ".gitignore"):
        try:
            os.unlink(os.path.join(temporary, name))
        except OSError:
            pass
    try:
        os.rmdir(temporary)
    except OSError:
        pass


def _remove_stale_builds(root: int, keep: str) -> None:
    """Another build's directory that no run has written to in two weeks (a checkout's
    every edit makes a new build) is removed, if it is provably amplint's: named as builds
    are, a real directory (not a link), holding only regular files of amplint's names."""
    cutoff = time.time() - _STALE_BUILD_SECONDS
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        if name == keep or not _BUILD_NAME.match(name):
            continue
        try:
            st = os.stat(name, dir_fd=root, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_mtime >= cutoff:
                continue
            build = os.open(name, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=root)
            try:
                inside = os.listdir(build)
                if not all(_OWN_FILE.match(n) and stat.S_ISREG(os.stat(n, dir_fd=build, follow_symlinks=False).st_mode) for n in inside):
                    continue
                for entry in inside:
                    os.unlink(entry, dir_fd=build)
            finally:
                os.close(build)
            os.rmdir(name, dir_fd=root)
        except OSError:
            continue


# --------------------------------------------------------------------------- files


def _shard_name(shard: int, kind: str = _FILES) -> str:
    return f"{kind}-{shard:02x}.json"


def _path_key(path: str) -> str:
    return os.path.normcase(os.path.abspath(path))


def _shard_of(key: str) -> int:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=1).digest()[0] % _SHARDS


def _read_regular(path: str, directory_fd: Optional[int] = None, limit: int = _MAX_SHARD_BYTES) -> Optional[bytes]:
    """The bytes of a regular file that is not a link (not a FIFO, which would block, nor a
    device), up to `limit`; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=directory_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            return None
        chunks: List[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_new(directory_fd: int, name: str, data: bytes) -> None:
    """Write `name` in the directory atomically: a new temporary file (created, never
    opened through a link; mode 0666 less the umask, as any file the user makes) renamed
    over it."""
    temporary = f".tmp-{secrets.token_hex(8)}.part"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o666, dir_fd=directory_fd)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.rename(temporary, name, src_dir_fd=directory_fd, dst_dir_fd=directory_fd)
    except BaseException:
        try:
            os.unlink(temporary, dir_fd=directory_fd)
        except OSError:
            pass
        raise


def _prune(records: Dict[str, dict]) -> Dict[str, dict]:
    """Records of files that no longer exist go."""
    return {path: record for path, record in records.items() if os.path.exists(path)}


class _Lock:
    """An advisory lock serialising the read-merge-write of shards between concurrent runs."""

    def __init__(self, directory_fd: int) -> None:
        self.directory_fd = directory_fd
        self.fd: Optional[int] = None

    def __enter__(self) -> "_Lock":
        flags = os.O_RDONLY | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
        self.fd = os.open("lock", flags, 0o666, dir_fd=self.directory_fd)
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            self.fd = None
            raise OSError("the cache's lock is not a regular file")
        if fcntl is not None:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        # The build directory's mtime says when it was last used (see _remove_stale_builds).
        os.utime(self.directory_fd)
        return self

    def __exit__(self, *_: object) -> None:
        if self.fd is not None:
            if fcntl is not None:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


# --------------------------------------------------------------------------- the key


def key_path() -> Optional[str]:
    """Where this user's cache key lives: $AMPLINT_CACHE_KEY_FILE, else
    $XDG_CACHE_HOME/amplint/key (~/.cache/amplint/key); None without a home."""
    explicit = os.environ.get(ENV_KEY_FILE)
    if explicit:
        return os.path.abspath(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or ""
    if not os.path.isabs(base):  # the XDG rule: a relative value is ignored
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "amplint", "key") if os.path.isabs(base) else None


def user_key() -> Tuple[Optional[bytes], Optional[str]]:
    """(this user's cache key, made on first use; why there is none). Shards are sealed with
    it, so only what this user wrote on this machine (or wherever the key was copied) is
    believed."""
    path = key_path()
    if path is None:
        return None, "no home directory for the cache key (set XDG_CACHE_HOME or AMPLINT_CACHE_KEY_FILE)"
    try:
        key = _read_key(path)
        if key is None:
            key = _create_key(path)
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return None, f"cannot use the cache key {path}: {reason}"
    return key, None


def _read_key(path: str) -> Optional[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if hasattr(os, "geteuid") and (st.st_uid != os.geteuid() or st.st_mode & 0o077):
            raise ValueError("it must be this user's, readable by no one else (chmod 600)")
        data = os.read(fd, 100)
    finally:
        os.close(fd)
    if not _KEY_TEXT.match(data):
        raise ValueError("not an amplint cache key (delete it to make a new one)")
    return bytes.fromhex(data[:64].decode("ascii"))


def _create_key(path: str) -> Optional[bytes]:
    """A new random key, written whole to a private temporary file and linked into place,
    so that a concurrent run sees no key or the whole key, and the first one made wins."""
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    temporary = os.path.join(directory, f".key-{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(secrets.token_hex(32).encode("ascii") + b"\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another run made one first: theirs it is
    finally:
        try:
            os.unlink(temporary)
        except OSError:
            pass
    return _read_key(path)


# --------------------------------------------------------------------------- shapes
#
# What a shard may hold: records as this module writes them, and result payloads as
# `amplint.run.driver._to_payload` writes them. Anything else is a miss.


def _is_int(value: Any) -> bool:
    return type(value) is int


def _is_str(value: Any) -> bool:
    return type(value) is str


def _optional(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or check(value)


def _list_of(check: Callable[[Any], bool], length: Optional[int] = None) -> Callable[[Any], bool]:
    return lambda value: type(value) is list and (length is None or len(value) == length) and all(check(v) for v in value)


def _row_of(*checks: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: type(value) is list and len(value) == len(checks) and all(c(v) for c, v in zip(checks, value))


def _is_dict_of(check: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: type(value) is dict and all(type(k) is str and check(v) for k, v in value.items())


def _anything(value: Any) -> bool:
    return True


_EDIT = _row_of(_is_int, _is_int, _is_int, _is_int, _is_str)  # amplint.lint.fix.Edit
_FINDING_CHECKS: Dict[str, Callable[[Any], bool]] = {
    "row": _is_int,
    "column": _is_int,
    "code": _is_str,
    "message": _is_str,
    "end_row": _is_int,
    "end_column": _is_int,
    "name": _is_str,
    "url": _is_str,
    "cell": _optional(_is_int),
    "cell_row": _optional(_is_int),
    "file_span": _optional(_list_of(_is_int, 4)),
    "help": _optional(_is_str),
    "severity": _is_str,
    "fix": _optional(_row_of(_is_str, _is_str, _list_of(_EDIT))),
    "related": _list_of(_row_of(_is_str, _is_int, _is_int, _is_str)),  # amplint.lint.diagnostics.Related
}
# A Finding field without a check here makes every stored finding a miss (tests see that
# as warm runs that lint again), never a half-checked one.
_FINDING_ROW = _row_of(*(_FINDING_CHECKS.get(f.name, lambda _: False) for f in dataclasses.fields(Finding) if f.name != "path"))

# A module summary (amplint.semantic.foreign), to the depth this process reads it
# (amplint.project.link: its functions' names). Its events are taken apart only by
# `load_summary` in a worker, where anything amiss is that one file's error; checking them
# here would cost a warm run a third more (summaries are most of a shard).
_FUNCTION = lambda f: (  # noqa: E731
    type(f) is dict
    and _list_of(_is_str)(f.get("params"))
    and type(f.get("events")) is list
    and (f.get("sequences") is None or type(f.get("sequences")) is list)
)
_SUMMARY = lambda s: type(s) is dict and _is_dict_of(_FUNCTION)(s.get("functions", {})) and _is_dict_of(_is_dict_of(_anything))(s.get("scalers", {}))  # noqa: E731

_RESULT_CHECKS: Dict[str, Tuple[bool, Callable[[Any], bool]]] = {  # name: (required, check)
    "findings": (True, _list_of(_FINDING_ROW)),
    "error": (False, _optional(_is_str)),
    "skipped": (False, lambda v: type(v) is bool),
    "deferred": (False, lambda v: type(v) is bool),
    "may_export": (False, lambda v: type(v) is bool),
    "summary": (False, _optional(_SUMMARY)),
    "imports": (False, _optional(_list_of(_row_of(_optional(_is_str), _is_int)))),
    "lookups": (False, _optional(_list_of(_row_of(_optional(_is_str), _is_int, _optional(_is_str))))),
    # amplint.lint.diagnostics: where a file's error is (FileError.row, .column, .cell, .cell_row),
    # and each NotAnalysed's row, column, name, cell, cell row and line in the file.
    "error_at": (False, _optional(_row_of(_optional(_is_int), _optional(_is_int), _optional(_is_int), _optional(_is_int)))),
    # What the file's code calls and hits under autocast (amplint.project.ambient.facts), read
    # whole by the main process's ambient pass: its shape is checked there, entry by entry.
    "ambient": (False, _optional(_is_dict_of(_anything))),
    "skipped_functions": (
        False,
        _optional(_list_of(_row_of(_is_int, _is_int, _is_str, _optional(_is_int), _optional(_is_int), _optional(_is_int)))),
    ),
}


def valid_result(payload: Any) -> bool:
    """Whether `payload` has the shape of a stored lint result."""
    if type(payload) is not dict:
        return False
    for name, (required, check) in _RESULT_CHECKS.items():
        if name in payload:
            if not check(payload[name]):
                return False
        elif required:
            return False
    return True


_RECORD_CHECKS: Dict[str, Callable[[Any], bool]] = {
    "stat": _list_of(_is_int, 4),
    "read_at": _is_int,
    "digest": _is_str,
    "results": _is_dict_of(lambda payload: type(payload) is dict),  # each checked when asked for
}


# What `Cache.run` holds: [place, result key] rows.
_RUN_ROWS = _list_of(_row_of(_is_int, _is_str))


def _valid_facts(record: Any) -> bool:
    """A facts shard's record: result key -> the result's `_FACT_FIELDS` (checked with the
    rest of the result when asked for)."""
    return type(record) is dict and all(type(payload) is dict for payload in record.values())


def _valid_record(record: Any) -> bool:
    return type(record) is dict and all(name in _RECORD_CHECKS and _RECORD_CHECKS[name](value) for name, value in record.items())
