"""bench/corpus.py assembles the benchmark's corpora from local git mirrors: the pinned commit's
.py files, counted against the list, and never a download (a missing mirror is named with
the command that makes one)."""

import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("bench_corpus", os.path.join(REPO, "bench", "corpus.py"))
corpus = importlib.util.module_from_spec(_spec)
sys.modules["bench_corpus"] = corpus  # dataclasses look their module up
_spec.loader.exec_module(corpus)


def git(cwd, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def mirror(tmp_path):
    """A mirror at MIRRORS/acme+trainer/repo with two commits: the first has two .py files
    (one in a package), a notebook and a symbolic link; the second a third .py file."""
    work = tmp_path / "mirrors" / "acme+trainer" / "repo"
    (work / "pkg").mkdir(parents=True)
    git(work, "init", "-q")
    (work / "train.py").write_text("import torch\n")
    (work / "pkg" / "model.py").write_text("x = 1\n")
    (work / "demo.ipynb").write_text("{}\n")
    os.symlink("train.py", work / "link.py")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "one")
    first = git(work, "rev-parse", "HEAD")
    (work / "extra.py").write_text("y = 2\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "two")
    return tmp_path / "mirrors", first


def write_list(tmp_path, commit, files, name="acme/trainer", set_="broad"):
    path = tmp_path / "corpus.toml"
    path.write_text(f'[[repo]]\nname = "{name}"\ncommit = "{commit}"\nset = "{set_}"\nfiles = {files}\n')
    return str(path)


def test_assembles_the_pinned_commits_python_files(tmp_path, mirror):
    mirrors, first = mirror
    repos = corpus.load(write_list(tmp_path, first, 2))
    built = corpus.build(repos, str(mirrors), str(tmp_path / "out"), out=open(os.devnull, "w"))
    assert built == {"broad": str(tmp_path / "out" / "broad")}
    found = sorted(os.path.relpath(os.path.join(d, n), built["broad"]) for d, _, names in os.walk(built["broad"]) for n in names)
    # Not extra.py (a later commit), not the notebook, not the link.
    assert found == ["trainer/.corpus-commit", "trainer/pkg/model.py", "trainer/train.py"]
    assert (tmp_path / "out" / "broad" / "trainer" / "train.py").read_text() == "import torch\n"


def test_a_second_build_keeps_what_is_assembled_and_a_new_commit_replaces_it(tmp_path, mirror):
    mirrors, first = mirror
    out = tmp_path / "out"
    corpus.build(corpus.load(write_list(tmp_path, first, 2)), str(mirrors), str(out), out=open(os.devnull, "w"))
    marker = out / "broad" / "trainer" / "train.py"
    marker.write_text("changed\n")  # left alone: the stamp says this commit is assembled
    corpus.build(corpus.load(write_list(tmp_path, first, 2)), str(mirrors), str(out), out=open(os.devnull, "w"))
    assert marker.read_text() == "changed\n"
    second = git(mirrors / "acme+trainer" / "repo", "rev-parse", "HEAD")
    corpus.build(corpus.load(write_list(tmp_path, second, 3)), str(mirrors), str(out), out=open(os.devnull, "w"))
    assert marker.read_text() == "import torch\n" and (out / "broad" / "trainer" / "extra.py").exists()


def test_a_count_that_differs_from_the_list_fails_and_leaves_nothing(tmp_path, mirror):
    mirrors, first = mirror
    with pytest.raises(corpus.CorpusError, match="gave 2 .py files, the list says 5"):
        corpus.build(corpus.load(write_list(tmp_path, first, 5)), str(mirrors), str(tmp_path / "out"), out=open(os.devnull, "w"))
    assert not os.path.exists(tmp_path / "out" / "broad" / "trainer")


def test_a_missing_mirror_or_commit_is_named_with_the_command_that_makes_it(tmp_path, mirror):
    mirrors, _ = mirror
    path = tmp_path / "corpus.toml"
    path.write_text(
        f'[[repo]]\nname = "acme/trainer"\ncommit = "{"0" * 40}"\nset = "broad"\nfiles = 1\n'
        f'[[repo]]\nname = "other/thing"\ncommit = "{"1" * 40}"\nset = "broad"\nfiles = 1\n'
    )
    with pytest.raises(corpus.CorpusError) as raised:
        corpus.build(corpus.load(str(path)), str(mirrors), str(tmp_path / "out"), out=open(os.devnull, "w"))
    message = str(raised.value)
    assert "2 repositories have no mirror" in message and "nothing is downloaded" in message
    assert f"git clone --bare https://github.com/other/thing {mirrors}/other/thing.git" in message
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.parametrize(
    "entry, message",
    [
        ('name = "acme"\ncommit = "%s"\nset = "b"\nfiles = 1' % ("a" * 40), "OWNER/NAME"),
        ('name = "a/b"\ncommit = "main"\nset = "b"\nfiles = 1', "40 lowercase hex"),
        ('name = "a/b"\ncommit = "%s"\nset = "b"' % ("a" * 40), "missing files"),
        ('name = "a/b"\ncommit = "%s"\nset = "b"\nfiles = 1\nurl = "x"' % ("a" * 40), "unknown key"),
    ],
)
def test_a_malformed_list_is_refused(tmp_path, entry, message):
    path = tmp_path / "corpus.toml"
    path.write_text("[[repo]]\n" + entry + "\n")
    with pytest.raises(corpus.CorpusError, match=message):
        corpus.load(str(path))


def test_two_repositories_of_one_set_cannot_share_a_directory(tmp_path):
    path = tmp_path / "corpus.toml"
    path.write_text("".join(f'[[repo]]\nname = "{o}/examples"\ncommit = "{"a" * 40}"\nset = "b"\nfiles = 1\n' for o in ("x", "y")))
    with pytest.raises(corpus.CorpusError, match="would share b/examples"):
        corpus.load(str(path))


def test_the_shipped_list_has_a_broad_corpus_as_the_issue_asks():
    repos = corpus.load()
    broad = [r for r in repos if r.set == "broad"]
    assert len(broad) >= 20 and sum(r.files for r in broad) >= 5000
    assert {r.set for r in repos} == {"bench", "broad"}
    assert not {r.name for r in broad} & {r.name for r in repos if r.set == "bench"}
