"""The README stays short, true and copy-pasteable, and every command in it is run by a test:

- its two opening commands by CI: `.ci/run` runs them as they are written (checked here);
- its install commands by tests/test_packaging.py, against the built wheel;
- every `amplint ...` command of its console, bash and YAML blocks here, for real, in a
  project holding the files they name; the capture of a finding is the command's real output;
- the workflows it shows are valid GitHub workflows (GitHub's schema), the configuration
  example is one amplint loads, the pre-commit snippet is run by tests/test_precommit.py and
  the Neovim set-up by tests/test_editors.py.
"""

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from amplint import cli
from amplint.config.options import load
from conftest import BUGGY, REPO

README = (REPO / "README.md").read_text()
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", README, flags=re.S | re.M)
OPENING = ["pip install . && amplint fixtures/", "pip install torch==2.13.0 -e '.[test,harness]' && python -m pytest"]


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


def test_it_is_short():
    assert len(README.splitlines()) <= 200


def test_blocks_parse_as_their_language():
    assert {lang for lang, _ in BLOCKS} >= {"bash", "toml", "yaml", "lua", "python", "console"}
    for text in blocks("yaml"):
        assert yaml.safe_load(text) is not None
    for text in blocks("toml"):
        tomllib.loads(text)
    for text in blocks("python"):
        compile(text, "<README>", "exec")


def test_it_opens_with_the_two_commands_that_set_everything_up():
    first = blocks("bash")[0]
    assert [line.split("  #", 1)[0].strip() for line in first.splitlines()] == OPENING
    assert README.index(first) < README.index("\n## ")


def test_ci_runs_the_opening_commands_as_written():
    """CI calls exactly the commands the README names: the test command, then the first."""
    script = (REPO / ".ci" / "run").read_text()
    test_command = [line for line in script.splitlines() if line.strip() == OPENING[1]]
    first_command = [line for line in script.splitlines() if f"({OPENING[0]})" in line]
    assert test_command and first_command
    assert script.index(OPENING[1]) < script.index(f"({OPENING[0]})")
    assert "contributing" in README.lower() and "docs/development.md" in README  # where the test command is explained
    assert OPENING[1] in (REPO / "docs" / "development.md").read_text()


def test_every_shell_command_has_a_runner():
    """The bash blocks hold the opening commands (run by .ci/run) and the install commands
    (run by test_packaging.py) and nothing else: a new command needs a test that runs it."""
    from test_packaging import readme_install_commands

    lines = [line.split("  #", 1)[0].strip() for text in blocks("bash") for line in text.splitlines() if line.strip()]
    assert sorted(lines) == sorted(OPENING + readme_install_commands())


# --------------------------------------------------------------------------- amplint commands, run


