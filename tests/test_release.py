"""A release people can pin: one version everywhere it is written, a changelog entry for it,
and the workflows that test and publish it valid and wired as docs/development.md says."""

import json
import re
import subprocess
import sys
import tomllib

import yaml

from amplint import __version__
from conftest import REPO

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
README = (REPO / "README.md").read_text()
CHANGELOG = (REPO / "CHANGELOG.md").read_text()
WORKFLOWS = REPO / ".github" / "workflows"


def test_the_version_is_semantic():
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION


def test_every_place_says_the_same_version(amplint):
    assert __version__ == VERSION
    assert amplint("--version").stdout == f"amplint {VERSION}\n"
    vscode = json.loads((REPO / "editors" / "vscode" / "package.json").read_text())
    lock = json.loads((REPO / "editors" / "vscode" / "package-lock.json").read_text())
    assert vscode["version"] == lock["version"] == lock["packages"][""]["version"] == VERSION


def test_every_install_in_the_readme_and_docs_pins_this_version():
    pages = {"README.md": README, **{p.relative_to(REPO).as_posix(): p.read_text() for p in [*(REPO / "docs").glob("*.md"), REPO / "editors" / "vscode" / "README.md"]}}
    pins = []
    for page, text in pages.items():
        for line in text.splitlines():
            if re.search(r"\b(pip|pipx|uv tool) install\b.*\bamplint\b", line) and "-e " not in line and "pip install ." not in line:
                pin = re.search(r"amplint(?:\[\w+\])?==([\w.]+)", line)
                assert pin, f"{page}: an install without a pinned version: {line.strip()}"
                pins.append(pin.group(1))
            assert "git+https://github.com/amplint/amplint" not in line, f"{page}: {line.strip()}"
        for rev in re.findall(r"^\s*rev: (\S+)", text, flags=re.M):
            pins.append(rev.removeprefix("v"))
    assert len(pins) >= 6 and set(pins) == {VERSION}, pins
    # pipx or uv first: the linter in an environment of its own.
    first = next(line for line in README.split("\n## Install\n", 1)[1].splitlines() if "install" in line)
    assert first.startswith(("pipx install", "uv tool install")), first


def test_the_changelog_has_an_entry_for_this_version():
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", CHANGELOG, flags=re.M)
    assert releases and releases[0][0] == VERSION, "the newest entry is this version's"
    assert CHANGELOG.index("## [Unreleased]") < CHANGELOG.index(f"## [{VERSION}]")
    entry = CHANGELOG.split(f"## [{VERSION}]", 1)[1].split("\n## [", 1)[0]
    assert re.search(r"^### (Added|Changed|Fixed|Removed|Deprecated|Security)$", entry, flags=re.M)
    assert f"[{VERSION}]: https://github.com/amplint/amplint/releases/tag/v{VERSION}" in CHANGELOG


def _workflow(name):
    return yaml.safe_load((WORKFLOWS / name).read_text())


def test_the_workflows_are_valid_github_workflows():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert [f.name for f in files] == ["ci.yml", "release.yml"]
    checked = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", *map(str, files)],
        capture_output=True, text=True, timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_ci_runs_the_ci_script():
    (job,) = _workflow("ci.yml")["jobs"].values()
    assert job["container"].startswith("python:") and "bookworm" in job["container"]  # Debian, as root
    assert [step.get("run") for step in job["steps"] if "run" in step] == ["bash .ci/run"]


def test_a_version_tag_publishes_by_trusted_publishing():
    release = _workflow("release.yml")
    assert release[True]["push"] == {"tags": ["v*"]}  # PyYAML reads the key `on` as True
    jobs = release["jobs"]
    pypi = jobs["pypi"]
    assert pypi["permissions"] == {"id-token": "write"} and pypi["environment"]["name"] == "pypi"
    (publish,) = [step for step in pypi["steps"] if step.get("uses", "").startswith("pypa/gh-action-pypi-publish@")]
    assert "password" not in publish.get("with", {}), "trusted publishing: no token"
    build = "\n".join(step.get("run", "") for step in jobs["build"]["steps"])
    for command in ("python -m build", "twine check --strict dist/*", "tests/test_packaging.py", "npm ci", "npm run package"):
        assert command in build, command
    assert '"v$version" != "$GITHUB_REF_NAME"' in build  # the tag is the version
    assert jobs["github-release"]["needs"] == "pypi" and pypi["needs"] == "build"


def test_the_release_notes_are_the_changelog_entry(tmp_path):
    """The release job's awk line picks this version's entry out of CHANGELOG.md."""
    step = next(s for s in _workflow("release.yml")["jobs"]["github-release"]["steps"] if "awk" in s.get("run", ""))
    awk = next(line for line in step["run"].splitlines() if line.strip().startswith("awk"))
    (tmp_path / "CHANGELOG.md").write_text(CHANGELOG)
    script = f'GITHUB_REF_NAME=v{VERSION}; version="${{GITHUB_REF_NAME#v}}"; {awk.strip()}'
    subprocess.run(["bash", "-c", script], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    notes = (tmp_path / "notes.md").read_text()
    assert notes.strip() == CHANGELOG.split(f"## [{VERSION}]", 1)[1].split("\n", 1)[1].split("\n## [", 1)[0].strip()
    assert "### Added" in notes
