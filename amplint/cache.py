"""The lint cache: what linting a file produced, kept under a key that names everything the
result depends on, so that a re-run over unchanged files lints nothing.

Layout, after ruff's `.ruff_cache`:

    .amplint_cache/                  (--cache-dir, AMPLINT_CACHE_DIR; default: the project root)
        CACHEDIR.TAG, .gitignore     backup tools and git leave it alone
        <engine>/                    one directory per amplint build (see `engine_fingerprint`)
            files-<xx>.json          the records of the files whose path hashes to <xx>

A record belongs to one path and holds:

- the file's content digest, with the `os.stat` it was read under: a later run whose stat
  matches trusts the digest without reading the file (as git and ruff do). A file modified
  within two seconds of being read is "racily clean" (git's term): its stat is not trusted,
  and the next run hashes it again;
- results: payloads under keys made by `result_key` from the content digest, the path,
  the rules selected for the file, the settings, and the digest of the other modules'
  summaries it was linted with (the second phase of a run). A key changes whenever anything
  the result depends on changes, so an entry is never stale, only unused; the few most
  recent are kept;
- the file's summary slot (`summary`/`put_summary`): a payload that depends on the content
  and the amplint build alone, valid while the content digest matches.

Nothing here knows what a payload means: `amplint.driver` turns results into JSON and back.

Concurrent runs are safe: a shard is written to a temporary file and renamed into place
(readers see the old or the new file, never half of one), under an advisory lock where the
platform has one, and merged with what another run wrote meanwhile. A corrupt or
unreadable shard is a cache miss, never an error.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence, Tuple

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: atomic renames only
    fcntl = None  # type: ignore[assignment]

CACHE_DIR_NAME = ".amplint_cache"
ENV_CACHE_DIR = "AMPLINT_CACHE_DIR"
_FORMAT = 1  # bump when the record layout changes
_SHARDS = 256
# Results kept per file: switching between a few selections (pre-commit's, the editor's,
# CI's) keeps hitting.
_RESULTS_PER_FILE = 4
# A stat is trusted only for content read at least this long after the file's last change:
# coarse file-system clocks (FAT: 2 s) cannot then hide an edit made right after the read.
_RACY_NS = 2_000_000_000
# Builds whose directory nobody has written for this long are removed.
_STALE_BUILD_SECONDS = 14 * 24 * 3600

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
) -> str:
    """The key of one lint result: the content, the path (summaries and relative imports
    name it), the rules selected for this file, every setting that changes what linting
    reports, the summaries of the imported modules it was linted with, and whether it was
    analysed whole (the second phase of a run)."""
    parts = {
        "digest": digest,
        "path": path,
        "codes": list(codes),
        "settings": settings,
        "imported": json_digest(imported) if imported else None,
        "whole": whole,
    }
    return json_digest(parts)


def json_digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def default_cache_dir(project_root: str) -> str:
    return os.environ.get(ENV_CACHE_DIR) or os.path.join(project_root, CACHE_DIR_NAME)


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
    them; `save` writes the ones that changed."""

    def __init__(self, directory: str, fingerprint: Optional[str] = None) -> None:
        self.root = os.path.abspath(directory)
        self.fingerprint = fingerprint or engine_fingerprint()
        self.directory = os.path.join(self.root, self.fingerprint)
        self._shards: Dict[int, Dict[str, dict]] = {}
        self._dirty: Dict[int, Dict[str, dict]] = {}  # shard -> the records this run wrote
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
        if record.get("summary_digest") not in (None, digest):
            record.pop("summary", None)
            record.pop("summary_digest", None)

    # ------------------------------------------------------------------ results

    def get(self, path: str, key: str) -> Optional[Payload]:
        record = self._record(path)
        results = record.get("results") if record else None
        if results and key in results:
            self.hits += 1
            return results[key]
        self.misses += 1
        return None

    def put(self, path: str, key: str, payload: Payload) -> None:
        record = self._writable(path)
        results = dict(record.get("results") or {})
        results.pop(key, None)
        results[key] = payload
        while len(results) > _RESULTS_PER_FILE:
            results.pop(next(iter(results)))
        record["results"] = results

    # ------------------------------------------------------------------ summaries

    def summary(self, path: str, digest: str) -> Optional[Payload]:
        """The summary stored for `path` at content `digest` by this build, if any."""
        record = self._record(path)
        if record and record.get("summary_digest") == digest and "summary" in record:
            return record["summary"]
        return None

    def put_summary(self, path: str, digest: str, payload: Payload) -> None:
        record = self._writable(path)
        record["summary"] = payload
        record["summary_digest"] = digest

    # ------------------------------------------------------------------ storage

    def save(self) -> None:
        """Write the shards this run changed, merged with what other runs wrote since."""
        if not self._dirty:
            return
        try:
            self._prepare()
            with _Lock(os.path.join(self.directory, "lock")):
                for shard, records in self._dirty.items():
                    path = self._shard_path(shard)
                    merged = _read_shard(path)
                    merged.update(records)
                    _write_json(path, {"format": _FORMAT, "files": _prune(merged)})
        except (OSError, TypeError, ValueError):
            pass  # a read-only checkout or a full disk costs speed, never the run
        self._dirty = {}

    def _record(self, path: str) -> Optional[dict]:
        key = _path_key(path)
        return self._shard(_shard_of(key)).get(key)

    def _writable(self, path: str) -> dict:
        key = _path_key(path)
        shard = _shard_of(key)
        records = self._shard(shard)
        record = dict(records.get(key) or {})
        records[key] = record
        self._dirty.setdefault(shard, {})[key] = record
        return record

    def _shard(self, shard: int) -> Dict[str, dict]:
        if shard not in self._shards:
            self._shards[shard] = _read_shard(self._shard_path(shard))
        return self._shards[shard]

    def _shard_path(self, shard: int) -> str:
        return os.path.join(self.directory, f"files-{shard:02x}.json")

    def _prepare(self) -> None:
        if os.path.isdir(self.directory):
            return
        os.makedirs(self.directory, exist_ok=True)
        tag = os.path.join(self.root, "CACHEDIR.TAG")
        if not os.path.exists(tag):
            _write_text(tag, "Signature: 8a477f597d28d172789f06886806bc55\n# This directory is amplint's cache.\n")
            _write_text(os.path.join(self.root, ".gitignore"), "# Created by amplint.\n*\n")
        _remove_stale_builds(self.root, keep=self.fingerprint)


