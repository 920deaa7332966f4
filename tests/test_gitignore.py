"""amplint ignores exactly what git ignores: differential tests against `git check-ignore`.

Random trees get random .gitignore files (nested, with negations, escapes, character classes,
patterns git cannot use), `.git/info/exclude` and a `core.excludesFile`; every path of the
tree is then asked of git and of amplint.run.gitignore, and the answers must agree.
"""

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from amplint.run.gitignore import GitIgnores, PatternList, pattern_problem

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")

NAMES = [b"a", b"b.py", b"gen_keep.py", b"A.PY", b"build", b"x y", b"[ab]", b"a*b", b"c?", b"#h", b"!b", b"t ",
         b"\xc3\xbc.py", b"\xff.py", b"sub", b"deep", b"ab", b"ba", b"a.b", b"foo", b"Foo", b"bar.py", b"q\\z"]
PIECES = [b"a", b"b", b"*", b"**", b"?", b"/", b".py", b"[ab]", b"[!a]", b"[^b]", b"[z-a]", b"[a-c]", b"\\", b"\\*",
          b"[[:alpha:]]", b"[[:upper:]]", b"[[:foo:]]", b"[]a]", b"[", b"build", b"gen_keep", b"sub", b"deep", b"F",
          b"o", b" ", b"x y", b"\\ ", b"!", b"#", b"[[:alpha]", b"\xc3\xbc", b"\xff", b"[a-]", b"[-a]", b"[\\]]"]


def _environment(tmp):
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "PATH": os.environ.get("PATH", ""),
        "LANG": "C",
    }


def _git(args, cwd, env, data=None):
    return subprocess.run([GIT, *args], cwd=cwd, env=env, input=data, capture_output=True, check=False)


def _from_path(rng, path):
    """A pattern likely to match `path` or a neighbour: pieces replaced by wildcards."""
    parts = path.split(b"/")
    parts = parts[rng.randint(0, len(parts) - 1) :] if rng.random() < 0.5 else parts
    out = []
    for part in parts:
        roll = rng.random()
        if roll < 0.15:
            part = b"*"
        elif roll < 0.25:
            part = b"**"
        elif roll < 0.4 and part:
            i = rng.randrange(len(part))
            part = part[:i] + rng.choice([b"?", b"*", b"[" + part[i : i + 1] + b"x]", b"\\" + part[i : i + 1], b"[!q]", b"**"]) + part[i + 1 :]
        out.append(part)
    line = b"/".join(out)
    return (b"/" + line) if rng.random() < 0.2 else line


def _pattern(rng, paths=()):
    if paths and rng.random() < 0.6:
        line = _from_path(rng, rng.choice(paths))
    else:
        line = b"".join(rng.choice(PIECES) for _ in range(rng.randint(1, 4)))
    if rng.random() < 0.25:
        line = b"!" + line
    if rng.random() < 0.15:
        line += b"/"
    if rng.random() < 0.1:
        line += b"  "
    if rng.random() < 0.05:
        line += b"\r"
    return line


def _make_tree(rng, root):
    paths = []
    directories = [b""]
    for _ in range(rng.randint(8, 24)):
        parent = rng.choice(directories)
        name = rng.choice(NAMES)
        relative = parent + b"/" + name if parent else name
        absolute = os.path.join(os.fsencode(root), relative)
        if os.path.lexists(absolute):
            continue
        if rng.random() < 0.4 and relative.count(b"/") < 3:
            os.mkdir(absolute)
            directories.append(relative)
        else:
            with open(absolute, "wb"):
                pass
        paths.append(relative)
    for directory in rng.sample(directories, k=min(len(directories), rng.randint(1, 4))):
        below = [p[len(directory) + 1 :] if directory else p for p in paths if p.startswith(directory + b"/") or not directory]
        lines = [_pattern(rng, below) for _ in range(rng.randint(1, 6))]
        if rng.random() < 0.2:
            lines.insert(0, b"# a comment")
        target = os.path.join(os.fsencode(root), directory, b".gitignore")
        with open(target, "wb") as handle:
            handle.write(b"\n".join(lines) + (b"\n" if rng.random() < 0.7 else b""))
    return paths


