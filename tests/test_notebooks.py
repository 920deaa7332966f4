"""Jupyter notebooks: code cells joined in order, IPython syntax neutralised, findings by cell."""

import json
import os
import textwrap

import pytest

from amplint.run.notebook import CellMap, CellSpan, parse_notebook, replace_sources

PYTHON_METADATA = {
    "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def cell(source, kind="code", as_string=False, **metadata):
    text = textwrap.dedent(source)
    lines = text.splitlines(keepends=True)
    made = {"cell_type": kind, "metadata": metadata, "source": text if as_string else lines}
    if kind == "code":
        made.update(execution_count=None, outputs=[])
    return made


def notebook(*cells, metadata=None, nbformat=4):
    document = {
        "cells": list(cells),
        "metadata": PYTHON_METADATA if metadata is None else metadata,
        "nbformat": nbformat,
        "nbformat_minor": 5,
    }
    # As Jupyter writes it (nbformat.write): one-space indent, UTF-8, keys sorted.
    return json.dumps(document, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


SETUP = cell(
    """\
    !pip install -q torch
    %matplotlib inline
    import torch
    scaler = torch.amp.GradScaler("cuda")
    """
)
LOOP = cell(
    """\
    %%time
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        %time torch.cuda.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
    """
)
TRAIN = notebook(
    cell("# Training\nRun `!nvidia-smi` first; 100% of the %time is here.\n", kind="markdown"),
    SETUP,
    cell("%%bash\nnvidia-smi | grep 'MiB'\nif [ -f x ]; then echo (; fi\n"),
    LOOP,
    cell(
        """\
        files = !ls checkpoints
        model?
        ?torch.autocast
        %timeit -n 10 \\
            model(x)
        notes = \"\"\"
        !this is text, not a shell escape
        %neither is this
        \"\"\"
        """
    ),
)
CLIP = "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------- joining and neutralising


def test_code_cells_are_joined_with_line_numbers_preserved():
    parsed = parse_notebook(TRAIN, "train.ipynb")
    assert parsed.python.splitlines() == [
        "pass",
        "pass",
        "import torch",
        'scaler = torch.amp.GradScaler("cuda")',
        "",  # %%time: its body below is Python
        "for x, y in loader:",
        '    with torch.autocast("cuda", dtype=torch.float16):',
        "        loss = loss_fn(model(x), y)",
        "    scaler.scale(loss).backward()",
        "    pass",
        "    " + CLIP,
        "    scaler.step(optimizer)",
        "    scaler.update()",
        "files = None",
        "pass",
        "pass",
        "pass",
        "",  # the `\`-continued line of a magic is part of it
        'notes = """',
        "!this is text, not a shell escape",
        "%neither is this",
        '"""',
    ]
    # What frames show is what the user wrote, row for row.
    assert parsed.display.splitlines()[9] == "    %time torch.cuda.synchronize()"
    assert len(parsed.display.splitlines()) == len(parsed.python.splitlines())
    # Cells as Jupyter numbers them: the markdown cell is 1, the %%bash cell 3 is not Python.
    assert parsed.cells == CellMap((CellSpan(2, 1, 4), CellSpan(4, 5, 13), CellSpan(5, 14, 22)))
    assert parsed.cells.locate(11) == (4, 7)
    compile(parsed.python, "train.ipynb", "exec")


@pytest.mark.parametrize(
    "first_line, linted",
    [("%%time", True), ("%%capture out", True), ("%%timeit -n 3 setup()", True), ("%%writefile train.py", False),
     ("%%bash", False), ("%%html", False), ("%%script python", False)],
)
def test_cell_magics(first_line, linted):
    body = "with torch.autocast('cuda'):\n    loss = model(x)\n"
    parsed = parse_notebook(notebook(cell(f"{first_line}\n{body}")), "n.ipynb")
    assert (body in parsed.python) is linted


def test_source_as_one_string_and_missing_final_newline():
    parsed = parse_notebook(notebook(cell("import torch\nx = 1", as_string=True), cell("y = 2")), "n.ipynb")
    assert parsed.python == "import torch\nx = 1\ny = 2\n"
    assert parsed.cells.locate(3) == (2, 1)


def test_cells_in_other_languages_are_left_out():
    parsed = parse_notebook(
        notebook(cell("SELECT 1 FROM t", vscode={"languageId": "sql"}), cell("x = 1", vscode={"languageId": "python"})),
        "n.ipynb",
    )
    assert parsed.python == "x = 1\n"
    r_kernel = {"kernelspec": {"language": "R", "name": "ir"}, "language_info": {"name": "R"}}
    assert parse_notebook(notebook(cell("library(torch)\n"), metadata=r_kernel), "n.ipynb") is None


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"cells": [', "invalid notebook: not valid JSON (line 1, column 12"),
        ("[]", "invalid notebook: not a Jupyter notebook"),
        ('{"worksheets": [], "nbformat": 3}', "invalid notebook: nbformat 3 is not supported"),
        ('{"cells": [], "nbformat": 5}', "invalid notebook: nbformat 5 is not supported"),
        ('{"cells": [{"cell_type": "code", "source": 3}], "nbformat": 4}', "invalid notebook: cell 1 has no `source`"),
        ('{"cells": ["x"], "nbformat": 4}', "invalid notebook: cell 1 is not a cell"),
        # Past the grammar, past the int conversion limit: a ValueError that is no JSONDecodeError.
        ('{"cells": [], "nbformat": %s}' % ("9" * 5000), "invalid notebook: not valid JSON (Exceeds the limit (4300 digits)"),
        ('{"cells": [], "nbformat": 4, "metadata": {"n": -%s}}' % ("1" * 4301), "invalid notebook: not valid JSON (Exceeds"),
    ],
)
def test_invalid_notebooks_are_file_errors(text, message):
    error = parse_notebook(text, "n.ipynb")
    assert error.path == "n.ipynb" and error.message.startswith(message), error


# --------------------------------------------------------------------------- the command


def test_text_output_names_the_cell_and_frames_the_cell(amplint, tmp_path):
    write(tmp_path, "train.ipynb", TRAIN)
    result = amplint("train.ipynb", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(f"AMP003 [*] `{CLIP}` clips gradients")
    frame = result.stdout.split("\n")[1:7]
    assert frame == [
        " --> train.ipynb:cell 4:7:5",
        "  |",
        "6 |     %time torch.cuda.synchronize()",
        f"7 |     {CLIP}",
        "  |     " + "^" * len(CLIP),
        "8 |     scaler.step(optimizer)",
    ]
    assert "Found 1 error." in result.stdout


def test_frame_stays_inside_the_cell(amplint, tmp_path):
    step = cell(
        """\
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)"""
    )
    # The finding is on the first row of cell 2 and the last row of cell 3: no neighbours shown.
    text = notebook(
        cell("import torch\nscaler = torch.amp.GradScaler()\nscaler.scale(loss).backward()\n"),
        cell("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"),
        cell("scaler.step(optimizer)\n"),
        step,
    )
    write(tmp_path, "n.ipynb", text)
    result = amplint("n.ipynb", cwd=tmp_path)
    blocks = result.stdout.split("\n\n")
    assert blocks[0].splitlines()[0].startswith("AMP003 ")
    assert blocks[0].splitlines()[1:6] == [" --> n.ipynb:cell 2:1:1", "  |", f"1 | {CLIP}", "  | " + "^" * len(CLIP), "  |"]
    assert blocks[1].splitlines()[1] == " --> n.ipynb:cell 4:2:1"
    assert blocks[1].splitlines()[3:6] == ["1 | scaler.scale(loss).backward()", f"2 | {CLIP}", "  | " + "^" * len(CLIP)]


def test_json_keeps_the_joined_row_and_adds_the_cell(amplint, tmp_path):
    write(tmp_path, "train.ipynb", TRAIN)
    (item,) = json.loads(amplint("--output-format", "json", "train.ipynb", cwd=tmp_path).stdout)
    assert item["filename"] == str(tmp_path / "train.ipynb")
    assert item["location"] == {"row": 11, "column": 5}
    assert item["end_location"] == {"row": 11, "column": 5 + len(CLIP)}
    assert item["noqa_row"] == 11
    assert item["cell"] == 4
    assert item["cell_location"] == {"row": 7, "column": 5}


def file_text_at(path, line, column, end_column):
    return path.read_text(encoding="utf-8").splitlines()[line - 1][column - 1 : end_column - 1]


def test_github_and_sarif_point_at_the_line_in_the_ipynb(amplint, tmp_path):
    path = write(tmp_path, "train.ipynb", TRAIN)
    github = amplint("--output-format", "github", "train.ipynb", cwd=tmp_path).stdout
    properties = dict(item.split("=") for item in github.split("::")[1][len("error ") :].split(","))
    assert properties["file"] == "train.ipynb"
    line, col, end = int(properties["line"]), int(properties["col"]), int(properties["endColumn"])
    assert file_text_at(path, line, col, end) == CLIP
    assert github.split("::")[2].startswith("train.ipynb:cell 4:7:5: AMP003")

    document = json.loads(amplint("--output-format", "sarif", "train.ipynb", cwd=tmp_path).stdout)
    (result,) = document["runs"][0]["results"]
    location = result["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "train.ipynb"
    region = location["region"]
    assert (region["startLine"], region["startColumn"], region["endColumn"]) == (line, col, end)
    assert result["message"]["text"].endswith("(cell 4, line 7)")
    assert result["properties"] == {"cell": 4, "cellLine": 7, "cellColumn": 5}


def test_file_position_accounts_for_json_escapes(amplint, tmp_path):
    # `"` and `é` before the call are written `\"` and `\u00e9` in an ASCII-only notebook,
    # and a one-string source puts every line on one JSON line.
    code = (
        'import torch\nscaler = torch.amp.GradScaler()\nscaler.scale(loss).backward()\n'
        'print("caf\u00e9"); ' + CLIP + "\n"
    )
    document = json.loads(notebook(cell(code, as_string=True)))
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(document, indent=1), encoding="utf-8")  # ensure_ascii=True
    github = amplint("--output-format", "github", "n.ipynb", cwd=tmp_path).stdout
    properties = dict(item.split("=") for item in github.split("::")[1][len("error ") :].split(","))
    line, col, end = int(properties["line"]), int(properties["col"]), int(properties["endColumn"])
    assert file_text_at(path, line, col, end) == CLIP
    assert file_text_at(path, line, col - 22, col) == 'print(\\"caf\\u00e9\\"); '


def test_noqa_inside_a_cell(amplint, tmp_path):
    suppressed = TRAIN.replace("1.0)\\n", "1.0)  # noqa: AMP003\\n", 1)
    assert suppressed != TRAIN
    write(tmp_path, "train.ipynb", suppressed)
    result = amplint("train.ipynb", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "All checks passed!\n"), result.stderr
    other_code = TRAIN.replace("1.0)\\n", "1.0)  # noqa: AMP001\\n", 1)
    write(tmp_path, "train.ipynb", other_code)
    assert amplint("train.ipynb", cwd=tmp_path).returncode == 1


def test_findings_across_cells_and_in_directories(amplint, tmp_path):
    # The scaler from cell 2 is the one that steps in cell 4; `.ipynb` files are found by walking.
    write(tmp_path, "nbs/train.ipynb", TRAIN)
    write(tmp_path, "nbs/.ipynb_checkpoints/train-checkpoint.ipynb", TRAIN)
    result = amplint("--concise", ".", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines()[0].startswith(os.path.join("nbs", "train.ipynb") + ":cell 4:7:5: AMP003")
    assert "checkpoint" not in result.stdout


def test_writefile_cells_are_not_linted(amplint, tmp_path):
    buggy = LOOP["source"][1:]
    write(tmp_path, "n.ipynb", notebook(SETUP, cell("%%writefile train.py\n" + "".join(buggy))))
    assert amplint("n.ipynb", cwd=tmp_path).returncode == 0
    write(tmp_path, "n.ipynb", notebook(SETUP, cell("".join(buggy))))
    assert amplint("n.ipynb", cwd=tmp_path).returncode == 1


def test_broken_notebooks_are_per_file_errors(amplint, tmp_path):
    write(tmp_path, "train.ipynb", TRAIN)
    write(tmp_path, "truncated.ipynb", TRAIN[: len(TRAIN) // 2])
    write(tmp_path, "old.ipynb", '{"worksheets": [], "nbformat": 3, "nbformat_minor": 0}')
    write(tmp_path, "syntax.ipynb", notebook(cell("x = 1\n"), cell("# Notes", kind="markdown"), cell("import torch\nwith torch.autocast('cuda'):\n    y = (\n")))
    write(tmp_path, "eof.ipynb", notebook(cell("import torch\n"), cell("with torch.autocast('cuda'):\n")))
    (tmp_path / "binary.ipynb").write_bytes(b"\xff\xfe\x00garbage")
    write(tmp_path, "big.ipynb", '{"cells": [], "nbformat": %s}' % ("9" * 5000))
    result = amplint("--concise", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert "train.ipynb:cell 4:7:5: AMP003" in result.stdout  # the good notebook is still linted
    assert "truncated.ipynb: invalid notebook: not valid JSON" in result.stderr
    assert "old.ipynb: invalid notebook: nbformat 3 is not supported" in result.stderr
    assert "syntax.ipynb: syntax error at cell 3:3:9: " in result.stderr
    assert "binary.ipynb: invalid notebook: not UTF-8" in result.stderr
    assert "big.ipynb: invalid notebook: not valid JSON (Exceeds the limit (4300 digits) for integer string conversion)" in result.stderr
    # CPython's "on line 2" would count rows of the joined cells.
    assert "eof.ipynb: syntax error at cell 2:1:" in result.stderr
    assert "expected an indented block after 'with' statement in cell 2 on line 1" in result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_a_syntax_error_in_json_says_its_cell(amplint, tmp_path):
    """As a finding does: `cell`, and `cell_location` within it; the same from the cache."""
    write(tmp_path, "syntax.ipynb", notebook(cell("x = 1\n"), cell("# Notes", kind="markdown"), cell("import torch\nwith torch.autocast('cuda'):\n    y = (\n")))
    for _ in range(2):  # linted, then read back from the cache
        result = amplint("--output-format", "json", "--cache-dir", str(tmp_path / "cache"), "syntax.ipynb", cwd=tmp_path)
        (item,) = json.loads(result.stdout)
        assert item["message"].startswith("syntax error at cell 3:3:9: ")
        assert (item["cell"], item["cell_location"], item["location"]) == (3, {"column": 9, "row": 3}, {"column": 9, "row": 4})


def test_a_lone_surrogate_in_a_cell_is_an_invalid_notebook(amplint, tmp_path):
    # JSON can escape half of a UTF-16 pair; json.loads hands back a str no encoder takes.
    write(tmp_path, "train.ipynb", TRAIN)
    write(tmp_path, "s.ipynb", notebook(SETUP, cell("x = 'PLACEHOLDER'\n")).replace("PLACEHOLDER", "\\ud800"))
    result = amplint("--concise", ".", cwd=tmp_path)
    assert result.returncode == 2
    assert "train.ipynb:cell 4:7:5: AMP003" in result.stdout
    assert "s.ipynb: invalid notebook: cell 2 contains a lone surrogate (\\ud800), which is not text" in result.stderr
    assert "internal error" not in result.stderr


def test_empty_and_non_python_notebooks_are_clean(amplint, tmp_path):
    write(tmp_path, "empty.ipynb", notebook())
    write(tmp_path, "r.ipynb", notebook(cell("x <- 1 %>% f()\n"), metadata={"language_info": {"name": "R"}}))
    result = amplint(".", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "All checks passed!\n"), result.stderr


def test_a_cell_pasted_with_its_indentation_is_dedented_as_ipython_does(amplint, tmp_path):
    # IPython runs a cell whose first line is indented as if dedented; columns stay as written.
    pasted = "".join("    " + line if line.strip() else line for line in textwrap.dedent(
        """\
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        """
    ).splitlines(keepends=True))
    path = write(
        tmp_path,
        "pasted.ipynb",
        notebook(cell("import torch\nscaler = torch.amp.GradScaler('cuda')\n"), {**cell(""), "source": pasted}),
    )
    result = amplint("--concise", "pasted.ipynb", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("pasted.ipynb:cell 2:2:5: AMP003")
    github = amplint("--output-format", "github", "pasted.ipynb", cwd=tmp_path).stdout
    properties = dict(item.split("=") for item in github.split("::")[1][len("error ") :].split(","))
    line, col, end = int(properties["line"]), int(properties["col"]), int(properties["endColumn"])
    assert file_text_at(path, line, col, end) == "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)"


@pytest.mark.parametrize(
    "source",
    [
        "res['gpu'] = !nvidia-smi\nx = 1\n",  # subscripted target of a shell capture
        "outs: list = !ls\nx = 1\n",  # annotated target
        "    for x in loader:\n# debug\n        y = model(x)\n",  # pasted indented, comment at column 0
        '    def f():\n        """Doc\ntext at column 0."""\n        return 1\n',  # docstring lines at column 0
    ],
)
def test_ipython_accepts_so_amplint_parses(source):
    parsed = parse_notebook(notebook(cell("import torch\n"), {**cell(""), "source": source}), "x.ipynb")
    compile(parsed.python, "x.ipynb", "exec")


# --------------------------------------------------------------------------- rewriting cells (--fix)

REWRITE_STYLES = {
    "compact": dict(separators=(",", ":"), ensure_ascii=False),
    "default": dict(ensure_ascii=False),
    "indent-1": dict(indent=1, ensure_ascii=False, sort_keys=True),
    "indent-4-ascii": dict(indent=4, sort_keys=True),
    "trailing-space": dict(indent=2, separators=(", ", ": "), ensure_ascii=False),
}


@pytest.mark.parametrize("style", REWRITE_STYLES.values(), ids=REWRITE_STYLES.keys())
@pytest.mark.parametrize(
    "old, new",
    [
        (["x = 1"], ["x = 1\n", "y = 'é'"]),  # a one-line list: the separator comes from the file
        (["a = 1\n", "b = 2"], ["a = 1\n", "c = '≥'\n", "b = 2"]),
        ("x = 1\n", "x = 'ü'\n"),
        (["x = 1\n", "y = 2"], []),
    ],
    ids=["one-item", "items", "string", "emptied"],
)
def test_replace_sources_writes_the_new_value_as_the_file_would(style, old, new):
    def document(source):
        return notebook(cell("é\n", kind="markdown"), cell("import torch\n"), {**cell("x\n"), "source": source})

    text = json.dumps(json.loads(document(old)), **style)
    if not style.get("ensure_ascii", True):
        assert not text.isascii()  # the markdown cell's "é": this file is written with characters
    expected = json.dumps(json.loads(document(new)), **style)
    assert replace_sources(text, {2: new}) == expected


def test_replace_sources_keeps_unchanged_lines_as_they_were_written():
    # Escapes json.dumps would not write (`\/`, upper-case hex) stay on the lines the fix kept.
    text = '{"cells": [{"cell_type": "code", "source": ["x = \\u00E9 \\/ 2\\n", "y = 1"]}], "nbformat": 4}'
    fixed = replace_sources(text, {0: ["x = \u00e9 / 2\n", "z = 3\n", "y = 1"]})
    assert fixed == '{"cells": [{"cell_type": "code", "source": ["x = \\u00E9 \\/ 2\\n", "z = 3\\n", "y = 1"]}], "nbformat": 4}'


def test_replace_sources_says_when_it_cannot_locate_the_value():
    text = notebook(cell("x = 1\n"))
    assert replace_sources(text, {3: ["x = 2\n"]}) is None  # no such cell
    assert replace_sources(text, {0: "x = 2\n"}) is None  # a list replaced by a string
    assert replace_sources(text[:-5], {0: ["x = 2\n"]}) is None  # not JSON