def _path_key(path: str) -> str:
    return os.path.normcase(os.path.abspath(path))


def _shard_of(key: str) -> int:
    return hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=1).digest()[0] % _SHARDS


def _read_shard(path: str) -> Dict[str, dict]:
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("files"), dict):
        return {}
    return data["files"]


def _prune(records: Dict[str, dict]) -> Dict[str, dict]:
    """Records of files that no longer exist go."""
    return {path: record for path, record in records.items() if os.path.exists(path)}


def _write_json(path: str, value: Any) -> None:
    _write_text(path, json.dumps(value, separators=(",", ":")))


def _write_text(path: str, text: str) -> None:
    directory = os.path.dirname(path)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _remove_stale_builds(root: str, keep: str) -> None:
    """Another build's directory that no run has written to in two weeks (a checkout's
    every edit makes a new build) is removed."""
    import shutil

    cutoff = time.time() - _STALE_BUILD_SECONDS
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.name != keep and entry.is_dir(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                if os.path.exists(os.path.join(entry.path, "lock")):  # only what amplint made
                    shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue


class _Lock:
    """An advisory lock serialising the read-merge-write of shards between concurrent runs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.handle = None

    def __enter__(self) -> "_Lock":
        self.handle = open(self.path, "a+b")
        if fcntl is not None:
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_EX)
        # The build directory's mtime says when it was last used (see _remove_stale_builds).
        os.utime(os.path.dirname(self.path))
        return self

    def __exit__(self, *_: object) -> None:
        if self.handle is not None:
            if fcntl is not None:
                fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()
