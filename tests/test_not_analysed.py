"""A function amplint could not follow within the analysis limit is a result, in every format
(issue 21, item 1): never "All checks passed!" when something was left out, and never an exit
code of its own (the verdict is deterministic: amplint.work)."""

import json
import xml.etree.ElementTree as ET

import pytest

from conftest import BUGGY

# Ten flags each tested twice around AMP calls: 2**10 ways through that cannot be merged,
# more states than a function may have at one point (512), fewer than four times that.
BRANCHES = "\n".join(
    f"    if c{i}:\n        scaler.scale(l{i}).backward()\n    else:\n        l{i}.backward()\n"
    f"    if c{i}:\n        scaler.step(o{i})\n    else:\n        o{i}.step()"
    for i in range(10)
)
HARD = f"import torch\n\n\ndef train(scaler):\n{BRANCHES}\n"
TITLE = "train: too complex to follow within the analysis limit; not analysed"
MESSAGE = TITLE + " (raise it with --analysis-limit)"


@pytest.fixture
def root(project):
    return project({"hard.py": HARD})


def test_the_summary_never_says_all_checks_passed_when_a_function_was_skipped(amplint, root):
    result = amplint("--no-cache", "hard.py", cwd=root)
    assert result.returncode == 0  # reported, not failed: see cli.exit_status
    assert result.stdout.splitlines() == [
        f"note: {TITLE}",
        " --> hard.py:4:5",
        "help: raise the limit with `--analysis-limit FACTOR` (config: `analysis-limit`); it counts steps, the same on every machine",
        "",
        "No findings, but 1 function not analysed.",
    ]
    assert result.stderr == ""  # on standard output already: not twice on the terminal


def test_raising_the_limit_analyses_it(amplint, root):
    assert amplint("--no-cache", "--analysis-limit", "4", "hard.py", cwd=root).stdout == "All checks passed!\n"


def test_quiet_output_still_lists_it(amplint, root):
    result = amplint("--no-cache", "-q", "--concise", "hard.py", cwd=root)
    assert result.stdout == f"hard.py:4:5: note {MESSAGE}\n"


def test_it_is_counted_beside_findings_and_files_not_linted(amplint, project):
    root = project({"hard.py": HARD, "train.py": BUGGY, "broken.py": "x = torch.autocast(\n"})
    result = amplint("--no-cache", "--concise", ".", cwd=root)
    assert result.returncode == 2
    assert "Found 1 error; 1 function not analysed; 1 file could not be linted." in result.stdout.splitlines()


def test_json_and_json_lines(amplint, root):
    items = json.loads(amplint("--no-cache", "--output-format", "json", "hard.py", cwd=root).stdout)
    assert items == [
        {
            "cell": None,
            "cell_location": None,
            "code": None,
            "end_location": {"column": 5, "row": 4},
            "filename": str(root / "hard.py"),
            "fix": None,
            "help": "Raise it with --analysis-limit: a factor on the analysis' work limits.",
            "location": {"column": 5, "row": 4},
            "message": TITLE,
            "name": "function-not-analysed",
            "noqa_row": None,
            "severity": "info",
            "url": None,
        }
    ]
    lines = amplint("--no-cache", "--output-format", "json-lines", "hard.py", cwd=root)
    assert [json.loads(line) for line in lines.stdout.splitlines()] == items
    # A machine format on standard output: the terminal gets the note on standard error.
    assert lines.stderr == f"amplint: note: hard.py:4: {MESSAGE}\n"


def test_sarif_tool_execution_notification(amplint, root):
    document = json.loads(amplint("--no-cache", "--output-format", "sarif", "hard.py", cwd=root).stdout)
    (invocation,) = document["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is True and document["runs"][0]["results"] == []
    assert invocation["toolExecutionNotifications"] == [
        {
            "level": "note",
            "descriptor": {"id": "function-not-analysed"},
            "message": {"text": MESSAGE},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": "hard.py", "uriBaseId": "%SRCROOT%"},
                        "region": {"startLine": 4, "startColumn": 5},
                    }
                }
            ],
        }
    ]


def test_github_notice(amplint, root):
    result = amplint("--no-cache", "--output-format", "github", "hard.py", cwd=root)
    assert result.stdout == (
        f"::notice file=hard.py,line=4,title=amplint%3A function not analysed::hard.py:4: {MESSAGE}\n"
    )


def test_gitlab_info(amplint, root):
    (issue,) = json.loads(amplint("--no-cache", "--output-format", "gitlab", "hard.py", cwd=root).stdout)
    assert issue["check_name"] == "amplint/function-not-analysed" and issue["severity"] == "info"
    assert issue["location"] == {"path": "hard.py", "lines": {"begin": 4, "end": 4}}
    again = json.loads(amplint("--no-cache", "--output-format", "gitlab", "hard.py", cwd=root).stdout)
    assert again[0]["fingerprint"] == issue["fingerprint"]


def test_junit_skipped_testcase(amplint, root):
    tree = ET.fromstring(amplint("--no-cache", "--output-format", "junit", "hard.py", cwd=root).stdout)
    assert (tree.get("tests"), tree.get("failures"), tree.get("errors"), tree.get("skipped")) == ("1", "0", "0", "1")
    case = tree.find("testsuite/testcase")
    assert (case.get("name"), case.get("line")) == ("amplint.function-not-analysed", "4")
    assert case.find("skipped").get("message") == MESSAGE


def test_pylint_line(amplint, root):
    assert amplint("--no-cache", "--output-format", "pylint", "hard.py", cwd=root).stdout == f"hard.py:4: [amplint] {MESSAGE}\n"


def test_statistics_count_it(amplint, root):
    result = amplint("--no-cache", "--statistics", "hard.py", cwd=root)
    assert result.stdout == "1\t-\tfunctions too complex to analyse (skipped)\n"
    # JSON names it as every other format does.
    shown = json.loads(amplint("--no-cache", "--statistics", "--output-format", "json", "hard.py", cwd=root).stdout)
    assert [row["name"] for row in shown] == ["function-not-analysed"]


def test_a_notebook_function_is_located_in_its_cell_and_in_the_file(amplint, project):
    source = HARD.splitlines(keepends=True)
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    notebook = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": ["# notes"]}, cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    root = project({"hard.ipynb": json.dumps(notebook, indent=1)})
    concise = amplint("--no-cache", "-q", "--concise", "hard.ipynb", cwd=root)
    assert concise.stdout == f"hard.ipynb:cell 2:4:5: note {MESSAGE}\n"
    github = amplint("--no-cache", "--output-format", "github", "hard.ipynb", cwd=root).stdout
    line = int(github.split("line=")[1].split(",")[0])
    assert '"def train(scaler):\\n"' in (root / "hard.ipynb").read_text().splitlines()[line - 1]


def test_warm_cache_reports_it_the_same(amplint, root):
    cold = amplint("--output-format", "json", "hard.py", cwd=root)
    warm = amplint("--output-format", "json", "hard.py", cwd=root)
    assert (warm.returncode, warm.stdout) == (cold.returncode, cold.stdout)
    assert json.loads(warm.stdout)[0]["name"] == "function-not-analysed"
