"""Platforms without running the emulator: the registry, --platform values, targets that are not
there or half-built, QEMU that is too old, and no tool to build a sysroot: each a clear message."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import pytest
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.errors import PlatformError, UsageError
from deploykit.platforms import PLATFORMS, EmulatedPlatform, get_platform, parse_platforms
from deploykit.platforms.emulated import LOCK_NAME
from deploykit.platforms.qemu import find_qemu
from tests.assets.catalog import conv_bn_act
from tests.assets.paths import REPO
from tests.platforms.conftest import old_qemu

runner = CliRunner()
HOLDER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from deploykit.io import file_lock
    with file_lock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(1.5)  # an add that did not wait would fail now, before the mark
        Path(sys.argv[2]).write_text("released")
    """
)


def unboxed(text: str) -> str:
    """click's usage error as one line (rich draws it in a box, wrapped)."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


@pytest.fixture
def empty_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("DEPLOYKIT_QEMU_AARCH64", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def conv(tmp_path) -> Path:
    path = tmp_path / "conv.onnx"
    onnx.save(conv_bn_act(), path)
    return path


def test_the_registry_has_the_host_and_both_emulated_targets_through_one_class():
    assert list(PLATFORMS) == ["host", "linux/arm64", "linux/riscv64"]
    assert not PLATFORMS["host"].emulated
    assert all(isinstance(PLATFORMS[n], EmulatedPlatform) for n in ("linux/arm64", "linux/riscv64"))
    assert [p.name for p in parse_platforms("host, linux/arm64,host")] == ["host", "linux/arm64"]
    assert [p.name for p in parse_platforms(None)] == ["host"]
    other = get_platform("linux/arm64:cortex-a72")
    assert isinstance(other, EmulatedPlatform) and other.cpu == "cortex-a72"
    assert other.folder() == PLATFORMS["linux/arm64"].folder()  # one target, any emulated CPU


def test_an_unknown_platform_is_a_usage_error_listing_the_known_ones(conv):
    with pytest.raises(UsageError, match=r"platform 'linux/amd64' \| is not a known platform; expected one of host, "
                                         r"linux/arm64, linux/riscv64"):  # fmt: skip
        get_platform("linux/amd64")
    result = runner.invoke(app, ["compare", str(conv), "-b", "ort", "--platform", "host,linux/sparc"])
    assert result.exit_code == 2, result.output
    message = unboxed(result.output)
    assert (
        "platform 'linux/sparc' | is not a known platform; expected one of host, linux/arm64, linux/riscv64" in message
    )
    assert "Traceback" not in result.output
    result = runner.invoke(app, ["platforms", "add", "host"])
    assert result.exit_code == 2 and "platform 'host' | is this machine: nothing to prepare" in result.stderr


def test_a_target_never_added_names_the_command_that_prepares_it(empty_cache, conv):
    result = runner.invoke(app, ["compare", str(conv), "-b", "ort", "--platform", "linux/arm64"])
    assert result.exit_code == 1, result.output
    assert "error: platform 'linux/arm64' | was never prepared" in result.stderr
    assert "Hint: deploykit platforms add linux/arm64" in result.stderr and "Traceback" not in result.output


def test_a_half_built_target_is_detected_and_listed(empty_cache, conv):
    """An interrupted add leaves folders without the manifest (written last)."""
    (empty_cache / "platforms" / "linux-arm64" / "sysroot.partial" / "usr").mkdir(parents=True)
    result = runner.invoke(app, ["platforms", "list", "--json"])
    assert result.exit_code == 0, result.output
    states = {p["name"]: p for p in json.loads(result.stdout)}
    assert (
        states["linux/arm64"]["state"] == "half-built" and "run it again to finish" in states["linux/arm64"]["detail"]
    )
    assert states["linux/riscv64"]["state"] == "absent" and states["host"]["state"] == "ready"
    result = runner.invoke(app, ["compare", str(conv), "-b", "ort", "--platform", "linux/arm64"])
    assert result.exit_code == 1 and "is half-built (an interrupted 'platforms add')" in result.stderr
    result = runner.invoke(app, ["platforms", "remove", "linux/arm64"])
    assert result.exit_code == 0 and not (empty_cache / "platforms" / "linux-arm64").exists()


def test_qemu_older_than_8_is_refused_with_the_reason(empty_cache, monkeypatch, tmp_path):
    old = old_qemu()
    monkeypatch.setenv("DEPLOYKIT_QEMU_AARCH64", str(old))
    with pytest.raises(PlatformError, match=r"DEPLOYKIT_QEMU_AARCH64=.* \| is QEMU 7\.2\.\d+, expected 8 or newer: "
                                            r"user-mode QEMU before 8 crashes"):  # fmt: skip
        find_qemu("aarch64", empty_cache)
    # found on the PATH, it is passed over and named
    monkeypatch.delenv("DEPLOYKIT_QEMU_AARCH64")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "qemu-aarch64").symlink_to(old)
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(PlatformError, match=r"found only .*qemu-aarch64 is 7\.2\.\d+; user-mode QEMU before 8") as info:
        find_qemu("aarch64", empty_cache)
    assert "apt-get install mmdebstrap" in str(info.value)


def test_add_without_mmdebstrap_says_what_would_install_it(empty_cache, monkeypatch, tmp_path):
    """No new QEMU anywhere and no tool to fetch one: one message with both, and the manual steps."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "qemu-aarch64").symlink_to(old_qemu())
    monkeypatch.setenv("PATH", str(bin_dir))
    result = runner.invoke(app, ["platforms", "add", "linux/arm64"])
    assert result.exit_code == 1, result.output
    error = result.stderr
    assert "user-mode QEMU for aarch64 | found only" in error and "mmdebstrap is not installed" in error
    assert "Hint: apt-get install mmdebstrap" in error and "mmdebstrap --variant=extract" in error
    assert "Traceback" not in result.output
    assert not (empty_cache / "platforms" / "linux-arm64" / "target.json").exists()


