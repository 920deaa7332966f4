#!/usr/bin/env python3
"""Assemble the benchmark's corpora from local git mirrors, reproducibly.

    python bench/corpus.py --mirrors DIR --dest /tmp/amp-corpus            # every set
    python bench/corpus.py --mirrors DIR --dest /tmp/amp-corpus --set broad
    python bench/corpus.py --list                                         # what the list holds

The list is bench/corpus.toml: public repositories, each pinned by commit, in a named set
(`bench`, `broad`), with the number of .py files that commit holds. Each repository's .py
files at that commit are written to DEST/SET/NAME (NAME: the repository's name without its
owner), from a git mirror already on this machine; a repository whose mirror is missing, or
lacks the commit, is reported with the command that makes one, and nothing is downloaded
here. A repository already assembled at its commit is left as it is. Only .py files are
taken (no notebooks, no symbolic links), so every tool lints the same files.

A mirror is found under DIR as `OWNER+NAME/repo` (with or without a work tree),
`OWNER+NAME`, `OWNER/NAME.git`, `OWNER/NAME` or `NAME.git`: any git directory or clone
that has the commit.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

HERE = os.path.dirname(os.path.abspath(__file__))
LIST = os.path.join(HERE, "corpus.toml")
STAMP = ".corpus-commit"  # in each assembled repository: the commit it was assembled from


class CorpusError(Exception):
    """A list or a mirror that cannot give the corpus it names."""


@dataclass(frozen=True)
class Repo:
    name: str  # owner/name
    commit: str
    set: str
    files: int

    @property
    def directory(self) -> str:
        return self.name.split("/")[1]


def load(path: str = LIST) -> List[Repo]:
    """The repositories of a corpus list, checked: full commits, known keys, and within a set
    no two repositories that would share a directory."""
    with open(path, "rb") as handle:
        data = tomllib.load(handle)
    repos = []
    for index, entry in enumerate(data.get("repo", [])):
        where = f"{path}: repo {index + 1}"
        missing = {"name", "commit", "set", "files"} - set(entry)
        if missing:
            raise CorpusError(f"{where}: missing {', '.join(sorted(missing))}")
        unknown = set(entry) - {"name", "commit", "set", "files"}
        if unknown:
            raise CorpusError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        name, commit = entry["name"], entry["commit"]
        if not isinstance(name, str) or name.count("/") != 1 or not all(name.split("/")):
            raise CorpusError(f"{where}: name must be OWNER/NAME, not {name!r}")
        if not isinstance(commit, str) or len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
            raise CorpusError(f"{where} ({name}): commit must be 40 lowercase hex digits, not {commit!r}")
        if not isinstance(entry["files"], int) or not isinstance(entry["set"], str) or not entry["set"]:
            raise CorpusError(f"{where} ({name}): files must be a number and set a name")
        repos.append(Repo(name, commit, entry["set"], entry["files"]))
    seen: Dict[tuple, str] = {}
    for repo in repos:
        key = (repo.set, repo.directory.lower())
        if key in seen:
            raise CorpusError(f"{path}: {seen[key]} and {repo.name} would share {repo.set}/{repo.directory}")
        seen[key] = repo.name
    return repos


def _git(git_dir: str, *args: str, binary: bool = False):
    return subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=False, text=not binary)


def _has_commit(git_dir: str, commit: str) -> bool:
    return _git(git_dir, "cat-file", "-e", f"{commit}^{{commit}}").returncode == 0


def find_mirror(mirrors: str, repo: Repo) -> Optional[str]:
    """The git directory under `mirrors` that holds `repo`'s commit, if there is one."""
    owner, name = repo.name.split("/")
    for candidate in (
        os.path.join(mirrors, f"{owner}+{name}", "repo"),
        os.path.join(mirrors, f"{owner}+{name}"),
        os.path.join(mirrors, owner, f"{name}.git"),
        os.path.join(mirrors, owner, name),
        os.path.join(mirrors, f"{name}.git"),
    ):
        for git_dir in (os.path.join(candidate, ".git"), candidate):
            if os.path.isfile(os.path.join(git_dir, "HEAD")) and _has_commit(git_dir, repo.commit):
                return git_dir
    return None


def how_to_mirror(mirrors: str, repo: Repo) -> str:
    owner, name = repo.name.split("/")
    return f"git clone --bare https://github.com/{repo.name} {os.path.join(mirrors, owner, name + '.git')}"


