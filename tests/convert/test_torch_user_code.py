"""The user's code runs in a worker (issue 21): a PyTorch factory or module that hangs, segfaults, calls
``sys.exit``/``os._exit`` or changes directory costs ``convert torch`` a clear error naming it (exit 1,
nothing written) — never a silent exit 0, a bare exit code, a hang, or "no such file"."""

from __future__ import annotations

import textwrap

import pytest

from tests.assets.paths import require_module
from tests.fuzz.harness import invoke_checked

FACTORIES = """
import ctypes, os, sys, time
import torch

if os.environ.get("EXIT_AT_IMPORT"):
    sys.exit(7)


class Small(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


def good():
    return Small()


def exits_zero():
    sys.exit(0)


def exits_hard():
    os._exit(3)


def segfaults():
    ctypes.string_at(0)


def interrupts():
    raise KeyboardInterrupt


def hangs():
    time.sleep(3600)


def spawns_a_child():
    import subprocess

    subprocess.Popen(["sleep", "300.4217"])  # inherits the worker's output pipes
    return Small()


def daemonizes():
    first = os.fork()
    if first == 0:  # the classic daemon: a new session, then a grandchild whose parent exits
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "300.5219"])
        os._exit(0)
    os.waitpid(first, 0)
    return Small()


def changes_directory():
    os.chdir("/")
    return Small()


def prints_a_lot_and_leaves_a_thread():
    import threading

    sys.stdout.write("x" * 20_000_000)  # no newline: the result line must not be glued to it
    threading.Thread(target=time.sleep, args=(300,)).start()  # not a daemon
    return Small()
"""


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    require_module("torch", "pip install 'deploykit[torch]'", "PyTorch")
    folder = tmp_path_factory.mktemp("user_code")
    path = folder / "factories.py"
    path.write_text(textwrap.dedent(FACTORIES))
    return path


@pytest.mark.parametrize(
    "factory, extra, message",
    [
        ("exits_zero", [], "its code ended the conversion: the model's code called sys.exit(0)."),
        ("interrupts", [], "its code ended the conversion: the model's code raised KeyboardInterrupt."),
        ("exits_hard", [], "its code ended the conversion: the isolated run exited with code 3"),
        ("segfaults", [], "its code ended the conversion: the isolated run was killed by signal SIGSEGV"),
        ("hangs", ["--timeout", "8"], "did not finish within 8 s and was killed (--timeout to change)"),
    ],
)
def test_user_code_that_ends_or_hangs_is_an_error_naming_it(factories, tmp_path, factory, extra, message):
    output = tmp_path / "m.onnx"
    result = invoke_checked(
        ["convert", "torch", f"{factories}:{factory}", "-i", "x:1x4", "-o", output, *extra],
        reads=[factories], writes=[output, tmp_path / "m.onnx.export.log"], watch=[tmp_path],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    shown = " ".join(result.stderr.split())
    assert f"error: PyTorch model '{factories}:{factory}' | " in shown and message in shown, result.stderr
    assert not output.exists()


def test_a_module_that_exits_at_import_and_a_factory_that_changes_directory(factories, tmp_path, monkeypatch):
    monkeypatch.setenv("EXIT_AT_IMPORT", "1")
    result = invoke_checked(["convert", "torch", f"{factories}:good", "-i", "x:1x4", "-o", tmp_path / "a.onnx"])
    assert result.exit_code == 1 and "the model's code called sys.exit(7)" in " ".join(result.stderr.split())
    monkeypatch.delenv("EXIT_AT_IMPORT")

    # the factory's os.chdir happens in the worker: the output lands where the user asked, relative to *their*
    # directory, and the verification still compares against PyTorch
    monkeypatch.chdir(tmp_path)
    result = invoke_checked(["convert", "torch", f"{factories}:changes_directory", "-i", "x:1x4", "-o", "b.onnx"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "b.onnx").is_file() and "pass" in result.output


@pytest.mark.parametrize("factory, marker", [("spawns_a_child", "300.4217"), ("daemonizes", "300.5219")])
def test_a_factory_whose_children_outlive_it_converts_and_leaves_none(factories, tmp_path, factory, marker):
    """Issue 21 sweep: a child process holding the worker's pipes made a finished conversion wait for --timeout,
    and a daemon (setsid, double fork) outlived the command."""
    import psutil

    output = tmp_path / "c.onnx"
    result = invoke_checked(["convert", "torch", f"{factories}:{factory}", "-i", "x:1x4", "-o", output,
                             "--timeout", "60"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert output.is_file()
    children = [p for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[-1:] == [marker]]
    assert not children, "the factory's child outlived the conversion"


def test_a_factory_that_prints_a_lot_and_leaves_a_thread_converts_at_once(factories, tmp_path):
    """Sweep 21b: 50 MB printed without a newline swallowed the worker's result line ("exited with code 0
    without printing a result"), and a non-daemon thread held a finished conversion until --timeout."""
    import time

    started = time.monotonic()
    output = tmp_path / "d.onnx"
    factory = f"{factories}:prints_a_lot_and_leaves_a_thread"
    result = invoke_checked(["convert", "torch", factory, "-i", "x:1x4", "-o", output, "--timeout", "120"])
    assert result.exit_code == 0, result.output[-2000:]
    assert output.is_file() and time.monotonic() - started < 100
