"""Which files are linted: one bad path (a FIFO, an unreadable directory, a bad .gitignore) never
costs the findings of the others."""

import os
import shutil
import subprocess
import textwrap

import pytest

from amplint.run.discovery import Discovery
from amplint.run.source import read_file
from conftest import BUGGY

GOOD = "good.py:8:5: AMP003"


def tree(root, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifos_and_devices_found_while_walking_are_errors_not_hangs(amplint, tmp_path):
    tree(tmp_path, {"good.py": BUGGY})
    (tmp_path / "d").mkdir()
    os.mkfifo(tmp_path / "d" / "y.py")
    os.symlink("/dev/zero", tmp_path / "d" / "z.py")
    os.symlink(tmp_path / "missing", tmp_path / "d" / "dangling.py")
    os.symlink(tmp_path / "d", tmp_path / "linked_dir.py")  # a linked directory: not followed
    result = amplint("--concise", ".", cwd=tmp_path)  # the conftest timeout catches a hang
    assert result.returncode == 2
    assert GOOD in result.stdout
    assert f"{os.path.join('d', 'y.py')}: not a regular file (a FIFO)" in result.stderr
    assert f"{os.path.join('d', 'z.py')}: not a regular file (a character device)" in result.stderr
    assert f"{os.path.join('d', 'dangling.py')}: broken symbolic link" in result.stderr
    assert "linked_dir" not in result.stderr + result.stdout
    # Named on the command line: the same words.
    result = amplint("--concise", "d/y.py", "good.py", cwd=tmp_path)
    assert result.returncode == 2 and GOOD in result.stdout and "d/y.py: not a regular file (a FIFO)" in result.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_reading_a_path_that_became_a_fifo_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "late.py")
    error = read_file(str(tmp_path / "late.py"))
    assert error.message == "not a regular file (a FIFO)"


def test_an_unreadable_directory_is_an_error_and_the_walk_goes_on(tmp_path, monkeypatch):
    tree(tmp_path, {"good.py": BUGGY, "locked/secret.py": BUGGY, "open/other.py": BUGGY})
    real_scandir = os.scandir

    def scandir(path):
        if os.path.basename(os.path.normpath(path)) == "locked":
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.chdir(tmp_path)
    files, errors = Discovery(str(tmp_path)).files(["."])
    assert sorted(files) == ["good.py", os.path.join("open", "other.py")]
    assert [(e.path, e.message) for e in errors] == [("locked", "cannot read directory: Permission denied")]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can read any directory")
def test_an_unreadable_directory_end_to_end(amplint, tmp_path):
    tree(tmp_path, {"good.py": BUGGY, "locked/secret.py": BUGGY})
    (tmp_path / "locked").chmod(0)
    try:
        result = amplint("--concise", ".", cwd=tmp_path)
    finally:
        (tmp_path / "locked").chmod(0o755)
    assert result.returncode == 2 and GOOD in result.stdout
    assert "locked: cannot read directory: Permission denied" in result.stderr