def _git_ignored(root, paths, env):
    result = _git(["check-ignore", "--no-index", "-z", "--stdin"], root, env, b"\0".join(paths) + b"\0")
    assert result.returncode in (0, 1), result.stderr
    return {p for p in result.stdout.split(b"\0") if p}


def compare_with_git(tmp_path, seed):
    """(paths, what git ignores, what amplint ignores) for the random repository of `seed`."""
    rng = random.Random(seed)
    root = tmp_path / "repo"
    root.mkdir()
    env = _environment(tmp_path)
    assert _git(["init", "-q", "."], root, env).returncode == 0
    paths = _make_tree(rng, root)
    if rng.random() < 0.5:
        (root / ".git" / "info").mkdir(exist_ok=True)
        (root / ".git" / "info" / "exclude").write_bytes(b"\n".join(_pattern(rng, paths) for _ in range(3)) + b"\n")
    if rng.random() < 0.5:
        excludes = tmp_path / "excludes"
        excludes.write_bytes(b"\n".join(_pattern(rng, paths) for _ in range(3)) + b"\n")
        assert _git(["config", "core.excludesFile", str(excludes)], root, env).returncode == 0
    elif rng.random() < 0.5:
        default = Path(env["XDG_CONFIG_HOME"]) / "git" / "ignore"
        default.parent.mkdir(parents=True, exist_ok=True)
        default.write_bytes(b"\n".join(_pattern(rng, paths) for _ in range(3)) + b"\n")
    if rng.random() < 0.2:
        assert _git(["config", "core.ignoreCase", "true"], root, env).returncode == 0
    expected = _git_ignored(root, paths, env)
    ours = GitIgnores(environ=env)
    absolute = {p: os.path.join(os.fsencode(root), p) for p in paths}
    got = {p for p in paths if ours.ignored(os.fsdecode(absolute[p]), os.path.isdir(absolute[p]))}
    return paths, expected, got


# 80 trees of 8-24 paths (~1,200 paths, a third of them ignored) in the suite; for more, run
# `python tests/test_gitignore.py 5000`.
@needs_git
@pytest.mark.parametrize("seed", range(80))
def test_matches_git_check_ignore_on_random_trees(tmp_path, seed):
    paths, expected, got = compare_with_git(tmp_path, seed)
    if got != expected:
        root = tmp_path / "repo"
        ignore_files = {
            os.path.relpath(d, root): Path(d, ".gitignore").read_bytes()
            for d, _, files in os.walk(root) if ".gitignore" in files and ".git" not in d
        }
        pytest.fail(f"paths: {sorted(paths)}\nignore files: {ignore_files}\n"
                    f"only git: {sorted(expected - got)}\nonly amplint: {sorted(got - expected)}")


@needs_git
def test_a_nested_negation_cannot_reinclude_a_file_in_an_ignored_directory(tmp_path):
    env = _environment(tmp_path)
    root = tmp_path / "repo"
    (root / "gen").mkdir(parents=True)
    assert _git(["init", "-q", "."], root, env).returncode == 0
    (root / ".gitignore").write_text("gen/*\n!gen/gen_keep.py\nlogs/\n")
    (root / "gen" / "gen_keep.py").write_text("")
    (root / "gen" / "other.py").write_text("")
    (root / "logs").mkdir()
    (root / "logs" / ".gitignore").write_text("!keep.py\n")
    (root / "logs" / "keep.py").write_text("")
    ours = GitIgnores(environ=env)
    assert not ours.ignored(str(root / "gen" / "gen_keep.py"), False)
    assert ours.ignored(str(root / "gen" / "other.py"), False)
    assert ours.ignored(str(root / "logs" / "keep.py"), False)  # git never looks inside logs/
    assert _git_ignored(root, [b"gen/gen_keep.py", b"gen/other.py", b"logs/keep.py"], env) == {
        b"gen/other.py",
        b"logs/keep.py",
    }


