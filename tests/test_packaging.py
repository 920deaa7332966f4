"""The release as a user gets it: `python -m build` makes the sdist and, from it, the wheel;
`twine check` accepts both; the wheel ships rules and fixtures inside the amplint namespace;
and the README's install commands, run as written into fresh environments, give an amplint
that finds in its bundled fixtures exactly what the checkout finds in fixtures/.

The README's commands name `amplint==VERSION` on PyPI. So that they install this checkout's
wheel (before a release, and never the published one), they run against a local wheelhouse
only: the built wheel and the dependencies pip downloads for it."""

import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from conftest import REPO
from test_precommit import NO_NETWORK, snapshot_of_this_checkout

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
README = (REPO / "README.md").read_text()


def run(*command, **options):
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=600, **options)


def readme_install_commands():
    """The README's install lines (its first bash block after `## Install`), comments dropped."""
    section = README.split("\n## Install\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.slow(seconds=90)
def test_the_release_builds_checks_installs_and_finds_what_the_checkout_finds(tmp_path):
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    env.pop("GIT_DIR", None)
    env.pop("GIT_INDEX_FILE", None)
    source = tmp_path / "source"  # the build writes its egg-info beside the sources: not in the checkout
    source.mkdir()
    snapshot_of_this_checkout(source, env)
    dist = tmp_path / "dist"
    # uv (a test dependency) makes the build's isolated environments in half the time.
    built = run(sys.executable, "-m", "build", "--installer", "uv", "--outdir", dist, source)
    if built.returncode != 0 and any(marker in built.stdout + built.stderr for marker in NO_NETWORK):
        pytest.skip("the build backend cannot be installed here (no package index reachable)")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    assert (sdist.name, wheel.name) == (f"amplint-{VERSION}.tar.gz", f"amplint-{VERSION}-py3-none-any.whl")
    checked = run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"README.md", "CHANGELOG.md", "LICENSE", "pyproject.toml", "rules/amp003_clip_before_unscale.py", "fixtures/AMP003/buggy.py"} <= names
    assert not any(name.startswith("tests/") for name in names), "the suite needs the repository (conftest, cases)"
    with zipfile.ZipFile(wheel) as archive:
        _check_wheel_layout(archive)

    # The dependencies, once, from the index; every install below reads only this wheelhouse.
    wheelhouse = tmp_path / "wheelhouse"
    download = run(sys.executable, "-m", "pip", "download", "-q", "-d", wheelhouse, f"amplint[lsp] @ {wheel.as_uri()}")
    if download.returncode != 0 and any(marker in download.stdout + download.stderr for marker in NO_NETWORK):
        pytest.skip("the dependencies cannot be downloaded here (no package index reachable)")
    assert download.returncode == 0, download.stderr
    offline = {
        **os.environ,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(wheelhouse),
        "UV_PYTHON": sys.executable,
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "UV_TOOL_DIR": str(tmp_path / "uv-tools"),
        "UV_TOOL_BIN_DIR": str(tmp_path / "uv-bin"),
        "PIPX_HOME": str(tmp_path / "pipx"),
        "PIPX_BIN_DIR": str(tmp_path / "pipx-bin"),
        "PIPX_DEFAULT_PYTHON": sys.executable,
    }
    environment = tmp_path / "project-env"  # the user's project environment, for `pip install`
    venv.create(environment, with_pip=True)
    bin_dir = environment / "bin"
    offline["PATH"] = os.pathsep.join([str(bin_dir), os.path.dirname(sys.executable), offline.get("PATH", "")])

    installed = {}
    commands = readme_install_commands()
    assert [command.split()[0] for command in commands] == ["pipx", "uv", "pip", "pip"], commands
    for command in commands:
        if "[harness]" in command:
            continue  # torch, several hundred MB: its metadata is checked with the wheel's
        result = run("bash", "-c", command, cwd=tmp_path, env=offline)
        assert result.returncode == 0, f"{command}:\n{result.stdout}\n{result.stderr}"
        tool = command.split()[0]
        installed[tool] = {"pipx": tmp_path / "pipx-bin", "uv": tmp_path / "uv-bin", "pip": bin_dir}[tool] / "amplint"
    for tool, amplint in installed.items():
        assert run(amplint, "--version", cwd=tmp_path).stdout == f"amplint {VERSION}\n", tool
    # The [lsp] extra brought the language server's dependency into the project environment.
    # (Run outside the checkout: `python -c` would import its amplint/ from the working directory.)
    assert run(bin_dir / "python", "-c", "import pygls, amplint.lsp.server", cwd=tmp_path).returncode == 0

    # The installed amplint on its bundled fixtures finds what the checkout finds in fixtures/.
    located = run(bin_dir / "python", "-c", "import amplint.fixtures, os; print(os.path.dirname(amplint.fixtures.__file__))", cwd=tmp_path)
    bundled = Path(located.stdout.strip())
    assert bundled.is_relative_to(environment), bundled
    from_wheel = _findings(run(installed["pip"], "--isolated", "--no-cache", "--output-format", "json", bundled, cwd=tmp_path), bundled)
    from_checkout = _findings(run(sys.executable, "-m", "amplint", "--isolated", "--no-cache", "--output-format", "json", "fixtures", cwd=REPO), REPO / "fixtures")
    assert from_wheel == from_checkout
    assert {code for _, code, *_ in from_wheel} >= {"AMP001", "AMP003", "AMP010"}


def _findings(result, root):
    assert result.returncode == 1, result.stderr  # the buggy fixtures have findings
    return sorted(
        (Path(item["filename"]).relative_to(root).as_posix(), item["code"], item["location"]["row"], item["location"]["column"], item["message"], (item.get("fix") or {}).get("applicability"))
        for item in json.loads(result.stdout)
    )


def _check_wheel_layout(wheel):
    names = wheel.namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"amplint"}, "no top-level `rules` or `fixtures` package (django-rules owns `rules`)"
    assert "amplint/rules/amp003_clip_before_unscale.py" in names
    assert "amplint/fixtures/AMP003/buggy.py" in names
    assert "amplint/fixtures/AMP003/fixed.py" in names
    assert "amplint/harness/__init__.py" in names
    assert "amplint/lsp/server.py" in names
    metadata = wheel.read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert f"Version: {VERSION}" in metadata and "Requires-Python: >=3.10" in metadata
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert not any("torch" in line and "extra ==" not in line for line in requires), "torch must stay optional"
    assert any(re.match(r"Requires-Dist: torch.*extra == \"harness\"", line) for line in requires)
    extras = {line.split(": ", 1)[1] for line in metadata.splitlines() if line.startswith("Provides-Extra:")}
    assert {"lsp", "harness", "test"} <= extras
    # The language server's dependency is an extra: the linter's own install stays light.
    assert any(line.startswith("Requires-Dist: pygls") and 'extra == "lsp"' in line for line in requires)
    assert not any("pygls" in line and "extra ==" not in line for line in requires)
    assert "Project-URL: Changelog, " in metadata
    entry_points = wheel.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "amplint = amplint.cli:main" in entry_points


def test_no_syntax_newer_than_requires_python():
    # requires-python says 3.10: nothing amplint ships may need a newer parser.
    import ast

    for path in [*(REPO / "amplint").rglob("*.py"), *(REPO / "rules").glob("*.py")]:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 10))
