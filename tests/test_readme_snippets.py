"""The README's snippets stay copy-pasteable: every block parses as its language, every
`amplint ...` command in them is one the command line accepts, the configuration example is
one amplint loads, and the CI examples install from the repository (amplint is not on PyPI).

The pre-commit snippet is run for real by test_precommit.py; the console examples are the
command's real output, checked here against a run."""

import json
import re
import shlex
import tomllib

import pytest
import yaml

from amplint import cli
from amplint.config.options import load
from conftest import BUGGY, REPO

README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, flags=re.S | re.M)
PUBLIC_REPO = "git+https://github.com/amplint/amplint"


def blocks(language):
    return [text for lang, text in BLOCKS if lang == language]


def amplint_commands():
    """Every `amplint ...` invocation in the README's shell, YAML and console blocks."""
    found = []
    for language, text in BLOCKS:
        if language not in ("bash", "yaml", "console"):
            continue
        for line in text.splitlines():
            line = line.split("  #", 1)[0].strip()
            line = re.sub(r"^(?:\$ |- |run: )+", "", line)
            for part in line.split("&&"):
                part = part.split(">", 1)[0].strip()
                if part == "amplint" or part.startswith("amplint "):
                    found.append(part)
    return found


def test_blocks_parse_as_their_language():
    assert {lang for lang, _ in BLOCKS} >= {"bash", "toml", "yaml", "json", "lua", "python", "console"}
    for text in blocks("yaml"):
        assert yaml.safe_load(text) is not None
    for text in blocks("toml"):
        tomllib.loads(text)
    for text in blocks("json"):
        json.loads(text)
    for text in blocks("python"):
        compile(text, "<README>", "exec")


@pytest.mark.parametrize("command", amplint_commands())
def test_every_amplint_command_is_accepted(command):
    argv = shlex.split(command)[1:]
    if argv[:1] in (["rule"], ["verify"], ["server"]):
        return
    if argv[:1] == ["check"]:
        argv = argv[1:]
    cli._check_parser().parse_args(argv)  # exits (SystemExit) on an unknown option


def test_the_commands_found_cover_the_ci_examples():
    commands = amplint_commands()
    assert "amplint fixtures/" in commands
    assert "amplint --output-format github ." in commands
    assert "amplint --output-format sarif -o amplint.sarif ." in commands
    assert "amplint --output-format gitlab -o gl-code-quality-report.json ." in commands


def test_the_configuration_example_loads(tmp_path):
    (example,) = [text for text in blocks("toml") if "[tool.amplint]" in text]
    (tmp_path / "pyproject.toml").write_text(example)
    config = load(str(tmp_path / "pyproject.toml"), str(tmp_path))
    assert config.ignore == ["AMP006"] and config.per_file_ignores == {"benchmarks/*.py": ["AMP002"]}


def test_installs_come_from_the_repository_until_a_release_exists():
    for line in README.splitlines():
        if "pip install" in line and "amplint" in line:
            assert "pip install amplint" not in line, line  # not on PyPI
    installs = [line for line in README.splitlines() if "pip install" in line and PUBLIC_REPO in line]
    assert len(installs) >= 5  # the three extras, the GitHub job twice, GitLab
    workflow = yaml.safe_load(next(text for text in blocks("yaml") if "codeql-action/upload-sarif" in text))
    steps = [step for job in workflow["jobs"].values() for step in job["steps"]]
    uses = {step["uses"].split("@")[0]: step["uses"].split("@")[1] for step in steps if "uses" in step}
    assert uses == {"actions/checkout": "v6", "actions/setup-python": "v6", "github/codeql-action/upload-sarif": "v4"}
    scanning = workflow["jobs"]["amplint-code-scanning"]["permissions"]
    # Private repositories: upload-sarif also reads the workflow run.
    assert scanning == {"contents": "read", "security-events": "write", "actions": "read"}


def test_the_pre_commit_rev_is_a_branch_that_exists():
    (snippet,) = [text for text in blocks("yaml") if "pre-commit-config" in text]
    (repo,) = yaml.safe_load(snippet)["repos"]
    assert repo["rev"] == "main"  # tags: none yet; test_precommit.py runs this snippet


def test_the_quick_start_output_is_the_real_output(amplint, tmp_path):
    (example,) = [text for text in blocks("console") if text.startswith("$ amplint train.py\n")]
    source = BUGGY.replace("optimizer", "opt")
    # The README's train.py has the clip on line 14: pad the script to put it there.
    (tmp_path / "train.py").write_text("\n" * 6 + source)
    result = amplint("train.py", cwd=tmp_path)
    assert result.stdout == example.split("\n", 1)[1]


def _anchors(markdown):
    """GitHub's heading anchors (lower case, punctuation dropped, spaces to dashes) and explicit ones."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.M)
    explicit = re.findall(r'<a id="([^"]+)"></a>', markdown)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings} | set(explicit)


@pytest.mark.parametrize("page", ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))])
def test_relative_links_resolve(page):
    """The README is the front door and the internals live in docs/: every relative link between
    them (and to rules/, fixtures/, bench/) names a file that exists and a heading it has."""
    source = REPO / page
    text = source.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (source.parent / path).resolve() if path else source
        assert linked.exists(), f"{page}: {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked.read_text()), f"{page}: {target}"
