"""`--output-format github` and `sarif`: the CI gate's formats, end to end and against the spec."""

import json
from pathlib import Path

import jsonschema
import pytest

from amplint.lint.diagnostics import FileError, Finding, RunReport
from amplint.output import FORMATS
from amplint.rules import ALL_RULES
from conftest import BUGGY, REPO

# The official OASIS schema, kept in the repo so the tests do not depend on where shared/ is.
SCHEMA = json.loads((REPO / "tests" / "data" / "sarif-schema-2.1.0.json").read_text())

CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"
# The same mistake spread over three lines, with a `%` in the quoted code.
MULTILINE = BUGGY.replace(CLIP, "torch.nn.utils.clip_grad_norm_(\n        model.parameters(), 100 % 7\n    )")


def write(root: Path, files):
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def validate_sarif(document):
    # The schema declares draft-04; its `format: uri` checks run where a checker is installed.
    validator = jsonschema.Draft4Validator(SCHEMA, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


# --------------------------------------------------------------------------- github


def test_github_annotation_for_a_finding(amplint, tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    result = amplint("--output-format", "github", "train.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    head, message = lines[0].split("::", 2)[1:]
    assert head == "error file=train.py,line=8,col=5,endLine=8,endColumn=60,title=AMP003 (clip-before-unscale)"
    assert message.startswith(f"train.py:8:5: AMP003 `{CLIP}` clips gradients")
    assert "Found" not in result.stdout  # nothing but workflow commands on stdout


def test_github_multiline_finding_has_no_columns_and_escapes_percent(amplint, tmp_path):
    write(tmp_path, {"train.py": MULTILINE})
    result = amplint("--output-format", "github", "train.py", cwd=tmp_path)
    assert result.returncode == 1
    # GitHub accepts col/endColumn only on a one-line annotation.
    assert result.stdout.startswith("::error file=train.py,line=8,endLine=10,title=AMP003 (clip-before-unscale)::")
    assert "100 %25 7" in result.stdout and "100 % 7" not in result.stdout


def test_github_escapes_properties_and_data():
    finding = Finding(
        path="odd,name:v2.py", row=3, column=1, code="AMP001", message="50% of\r\nsteps", end_row=3, end_column=9,
        name="unscaled-backward",
    )
    text = FORMATS["github"](RunReport([finding], [FileError("x.ipynb", "bad: line 1,\ncolumn 2")], 2, {}))
    first, second = text.splitlines()
    assert first.startswith("::error file=odd%2Cname%3Av2.py,line=3,col=1,endLine=3,endColumn=9,title=AMP001 (unscaled-backward)::")
    # Line breaks in what the tree controls are shown as escapes (amplint.escape), so
    # no line of the log starts where the linted code says; the runner's own escaping applies on top.
    assert first.endswith("::odd,name:v2.py:3:1: AMP001 50%25 of\\r\\nsteps")
    assert second == "::error file=x.ipynb,line=1,title=amplint%3A file not linted::x.ipynb: bad: line 1,\\ncolumn 2"


def test_github_reports_files_that_could_not_be_linted(amplint, tmp_path):
    write(tmp_path, {"train.py": BUGGY, "broken.py": "with torch.autocast('cuda'):\n    x = (\n"})
    result = amplint("--output-format", "github", ".", cwd=tmp_path)
    assert result.returncode == 2
    # On the line of the syntax error, as the message says.
    assert "::error file=broken.py,line=2,col=9,title=amplint%3A file not linted::broken.py: syntax error at 2:9: " in result.stdout
    assert "::error file=train.py,line=8," in result.stdout  # the other file is still linted
    assert "broken.py: syntax error" in result.stderr


def test_github_paths_are_relative_to_the_workspace(amplint, tmp_path):
    # A job with `working-directory: ml` still annotates ml/train.py, from GITHUB_WORKSPACE.
    write(tmp_path, {"ml/train.py": BUGGY})
    result = amplint("--output-format", "github", "train.py", cwd=tmp_path / "ml", env={"GITHUB_WORKSPACE": str(tmp_path)})
    assert result.stdout.startswith("::error file=ml/train.py,line=8,")
    local = amplint("--output-format", "github", "train.py", cwd=tmp_path / "ml", env={"GITHUB_WORKSPACE": ""})
    assert local.stdout.startswith("::error file=train.py,line=8,")


def test_github_clean_run_prints_nothing(amplint, tmp_path):
    write(tmp_path, {"clean.py": "import torch\n"})
    result = amplint("--output-format", "github", ".", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "")


# --------------------------------------------------------------------------- sarif


def sarif(amplint, cwd, *args, env=None):
    result = amplint("--output-format", "sarif", *args, cwd=cwd, env=env)
    document = json.loads(result.stdout)
    validate_sarif(document)
    return result, document


def test_sarif_validates_and_describes_every_rule(amplint, tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    result, document = sarif(amplint, tmp_path, "train.py")
    assert result.returncode == 1
    assert document["version"] == "2.1.0"
    (run,) = document["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "amplint"
    assert driver["version"] and driver["informationUri"].startswith("https://")
    assert [rule["id"] for rule in driver["rules"]] == [rule.code for rule in ALL_RULES]
    for described, rule in zip(driver["rules"], ALL_RULES):
        assert described["name"] == rule.name
        assert described["shortDescription"]["text"] == rule.summary()
        assert described["fullDescription"]["text"].startswith("Flags ")
        assert described["help"]["markdown"] == rule.page()
        assert described["help"]["text"]
        assert described["helpUri"] == rule.url()


def test_sarif_result(amplint, tmp_path):
    write(tmp_path, {"src/train.py": BUGGY})
    _, document = sarif(amplint, tmp_path, "src")
    (run,) = document["runs"]
    (result,) = run["results"]
    assert result["ruleId"] == "AMP003"
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "AMP003"
    assert result["level"] == "error"
    assert result["message"]["text"].startswith(f"`{CLIP}` clips gradients")
    (location,) = result["locations"]
    artifact = location["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": "src/train.py", "uriBaseId": "%SRCROOT%"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"
    # 1-based, end column exclusive: columns 5..59 hold the 55-character call.
    assert location["physicalLocation"]["region"] == {"startLine": 8, "startColumn": 5, "endLine": 8, "endColumn": 60}
    assert run["invocations"] == [{"executionSuccessful": True, "toolExecutionNotifications": []}]


def test_sarif_multiline_region_and_encoded_uri(amplint, tmp_path):
    write(tmp_path, {"my runs/train.py": MULTILINE})
    _, document = sarif(amplint, tmp_path, ".")
    (result,) = document["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "my%20runs/train.py"
    assert location["region"] == {"startLine": 8, "startColumn": 5, "endLine": 10, "endColumn": 6}


@pytest.mark.parametrize("output_format", ["sarif", "json", "text", "github"])
def test_a_file_name_that_is_not_utf8_is_reported_in_every_format(tmp_path, output_format):
    import subprocess
    import sys

    (tmp_path / "good.py").write_text(BUGGY)
    with open(bytes(tmp_path / "bad") + b"\xff.py", "wb") as handle:
        handle.write(BUGGY.encode())
    result = subprocess.run(
        [sys.executable, "-m", "amplint", "--output-format", output_format, "."], cwd=tmp_path, capture_output=True
    )
    assert result.returncode == 1, result.stderr
    # Text formats and GitHub write the odd byte as an escape, JSON as a surrogate escape,
    # SARIF percent-encoded: the output is UTF-8 in every format.
    assert b"good.py" in result.stdout and (b"bad\\xff.py" in result.stdout or b"bad\\udcff.py" in result.stdout
                                            or b"bad%FF.py" in result.stdout)
    assert b"\xff" not in result.stdout
    result.stdout.decode("utf-8")
    if output_format == "sarif":
        document = json.loads(result.stdout)
        validate_sarif(document)
        uris = sorted(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in document["runs"][0]["results"])
        assert uris == ["bad%FF.py", "good.py"]  # the name's own bytes, percent-encoded


def test_sarif_files_not_linted_are_notifications(amplint, tmp_path):
    write(tmp_path, {"train.py": BUGGY, "broken.py": "def f(:\n    torch.autocast\n"})
    result, document = sarif(amplint, tmp_path, ".")
    assert result.returncode == 2
    (invocation,) = document["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    (note,) = invocation["toolExecutionNotifications"]
    assert note["level"] == "error"
    assert note["message"]["text"].startswith("syntax error at 1:7")
    assert note["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "broken.py"
    assert len(document["runs"][0]["results"]) == 1


def test_sarif_clean_run_is_valid_and_empty(amplint, tmp_path):
    write(tmp_path, {"clean.py": "import torch\n"})
    result, document = sarif(amplint, tmp_path, ".")
    assert result.returncode == 0
    assert document["runs"][0]["results"] == []


def test_sarif_uses_the_workspace_root_and_absolute_uris_outside_it(amplint, tmp_path):
    write(tmp_path, {"repo/ml/train.py": BUGGY, "elsewhere/train.py": BUGGY})
    env = {"GITHUB_WORKSPACE": str(tmp_path / "repo")}
    _, document = sarif(amplint, tmp_path / "repo" / "ml", "train.py", str(tmp_path / "elsewhere"), env=env)
    run = document["runs"][0]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == (tmp_path / "repo").resolve().as_uri() + "/"
    artifacts = sorted(r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in run["results"])
    assert artifacts == sorted(["ml/train.py", (tmp_path / "elsewhere" / "train.py").resolve().as_uri()])


def test_schema_validation_is_real():
    # A region starting at line 0 breaks the spec; the validator must say so.
    finding = Finding(path="train.py", row=8, column=5, code="AMP003", message="m", end_row=8, end_column=60)
    document = json.loads(FORMATS["sarif"](RunReport([finding], [], 1, {})))
    validate_sarif(document)
    document["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    with pytest.raises(AssertionError):
        validate_sarif(document)
    del document["version"]
    with pytest.raises(AssertionError):
        validate_sarif(document)


# --------------------------------------------------------------------------- json / registry


def test_json_cell_fields_are_null_for_python_files(amplint, tmp_path):
    write(tmp_path, {"train.py": BUGGY})
    (item,) = json.loads(amplint("--output-format", "json", "train.py", cwd=tmp_path).stdout)
    assert item["cell"] is None and item["cell_location"] is None
    assert item["location"] == {"row": 8, "column": 5}


def test_every_format_is_offered(amplint):
    usage = amplint("--help").stdout
    for name in ("full", "concise", "json", "json-lines", "junit", "github", "gitlab", "pylint", "sarif"):
        assert name in FORMATS
        assert name in usage