@pytest.fixture
def user_project(tmp_path):
    """A project with what the README's commands name: a train.py, the fixture it shows."""
    shutil.copytree(REPO / "fixtures" / "AMP003", tmp_path / "fixtures" / "AMP003", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.py").write_text(BUGGY)
    return tmp_path


@pytest.mark.parametrize("command", sorted(set(amplint_commands())))
def test_every_amplint_command_runs(amplint, user_project, command):
    argv = shlex.split(command)[1:]
    if argv[:1] in (["rule"], ["verify"], ["server"]):
        assert argv[:1] == ["rule"], command  # verify and server are run by their own tests
        result = amplint(*argv, cwd=user_project)
        assert result.returncode == 0 and result.stdout.startswith(f"# {argv[1]} "), result.stdout[:200]
        return
    cli._check_parser().parse_args(argv[1:] if argv[:1] == ["check"] else argv)  # exits on an unknown option
    result = amplint(*argv, cwd=user_project, env={"AMPLINT_CACHE_DIR": str(user_project / ".cache")})
    assert result.returncode in (0, 1), f"{command}: {result.returncode}\n{result.stderr}"


def test_the_commands_found_cover_the_ci_examples():
    commands = amplint_commands()
    assert "amplint fixtures/" in commands
    assert "amplint --output-format github ." in commands
    assert "amplint --output-format sarif -o amplint.sarif --exit-zero ." in commands


def test_the_capture_of_a_finding_is_the_real_output(amplint, tmp_path):
    (example,) = [text for text in blocks("console") if text.startswith("$ amplint fixtures/")]
    command, expected = example.split("\n", 1)
    result = amplint(*shlex.split(command)[2:], cwd=REPO, env={"AMPLINT_CACHE_DIR": str(tmp_path)})
    assert result.stdout == expected, f"regenerate the README's capture: {command[2:]}\n{result.stdout}"
    assert re.search(r"^AMP\d{3} \[\*\] ", result.stdout, flags=re.M)  # a finding, with its fix


def test_the_stated_defaults_are_the_commands():
    budget = re.search(r"`--file-budget SECONDS`, default (\d+)", README)
    assert budget and float(budget.group(1)) == cli.DEFAULT_BUDGET


# --------------------------------------------------------------------------- configuration


def test_the_configuration_example_loads_and_keeps_the_fixes_safe(amplint, tmp_path):
    """The example's target-torch-version keeps AMP014's fix safe: a lower one (1.13) would
    silently make it unsafe, so that --fix would no longer apply it."""
    (example,) = [text for text in blocks("toml") if "[tool.amplint]" in text]
    (tmp_path / "pyproject.toml").write_text(example)
    config = load(str(tmp_path / "pyproject.toml"), str(tmp_path))
    assert config.ignore == ["AMP006"] and config.per_file_ignores == {"benchmarks/*.py": ["AMP002"]}
    (tmp_path / "old.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    result = amplint("--no-cache", "--output-format", "json", "old.py", cwd=tmp_path)
    (finding,) = json.loads(result.stdout)
    assert (finding["code"], finding["fix"]["applicability"]) == ("AMP014", "safe")


# --------------------------------------------------------------------------- CI


def workflows():
    """The README's GitHub workflow, and its code-scanning variant: the same job ending with the
    two steps the README gives instead of the gate's, with `security-events: write` (as text:
    PyYAML would write the `on` key back as `true`)."""
    gate, steps = [text for text in blocks("yaml") if "amplint --output-format" in text and "gitlab" not in text]
    last = gate.rstrip("\n").rsplit("\n", 1)[1]
    assert "amplint --output-format github" in last
    scanning = gate.replace(last + "\n", steps).replace("permissions: {contents: read}", "permissions: {contents: read, security-events: write}")
    assert "security-events: write" in scanning and "--exit-zero" in scanning
    return {"gate": gate, "scanning": scanning}


def test_the_workflows_are_valid_github_workflows(tmp_path):
    for name, text in workflows().items():
        (tmp_path / f"{name}.yml").write_text(text)
    checked = subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows", tmp_path / "gate.yml", tmp_path / "scanning.yml"],
        capture_output=True, text=True, timeout=120,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_workflows_fail_a_pull_request_once_and_cache_pip():
    texts = workflows()
    gate, scanning = (yaml.safe_load(texts[name]) for name in ("gate", "scanning"))
    (job,) = gate["jobs"].values()
    setup = next(step for step in job["steps"] if step.get("uses", "").startswith("actions/setup-python@"))
    # pip's cache is keyed on the workflow itself, which pins amplint's version.
    path = re.match(r"# (\S+)", texts["gate"]).group(1)
    assert setup["with"]["cache"] == "pip" and setup["with"]["cache-dependency-path"] == path
    (scanning_job,) = scanning["jobs"].values()
    runs = [step["run"] for step in scanning_job["steps"] if "run" in step and step["run"].startswith("amplint")]
    # Code scanning is the gate: the SARIF step exits 0 on findings (the README's advice).
    assert runs == ["amplint --output-format sarif -o amplint.sarif --exit-zero ."]
    uses = {step["uses"].split("@")[0]: step["uses"].split("@")[1] for step in scanning_job["steps"] if "uses" in step}
    assert uses == {"actions/checkout": "v6", "actions/setup-python": "v6", "github/codeql-action/upload-sarif": "v4"}


def _anchors(markdown):
    """GitHub's heading anchors (lower case, punctuation dropped, spaces to dashes) and explicit ones."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.M)
    explicit = re.findall(r'<a id="([^"]+)"></a>', markdown)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings} | set(explicit)


@pytest.mark.parametrize("page", ["README.md", "CHANGELOG.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))])
def test_relative_links_resolve(page):
    """The README is the front door and the internals live in docs/: every relative link between
    them (and to rules/, fixtures/, editors/, bench/) names a file that exists and a heading it has."""
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