@pytest.mark.parametrize("pattern", ["[z-a]", "!", "\\", "foo[", "[[:nope:]]"])
def test_a_pattern_git_cannot_use_in_a_nested_gitignore_is_ignored_as_git_does(amplint, tmp_path, pattern):
    tree(tmp_path, {"good.py": BUGGY, "sub/.gitignore": f"{pattern}\nignored.py\n", "sub/ignored.py": BUGGY})
    (tmp_path / ".git").mkdir()
    result = amplint("--concise", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines()[0].startswith(GOOD) and "ignored.py" not in result.stdout


@pytest.mark.parametrize("option", ["--exclude", "--extend-exclude"])
@pytest.mark.parametrize("pattern, problem", [("[z-a]", "reversed"), ("!", "negates nothing"), ("\\", "lone `\\`")])
def test_patterns_given_to_amplint_are_checked(amplint, tmp_path, option, pattern, problem):
    tree(tmp_path, {"good.py": BUGGY})
    result = amplint(option, pattern, ".", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert f"amplint: error: invalid pattern `{pattern}` in {option}: " in result.stderr and problem in result.stderr


@pytest.mark.parametrize("key", ["exclude", "extend-exclude", "per-file-ignores"])
def test_patterns_in_the_configuration_are_checked(amplint, tmp_path, key):
    value = '{ "[z-a]" = ["AMP003"] }' if key == "per-file-ignores" else '["[z-a]"]'
    tree(tmp_path, {"good.py": BUGGY, "pyproject.toml": f"[tool.amplint]\n{key} = {value}\n"})
    result = amplint(".", cwd=tmp_path)
    assert result.returncode == 2
    assert f"pyproject.toml: invalid pattern `[z-a]` in `{key}`: character range `z-a` is reversed" in result.stderr


def test_nested_gitignore_negation_info_exclude_and_excludes_file(amplint, tmp_path):
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("*_scratch.py\n")
    root = tree(
        tmp_path / "repo",
        {
            ".gitignore": "gen/*.py\n",
            "gen/.gitignore": "!gen_keep.py\n",
            "gen/gen_keep.py": BUGGY,
            "gen/other.py": BUGGY,
            "local.py": BUGGY,
            "try_scratch.py": BUGGY,
            "train.py": BUGGY,
        },
    )
    (root / ".git" / "info").mkdir(parents=True)
    (root / ".git" / "info" / "exclude").write_text("local.py\n")
    result = amplint("--concise", "-q", ".", cwd=root, env={"HOME": str(home), "XDG_CONFIG_HOME": ""})
    linted = sorted(line.split(":")[0] for line in result.stdout.splitlines())
    assert linted == [os.path.join("gen", "gen_keep.py"), "train.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_files_git_keeps_are_exactly_the_files_linted(amplint, tmp_path):
    root = tree(
        tmp_path,
        {
            ".gitignore": "build*/\n*.gen.py\n!keep.gen.py\ndocs/**/conf.py\n/top_only.py\n",
            "pkg/.gitignore": "!*.gen.py\nlocal/\n",
            "a.py": BUGGY,
            "x.gen.py": BUGGY,
            "keep.gen.py": BUGGY,
            "top_only.py": BUGGY,
            "pkg/top_only.py": BUGGY,
            "pkg/y.gen.py": BUGGY,
            "pkg/local/z.py": BUGGY,
            "builder/b.py": BUGGY,
            "docs/src/deep/conf.py": BUGGY,
            "docs/conf.py": BUGGY,
        },
    )
    env = {"HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1", "PATH": os.environ.get("PATH", "")}
    subprocess.run(["git", "init", "-q", "."], cwd=root, env=env, check=True)
    listed = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "--", "*.py"],
        cwd=root, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()
    result = amplint("--concise", "-q", "--no-respect-gitignore", "--exclude", ".git", ".", cwd=root)
    assert len(result.stdout.splitlines()) == 10
    result = amplint("--concise", "-q", ".", cwd=root)
    linted = sorted(line.split(":")[0].replace(os.sep, "/") for line in result.stdout.splitlines())
    assert linted == sorted(listed)


def test_per_file_ignores_match_like_gitignore(amplint, tmp_path):
    tree(
        tmp_path,
        {
            "pyproject.toml": textwrap.dedent(
                """\
                [tool.amplint]
                per-file-ignores = { "bench/" = ["AMP003"], "*_test.py" = ["AMP"], "/top.py" = ["ALL"] }
                """
            ),
            "bench/deep/a.py": BUGGY,
            "x_test.py": BUGGY,
            "top.py": BUGGY,
            "sub/top.py": BUGGY,
        },
    )
    result = amplint("--concise", "-q", ".", cwd=tmp_path)
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [os.path.join("sub", "top.py")]


def test_named_paths_are_linted_even_when_gitignore_ignores_them_as_ruff_does(amplint, tmp_path):
    tree(
        tmp_path,
        {
            ".gitignore": "experiments/\nscratch.py\n*_gen.py\n",
            "train.py": BUGGY,
            "scratch.py": BUGGY,
            "experiments/run.py": BUGGY,
            "experiments/deep/run.py": BUGGY,
            "experiments/model_gen.py": BUGGY,  # its own pattern still applies inside
        },
    )
    (tmp_path / ".git").mkdir()
    walked = amplint("--concise", "-q", cwd=tmp_path)
    assert [line.split(":")[0] for line in walked.stdout.splitlines()] == ["train.py"]
    # A named ignored folder: what is inside is judged as if the folder were not ignored.
    folder = amplint("--concise", "-q", "experiments", cwd=tmp_path)
    assert folder.returncode == 1, folder.stderr
    assert sorted(line.split(":")[0] for line in folder.stdout.splitlines()) == [
        os.path.join("experiments", "deep", "run.py"),
        os.path.join("experiments", "run.py"),
    ]
    # A folder inside an ignored one, named: the same.
    deep = amplint("--concise", "-q", "experiments/deep", cwd=tmp_path)
    assert [line.split(":")[0] for line in deep.stdout.splitlines()] == [os.path.join("experiments", "deep", "run.py")]
    # A named ignored file.
    assert amplint("--concise", "-q", "scratch.py", cwd=tmp_path).stdout.startswith("scratch.py:8:5: AMP003")
    # Naming the ignored folder changes nothing for the other named paths.
    both = amplint("--concise", "-q", "experiments", ".", cwd=tmp_path)
    assert sorted(line.split(":")[0] for line in both.stdout.splitlines()) == [
        os.path.join("experiments", "deep", "run.py"),
        os.path.join("experiments", "run.py"),
        "train.py",
    ]


def test_force_exclude_leaves_out_named_ignored_and_excluded_paths_and_says_why(amplint, tmp_path):
    tree(
        tmp_path,
        {
            ".gitignore": "experiments/\nscratch.py\n",
            "pyproject.toml": '[tool.amplint]\nextend-exclude = ["generated"]\n',
            "scratch.py": BUGGY,
            "experiments/run.py": BUGGY,
            "generated/model.py": BUGGY,
        },
    )
    (tmp_path / ".git").mkdir()
    for named, why in [
        ("experiments", "experiments is ignored by .gitignore (--force-exclude"),
        ("scratch.py", "scratch.py is ignored by .gitignore (--force-exclude"),
        ("generated", "generated is excluded by `exclude`/`extend-exclude` (--force-exclude)"),
        ("generated/model.py", "generated/model.py is excluded by `exclude`/`extend-exclude` (--force-exclude)"),
    ]:
        result = amplint("--force-exclude", named, cwd=tmp_path)
        assert result.returncode == 0, (named, result.stdout)
        assert "no Python files or notebooks found under" in result.stderr and why in result.stderr, result.stderr
        # Without --force-exclude, a named path is linted.
        assert amplint("--concise", "-q", named, cwd=tmp_path).returncode == 1, named
    # --no-respect-gitignore: .gitignore no longer leaves anything out.
    assert amplint("--force-exclude", "--no-respect-gitignore", "experiments", cwd=tmp_path).returncode == 1
