"""The reproducers of the fourth reliability round (shared/reports/reliability-2026-12-06.md),
each kept as it was reported, with what it must do now: no repository, editor or
configuration hangs, stalls or flips a run (issue 42)."""

import contextlib
import glob
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from amplint.config.torch_target import declared_torch

from conftest import BUGGY, run_amplint

AMPLINT = [sys.executable, "-m", "amplint"]
WAIT = 120  # seconds: far beyond a run on a loaded machine; a hang is what runs past it


def project(root, requirements):
    root.mkdir(exist_ok=True)
    (root / "train.py").write_text(BUGGY)
    (root / "requirements.txt").write_bytes(requirements)
    return root


def run(root, *args, stdin=subprocess.DEVNULL, memory=None):
    """`amplint ARGS` in `root` as its own process; with `memory`, under that address-space
    limit (what the report's `ulimit -v` did)."""

    def limit():
        if memory is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    process = subprocess.Popen([*AMPLINT, *args], cwd=root, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    try:
        stdout, stderr = process.communicate(timeout=WAIT)
    finally:
        process.kill()
    return process.returncode, stdout, stderr


# --------------------------------------------------------------------------- N1


def test_n1_an_include_of_standard_input_does_not_block(tmp_path):
    root = project(tmp_path / "p", b"torch>=1.13\n-r /dev/stdin\n")
    reader, writer = os.pipe()  # `sleep 60 | amplint check .`: input that never comes
    try:
        code, stdout, stderr = run(root, "check", ".", "--no-cache", stdin=reader)
    finally:
        os.close(reader)
        os.close(writer)
    assert code == 1 and "AMP003" in stdout, stderr
    assert "amplint: note: not reading '/dev/stdin' (an include) for the project's torch requirement: not a regular file (a FIFO)" in stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_n1_an_included_fifo_does_not_block(tmp_path):
    root = project(tmp_path / "p", b"-r fifo.txt\n")
    os.mkfifo(root / "fifo.txt")
    code, stdout, stderr = run(root, "check", ".", "--no-cache")
    assert code == 1 and "AMP003" in stdout, stderr
    assert "not reading 'fifo.txt' (an include) for the project's torch requirement: not a regular file (a FIFO)" in stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_n1_an_include_of_dev_zero_is_not_read(tmp_path):
    root = project(tmp_path / "p", b"torch>=1.13\n-r /dev/zero\n")
    code, stdout, stderr = run(root, "check", ".", "--no-cache", "-j1", memory=1536 * 2**20)
    assert code == 1 and "AMP003" in stdout, stderr
    assert "not reading '/dev/zero' (an include) for the project's torch requirement: not a regular file (a character device)" in stderr


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero")
def test_n1_a_setup_py_linked_to_dev_zero_is_not_read(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    (root / "train.py").write_text(BUGGY)
    (root / "pyproject.toml").write_text('[project]\nname="x"\ndependencies=["torch>=2.0,<2.5"]\n')
    os.symlink("/dev/zero", root / "setup.py")
    code, stdout, stderr = run(root, "check", "train.py", "--no-cache", "-j1", memory=1536 * 2**20)
    assert code == 1 and "AMP003" in stdout, stderr
    assert "not reading setup.py for the project's torch requirement: not a regular file (a character device)" in stderr


def test_n1_a_nul_in_an_include_is_a_note_not_an_internal_error(tmp_path):
    root = project(tmp_path / "p", b"torch>=1.13\n-r a\0b\n")
    result = run_amplint("check", ".", "--no-cache", cwd=root)
    assert result.returncode == 1 and "internal error" not in result.stderr, result.stderr
    assert "not reading requirements.txt for the project's torch requirement: binary file (contains NUL bytes), not text" in result.stderr


def test_n1_what_can_be_read_still_declares_the_target(tmp_path):
    root = project(tmp_path / "p", b"torch>=1.13\n-r gone.txt\n-r more.txt\n")
    (root / "more.txt").write_bytes(b"-r " + str(root).encode() + b"/\0x\n")
    notes = []
    declared = declared_torch(str(root), notes)
    assert (declared.version, declared.where) == ((1, 13), "requirements.txt: torch>=1.13")
    assert notes == [
        "not reading 'gone.txt' (an include) for the project's torch requirement: cannot read file: No such file or directory",
        "not reading 'more.txt' (an include) for the project's torch requirement: binary file (contains NUL bytes), not text",
    ]


# --------------------------------------------------------------------------- N5 and O1, O5


def test_n5_a_nul_in_cache_dir_is_a_usage_error(amplint, tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\ncache-dir = "a\\u0000b"\n')
    result = amplint("check", ".", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, f"amplint: error: {tmp_path}/pyproject.toml: `cache-dir` contains a NUL character\n")
    (tmp_path / "pyproject.toml").unlink()
    result = amplint("check", ".", "--config", 'cache-dir = "x\\u0000"', cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.endswith(": `cache-dir` contains a NUL character\n"), result.stderr


@pytest.mark.parametrize("key, value", [("extend-exclude", '["a\\u0000"]'), ("per-file-ignores", '{"a\\u0000" = ["AMP003"]}'), ("output-format", '"full\\u0000"')])
def test_n5_a_nul_in_any_value_is_a_usage_error(amplint, tmp_path, key, value):
    (tmp_path / "train.py").write_text(BUGGY)
    result = amplint("check", ".", "--config", f"{key} = {value}", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.endswith(f": `{key}` contains a NUL character\n"), result.stderr


def test_n5_an_analysis_limit_too_large_for_a_count_is_a_usage_error(amplint, tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    result = amplint("check", ".", "--analysis-limit", "1e308", cwd=tmp_path)
    assert result.returncode == 2 and "argument --analysis-limit: not a positive factor of at most 1000: '1e308'" in result.stderr
    result = amplint("check", ".", "--config", "analysis-limit = 1e308", cwd=tmp_path)
    assert result.returncode == 2 and "analysis-limit must be a positive number (a factor on the default limits) of at most 1000, not 1e+308" in result.stderr
    assert amplint("check", ".", "-q", "--no-cache", "--analysis-limit", "1000", cwd=tmp_path).returncode == 1


def test_o1_the_configured_jobs_are_at_most_one_per_cpu(amplint, tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\njobs = 5000\n")
    shown = amplint("--show-settings", ".", cwd=tmp_path).stdout
    assert f"jobs = {os.cpu_count()}\n" in shown
    # The command line is the user's own: as many as asked for.
    assert "jobs = 40\n" in amplint("--show-settings", "-j", "40", ".", cwd=tmp_path).stdout
    result = amplint("-j", "-1", ".", cwd=tmp_path)
    assert result.returncode == 2 and "argument -j/--jobs: not a whole number: '-1'" in result.stderr


def test_o5_an_empty_selection_on_the_command_line_names_no_file(amplint, tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    result = amplint("--config", "select = []", ".", cwd=tmp_path)
    assert result.returncode == 2 and "None" not in result.stderr and "--config: `select` names no rule" in result.stderr, result.stderr


# --------------------------------------------------------------------------- the language server


class Client:
    """The report's client (lspc.py): `amplint server` over pipes, every message it writes
    kept in the order it came."""

    def __init__(self, cwd):
        self.process = subprocess.Popen([*AMPLINT, "server"], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages = []
        self.condition = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        self.ids = 0
        self.held = None  # frames written together at the end of `together()`

    @contextlib.contextmanager
    def together(self):
        """The messages sent inside arrive in one write (the server reads them back to back)."""
        self.held = []
        try:
            yield
        finally:
            held, self.held = self.held, None
            self.send_raw(b"".join(held))

    def _read(self):
        while True:
            length = None
            while True:
                line = self.process.stdout.readline()
                if not line:
                    return
                if not line.strip():
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            message = json.loads(self.process.stdout.read(length))
            with self.condition:
                self.messages.append(message)
                self.condition.notify_all()

    def send_raw(self, data):
        if self.held is not None:
            self.held.append(data)
            return
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send(self, message):
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.send_raw(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def request(self, method, params):
        self.ids += 1
        self.send({"id": self.ids, "method": method, "params": params})
        return self.ids

    def wait(self, predicate, what, timeout=WAIT):
        """The first message (in arrival order) that `predicate` accepts."""
        with self.condition:
            found = self.condition.wait_for(lambda: next((m for m in self.messages if predicate(m)), None), timeout)
        assert found is not None, f"{what}: nothing in {timeout} s; the server wrote {self.messages[-3:]}"
        return found

    def place(self, predicate):
        """Where the first message `predicate` accepts came, in arrival order (None: not yet)."""
        with self.condition:
            return next((i for i, m in enumerate(self.messages) if predicate(m)), None)

    def initialize(self, capabilities=None):
        ident = self.request("initialize", {"processId": None, "rootUri": None, "capabilities": capabilities or {}})
        answer = self.wait(answer_to(ident), "initialize")
        self.send({"method": "initialized", "params": {}})
        return answer

    def open(self, path, version=1):
        uri = path.as_uri()
        self.send({"method": "textDocument/didOpen", "params": {"textDocument": {"uri": uri, "languageId": "python", "version": version, "text": path.read_text()}}})
        return uri

    def fix_all(self, uri):
        zero = {"line": 0, "character": 0}
        return self.request(
            "textDocument/codeAction",
            {"textDocument": {"uri": uri}, "range": {"start": zero, "end": zero}, "context": {"diagnostics": [], "only": ["source.fixAll"]}},
        )

    def close(self):
        self.process.kill()
        self.process.wait()
        self.process.stdin.close()
        self.process.stdout.close()
        self.process.stderr.close()


def answer_to(ident):
    return lambda m: m.get("id") == ident and "method" not in m


def published(uri, version=None):
    return lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri and (version is None or m["params"].get("version") == version)


@pytest.fixture
def client(tmp_path):
    clients = []

    def start(cwd=tmp_path):
        clients.append(Client(cwd))
        return clients[-1]

    yield start
    for each in clients:
        each.close()


HEAVY = "import torch\n" + "".join(f"a{i} = torch.cuda.amp.autocast()\n" for i in range(600))


def test_n2_two_fix_alls_of_a_heavy_document_leave_a_lane_for_the_others(client, tmp_path):
    (tmp_path / "heavy.py").write_text(HEAVY)
    (tmp_path / "small.py").write_text(BUGGY)
    server = client()
    server.initialize()
    heavy = server.open(tmp_path / "heavy.py")
    server.wait(published(heavy), "heavy.py's diagnostics")
    with server.together():
        first, second = server.fix_all(heavy), server.fix_all(heavy)
    # The first is superseded by the second (answered at once, with nothing).
    assert server.wait(answer_to(first), "the first fixAll")["result"] is None
    small = server.open(tmp_path / "small.py")
    server.wait(published(small), "small.py's diagnostics")
    server.wait(answer_to(second), "the second fixAll")
    assert server.place(published(small)) < server.place(answer_to(second))


def test_n2_a_change_stops_the_fix_all_of_the_version_before(client, tmp_path):
    (tmp_path / "heavy.py").write_text(HEAVY)
    server = client()
    server.initialize()
    heavy = server.open(tmp_path / "heavy.py")
    server.wait(published(heavy), "heavy.py's diagnostics")
    with server.together():
        fixing = server.fix_all(heavy)
        server.send({"method": "textDocument/didChange", "params": {"textDocument": {"uri": heavy, "version": 2}, "contentChanges": [{"text": HEAVY + "# edited\n"}]}})
    assert server.wait(answer_to(fixing), "the fixAll")["result"] is None
    server.wait(published(heavy, 2), "the new version's diagnostics")
    assert server.place(answer_to(fixing)) < server.place(published(heavy, 2))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_n1_a_project_with_a_fifo_include_blocks_no_lane(client, tmp_path):
    root = project(tmp_path / "p", b"-r fifo.txt\n")
    os.mkfifo(root / "fifo.txt")
    (root / "other.py").write_text(BUGGY)
    (tmp_path / "small.py").write_text(BUGGY)
    server = client()
    server.initialize()
    train, other = server.open(root / "train.py"), server.open(root / "other.py")
    small = server.open(tmp_path / "small.py")
    for uri in (train, other, small):
        assert len(server.wait(published(uri), uri)["params"]["diagnostics"]) == 1


@pytest.mark.parametrize(
    "frame",
    [
        b"Content-Length: 99999999999999\r\n\r\n{}",  # MemoryError: the server ended
        b"Content-Length: 999999999999999999999999999\r\n\r\n{}",  # OverflowError
        b"Content-Type: application/vscode-jsonrpc\r\n\r\n{}",  # no length: out of step
        b"Content-Length: twelve\r\n\r\n{}",
    ],
)
def test_n6_a_frame_that_cannot_be_taken_is_skipped_and_the_server_goes_on(client, frame):
    server = client()
    server.send_raw(frame)
    assert "capabilities" in server.initialize()["result"]
    ident = server.request("shutdown", None)
    server.wait(answer_to(ident), "shutdown")
    assert server.process.poll() is None


def test_n6_the_report_s_frame_ends_nothing_but_the_stream():
    done = subprocess.run([*AMPLINT, "server"], input=b"Content-Length: 99999999999999\r\n\r\n{}", capture_output=True, timeout=WAIT)
    assert done.returncode == 0 and b"internal error" not in done.stderr
    assert b"a message skipped: Content-Length b'99999999999999' is not a length up to" in done.stderr


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="finds the workers in Linux's /proc")
def test_o2_the_workers_end_with_a_killed_server(client, tmp_path):
    (tmp_path / "train.py").write_text(BUGGY)
    server = client()
    server.initialize()
    server.wait(published(server.open(tmp_path / "train.py")), "diagnostics")
    workers = [int(pid) for path in glob.glob(f"/proc/{server.process.pid}/task/*/children") for pid in open(path).read().split()]
    assert workers, "the lint ran in no worker"
    server.process.kill()  # an editor's hard restart: no EOF, no shutdown
    server.process.wait()
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{pid}") and _state(pid) != "Z" for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [pid for pid in workers if os.path.exists(f"/proc/{pid}") and _state(pid) != "Z"] == []


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


# --------------------------------------------------------------------------- O3


def test_o3_watch_sees_a_new_file_in_a_directory_without_a_linted_file(tmp_path):
    (tmp_path / "w" / "pkg").mkdir(parents=True)
    (tmp_path / "w" / "clean.py").write_text("x = 1\n")
    process = subprocess.Popen(
        [*AMPLINT, "--watch", "--watch-runs", "2", "--concise", "--no-cache", "w"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        seen = ""
        while "watching for file changes" not in seen:
            line = process.stdout.readline()
            assert line, seen
            seen += line
        assert "All checks passed!" in seen
        (tmp_path / "w" / "pkg" / "new.py").write_text(BUGGY)
        rest = process.communicate(timeout=WAIT)[0]
        assert "file change detected" in rest and "pkg/new.py:8:5: AMP003" in rest
    finally:
        process.kill()
        process.wait()
