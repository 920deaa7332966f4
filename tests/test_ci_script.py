""".ci/run installs system packages only in CI (CI=true), through .ci/system-packages: on a
developer's machine it leaves the system alone, and the tests that need a package skip."""

import os
import shutil
import subprocess

from conftest import REPO

HELPER = REPO / ".ci" / "system-packages"
MISSING = "amplint-test-no-such-command"


def run_helper(tmp_path, ci, root=True, debian=True):
    """The helper with a PATH of stand-ins: `apt-get` records its arguments, `id -u` says root."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    log = tmp_path / "apt-get.log"
    if debian:
        (bin_dir / "apt-get").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "id").write_text(f"#!/bin/sh\necho {0 if root else 1000}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    if ci is not None:
        env["CI"] = ci
    result = subprocess.run([shutil.which("bash"), str(HELPER), MISSING], env=env, capture_output=True, text=True, timeout=60)
    return result, log.read_text().splitlines() if log.exists() else []


def test_outside_ci_nothing_is_installed(tmp_path):
    for ci in (None, "", "false"):
        result, calls = run_helper(tmp_path, ci)
        assert (result.returncode, calls) == (0, []), result.stderr
        assert f"not installing {MISSING}" in result.stderr


def test_in_ci_what_is_missing_is_installed(tmp_path):
    result, calls = run_helper(tmp_path, "true")
    assert result.returncode == 0, result.stderr
    assert calls == ["update -qq", f"install -y -qq {MISSING}"]


def test_in_ci_a_machine_that_cannot_install_fails(tmp_path):
    for name, options in {"user": {"root": False}, "other-os": {"debian": False}}.items():
        (tmp_path / name).mkdir()
        result, calls = run_helper(tmp_path / name, "true", **options)
        assert result.returncode == 1 and calls == [], result.stderr
        assert "this machine is not Debian as root" in result.stderr


def test_what_is_there_is_not_installed_again(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / MISSING).write_text("#!/bin/sh\n")
    (bin_dir / MISSING).chmod(0o755)
    result, calls = run_helper(tmp_path, "true")
    assert (result.returncode, calls) == (0, [])


def test_ci_run_installs_system_packages_only_through_the_helper():
    script = (REPO / ".ci" / "run").read_text()
    commands = [line.split("#", 1)[0] for line in script.splitlines()]
    assert not any("apt-get" in line for line in commands), "apt-get only in .ci/system-packages, which checks CI"
    assert ".ci/system-packages chromium" in commands
    assert os.access(HELPER, os.X_OK)