def assemble(repo: Repo, git_dir: str, dest: str) -> int:
    """Write `repo`'s .py files at its commit to DEST/SET/NAME; the number written."""
    target = os.path.join(dest, repo.set, repo.directory)
    stamp = os.path.join(target, STAMP)
    if os.path.isfile(stamp):
        with open(stamp, encoding="utf-8") as handle:
            if handle.read().strip() == repo.commit:
                return sum(1 for _, _, names in os.walk(target) for n in names if n.endswith(".py"))
    shutil.rmtree(target, ignore_errors=True)
    archive = _git(git_dir, "archive", "--format=tar", repo.commit, "--", "*.py", binary=True)
    if archive.returncode != 0:
        raise CorpusError(f"{repo.name}: git archive failed: {archive.stderr.decode('utf-8', 'replace').strip()}")
    partial = target + ".part"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    written = 0
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if not member.isfile() or not member.name.endswith(".py"):
                continue
            parts = member.name.split("/")
            if member.name.startswith("/") or ".." in parts:
                raise CorpusError(f"{repo.name}: unsafe path in the archive: {member.name!r}")
            path = os.path.join(partial, *parts)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            with open(path, "wb") as handle:
                shutil.copyfileobj(source, handle)
            written += 1
    if written != repo.files:
        shutil.rmtree(partial, ignore_errors=True)
        raise CorpusError(f"{repo.name}: commit {repo.commit[:12]} gave {written} .py files, the list says {repo.files}")
    with open(os.path.join(partial, STAMP), "w", encoding="utf-8") as handle:
        handle.write(repo.commit + "\n")
    os.replace(partial, target)
    return written


def build(repos: Sequence[Repo], mirrors: str, dest: str, sets: Optional[Sequence[str]] = None, out=sys.stderr) -> Dict[str, str]:
    """Assemble the chosen sets (all by default); their directories by set name. Every
    missing mirror is named before anything fails, each with the command that makes it."""
    chosen = [r for r in repos if sets is None or r.set in sets]
    unknown = sorted(set(sets or ()) - {r.set for r in repos})
    if unknown:
        raise CorpusError(f"no repositories in set(s) {', '.join(unknown)}")
    found = {repo: find_mirror(mirrors, repo) for repo in chosen}
    missing = [repo for repo in chosen if found[repo] is None]
    if missing:
        lines = [f"{len(missing)} repositories have no mirror with their commit under {mirrors} (nothing is downloaded here):"]
        lines += [f"  {r.name} @ {r.commit[:12]}:  {how_to_mirror(mirrors, r)}" for r in missing]
        raise CorpusError("\n".join(lines))
    for repo in chosen:
        count = assemble(repo, found[repo], dest)  # type: ignore[arg-type]
        print(f"  {repo.set}/{repo.directory}: {count} files ({repo.name} @ {repo.commit[:12]})", file=out)
    return {s: os.path.join(dest, s) for s in dict.fromkeys(r.set for r in chosen)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", dest="show", action="store_true", help="print the repositories of the list and stop")
    parser.add_argument("--corpus-list", default=LIST, metavar="TOML", help="the list (default: bench/corpus.toml)")
    parser.add_argument("--mirrors", metavar="DIR", default=os.environ.get("AMPLINT_BENCH_MIRRORS"), help="where the git mirrors are (default: $AMPLINT_BENCH_MIRRORS)")
    parser.add_argument("--dest", metavar="DIR", help="where the corpora are assembled")
    parser.add_argument("--set", dest="sets", action="append", metavar="NAME", help="only this set (repeatable; default: every set)")
    args = parser.parse_args(argv)
    try:
        repos = load(args.corpus_list)
        if args.show:
            for name in dict.fromkeys(r.set for r in repos):
                members = [r for r in repos if r.set == name]
                print(f"{name}: {len(members)} repositories, {sum(r.files for r in members)} files")
                for r in members:
                    print(f"  {r.name:45} {r.commit}  {r.files:6d}")
            return 0
        if not args.mirrors or not args.dest:
            parser.error("--mirrors and --dest are needed to build (or --list)")
        built = build(repos, args.mirrors, args.dest, args.sets)
    except CorpusError as error:
        print(f"corpus: {error}", file=sys.stderr)
        return 2
    for name, directory in built.items():
        print(f"{name}={directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
