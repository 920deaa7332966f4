"""The child side of `amplint verify`: run one rule's fixture scripts, one after another.

Started as `python -m amplint.harness.driver SPEC`, where SPEC is a JSON list of
`{"label": "buggy.py (float16)", "script": PATH, "argv": [...]}`. Importing torch and
building the first optimizer (which imports `torch._dynamo`) costs about two seconds of CPU
in every fresh process; running a rule's buggy and fixed scripts in one process pays that
once per rule instead of once per script. Each script still runs as `__main__` with fresh
globals, its own argv and its own captured stdout, and an exception in one is reported for
that script alone. Before each script a line on stderr names it, so that when the parent
has to kill a hung process it can say which script hung.

Each finished script adds one JSON line to stdout, `{"label", "stdout", "error"}`, flushed at
once so that what finished before a hang still reaches the parent.
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from typing import Dict, List, Optional

STARTING = "amplint-verify: starting "


def run_one(script: str, argv: List[str]) -> Dict[str, Optional[str]]:
    captured = io.StringIO()
    saved_argv = sys.argv
    sys.argv = [script] + list(argv)
    error: Optional[str] = None
    try:
        with contextlib.redirect_stdout(captured):
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        if stop.code not in (None, 0):
            error = f"exited with {stop.code}"
    except Exception as exception:  # one broken script must not hide its twin's measurements
        message = str(exception).strip().splitlines()
        error = f"raised {type(exception).__name__}" + (f": {message[0]}" if message else "")
    finally:
        sys.argv = saved_argv
    return {"stdout": captured.getvalue(), "error": error}


def main(argv: List[str]) -> int:
    for run in json.loads(argv[0]):
        print(STARTING + run["label"], file=sys.stderr, flush=True)
        report = {"label": run["label"], **run_one(run["script"], run["argv"])}
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