def test_info_exclude_and_excludes_file_without_git(tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("*_scratch.py\n")
    root = tmp_path / "repo"
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".git" / "info" / "exclude").write_text("local_*.py\n")
    env = {"HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    ours = GitIgnores(environ=env)
    assert ours.ignored(str(root / "local_a.py"), False)
    assert ours.ignored(str(root / "sub" / "x_scratch.py"), False)
    assert not ours.ignored(str(root / "train.py"), False)
    # core.excludesFile replaces the default, ~ expanded; .gitignore overrides both.
    (root / ".git" / "config").write_text('[core]\n\texcludesFile = "~/my ignore" ; a comment\n')
    (home / "my ignore").write_text("mine.py\n")
    (root / ".gitignore").write_text("!local_b.py\n")
    ours = GitIgnores(environ=env)
    assert ours.ignored(str(root / "mine.py"), False)
    assert not ours.ignored(str(root / "x_scratch.py"), False)
    assert not ours.ignored(str(root / "local_b.py"), False)


def test_a_worktree_reads_the_common_info_exclude(tmp_path):
    main = tmp_path / "main"
    (main / ".git" / "info").mkdir(parents=True)
    (main / ".git" / "info" / "exclude").write_text("wt_ignored.py\n")
    (main / ".git" / "worktrees" / "wt").mkdir(parents=True)
    (main / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {main / '.git' / 'worktrees' / 'wt'}\n")
    ours = GitIgnores(environ={"GIT_CONFIG_NOSYSTEM": "1"})
    assert ours.ignored(str(worktree / "wt_ignored.py"), False)
    # The repository ends at the worktree: a .gitignore above it does not apply.
    (tmp_path / ".gitignore").write_text("*.py\n")
    assert not GitIgnores(environ={"GIT_CONFIG_NOSYSTEM": "1"}).ignored(str(worktree / "train.py"), False)


@pytest.mark.parametrize(
    "pattern, problem",
    [
        ("[z-a]", "character range `z-a` is reversed"),
        ("!", "`!` negates nothing"),
        ("\\", "ends with a lone `\\`"),
        ("foo[", "unclosed `[`"),
        ("[[:foo:]]", "unknown character class `[:foo:]`"),
        ("# x", "is a comment"),
        ("", "empty"),
    ],
)
def test_patterns_git_would_not_use_are_problems_for_users(pattern, problem):
    assert problem in pattern_problem(pattern)


@pytest.mark.parametrize("pattern", ["build/", "*.py", "!keep.py", "src/**/gen_*.py", "[ab]*", "\\#x", "a\\ "])
def test_good_patterns_have_no_problem(pattern):
    assert pattern_problem(pattern) is None


def test_exclude_patterns_apply_to_directories_above():
    patterns = PatternList.from_patterns("/", ["generated", "!keep.py", "/rooted.py"])
    assert patterns.ignored("generated", True)
    assert patterns.ignored("a/generated/keep.py", False)  # inside an excluded directory
    assert not patterns.ignored("keep.py", False)
    assert patterns.ignored("rooted.py", False) and not patterns.ignored("a/rooted.py", False)


if __name__ == "__main__":  # the larger differential run: python tests/test_gitignore.py [TREES]
    import sys
    import tempfile

    trees, paths_seen, ignored_seen, failures = int(sys.argv[1]) if len(sys.argv) > 1 else 2000, 0, 0, []
    for seed in range(1000, 1000 + trees):
        with tempfile.TemporaryDirectory() as scratch:
            paths, expected, got = compare_with_git(Path(scratch), seed)
        paths_seen, ignored_seen = paths_seen + len(paths), ignored_seen + len(expected)
        if got != expected:
            failures.append(seed)
    print(f"{trees} trees, {paths_seen} paths, {ignored_seen} ignored by git; disagreements: {failures or 'none'}")
    sys.exit(1 if failures else 0)