def test_a_qemu_that_is_no_qemu_is_refused(empty_cache, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_QEMU_AARCH64", os.devnull)
    with pytest.raises(PlatformError, match=r"does not run or does not print a version; expected a user-mode qemu"):
        find_qemu("aarch64", empty_cache)


def test_a_target_without_wheels_for_deploykits_dependencies_names_each_missing_one_and_what_installs_it():
    """linux/riscv64 on an index without riscv64 wheels of numpy and onnx (ncnn publishes them;
    onnxruntime and OpenVINO do not): every missing package named, and the way to supply them."""
    from deploykit.platforms.wheels import Requirement, Resolved, missing_wheels_error, platform_tags

    resolved = [Resolved(Requirement("numpy", "2.4.6"), None), Resolved(Requirement("onnx", "1.23.2"), None),
                Resolved(Requirement("onnxruntime", "1.31.1", "onnxruntime"), None),
                Resolved(Requirement("ncnn", "1.0.20261020", "ncnn"), "1.0.20261020")]  # fmt: skip
    error = missing_wheels_error(resolved, platform_tags("riscv64", 41), "3.13")
    assert error.message == (
        "target packages | the package index has no riscv64 wheel for CPython 3.13 of numpy, onnx (deploykit's own "
        "dependencies) nor of onnxruntime (runtimes); it has ncnn 1.0.20261020; expected wheels tagged "
        "manylinux_2_41_riscv64 (or older manylinux) for numpy and onnx at least, since the target's workers import them."
    )
    assert error.hint is not None
    assert "numpy==2.4.6 onnx==1.23.2 onnxruntime==1.31.1" in error.hint and "PIP_FIND_LINKS=FOLDER" in error.hint


def test_add_waits_while_another_process_holds_the_targets_lock(empty_cache, monkeypatch):
    """Preparing a target takes the target's lock (``io.file_lock`` on its ``.lock``): an add started
    while another process holds it begins only once that process let go (here it then stops at once,
    at a QEMU that is no QEMU, after the holder's mark)."""
    platform = get_platform("linux/arm64")
    assert isinstance(platform, EmulatedPlatform)
    lock_file, mark = platform.folder() / LOCK_NAME, empty_cache / "released"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_file), str(mark)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    monkeypatch.setenv("DEPLOYKIT_QEMU_AARCH64", os.devnull)
    with pytest.raises(PlatformError, match="does not run or does not print a version"):
        platform.prepare()
    assert mark.read_text() == "released", "prepare started only after the holder released the target"
    assert holder.wait(timeout=60) == 0
