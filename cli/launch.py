"""The first code the ``deploykit`` command runs: its signal policy, installed before anything heavy loads.

Importing the app takes up to a few seconds on a busy machine (typer, rich, numpy, onnx). Python's own
SIGINT handler would meet a Ctrl-C there with a ``KeyboardInterrupt`` traceback from deep inside an
import, and a SIGTERM would kill the process before any ``finally`` ran. Nothing has been written yet
while the app loads, so a signal then ends the command at once: one line on stderr and the shell's
code for the signal (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP). Once the app is loaded,
``cli.main.main`` takes over: Ctrl-C unwinds (temporary files removed, workers stopped) and ends the
same way. This module imports only the standard library, and ``deploykit/__init__`` loads nothing
heavy, so the window before the policy holds is the interpreter's own start.

A runtime's compiled module (onnxruntime's, OpenVINO's, cv2, ncnn: pybind11 modules) calls back into
Python while it initialises. A KeyboardInterrupt raised there does not unwind: pybind11 turns it into
an ImportError (the backend then looks uninstalled and the command runs on without it, to exit 0) or
aborts the process (SIGABRT). So while any compiled module initialises, these signals are held and
handled the moment it returns (``holding.py``, imported once the policy holds: its imports are
not small).
"""

from __future__ import annotations

import os
import signal
from types import FrameType

_NAMES: dict[int, str] = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM"}
if hasattr(signal, "SIGHUP"):
    _NAMES[signal.SIGHUP] = "SIGHUP"


def interrupted_line(signum: int) -> str:
    """The one line a command stopped by ``signum`` prints."""
    return f"deploykit: stopped by {_NAMES.get(signum, f'signal {signum}')}."


def stop_at_once(signum: int, frame: FrameType | None) -> None:
    # Nothing to clean up yet: no output, no worker. os.write and os._exit are safe at any bytecode.
    try:
        os.write(2, (interrupted_line(signum) + "\n").encode())
    except OSError:
        pass
    os._exit(128 + signum)


def install_start_policy() -> None:
    """Until the app takes over, SIGINT, SIGTERM and SIGHUP end the process with 128 + the signal and one line.
    A signal the caller ignores (``nohup``, a shell's ``trap '' INT``) stays ignored."""
    for signum in _NAMES:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, stop_at_once)


def leave_to_the_kernel() -> None:
    """From now on SIGINT, SIGTERM and SIGHUP get the kernel's default action (the process ends with the
    shell's code for the signal), unless the caller ignores them. For the end of the command: a Python
    handler runs only between bytecodes, and the interpreter's last steps after its last bytecode would
    leave a signal recorded and never handled (the command exited 0 though the signal had come).

    A signal already recorded is handled by its Python handler as ``signal.signal`` begins (it checks for
    pending signals first); one that arrives while the handlers are switched is seen through the wakeup
    file and raised again, now with the default action."""
    signums = [signum for signum in _NAMES if signal.getsignal(signum) is not signal.SIG_IGN]
    try:
        read_end, write_end = os.pipe()
        os.set_blocking(read_end, False)
        os.set_blocking(write_end, False)
        previous = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    except (OSError, ValueError):  # no file descriptor left, or not the main thread: no safety net
        for signum in signums:
            signal.signal(signum, signal.SIG_DFL)
        return
    try:
        for signum in signums:
            signal.signal(signum, signal.SIG_DFL)
    finally:
        signal.set_wakeup_fd(previous)
    try:
        arrived = os.read(read_end, 256)
    except OSError:  # nothing came
        arrived = b""
    os.close(read_end)
    os.close(write_end)
    for signum in arrived:
        if signum in signums:
            os.kill(os.getpid(), signum)
            os._exit(128 + signum)  # were the default action somehow not at once


def main() -> None:
    install_start_policy()
    from deploykit.cli.holding import hold_signals_while_compiled_modules_load

    hold_signals_while_compiled_modules_load()
    from deploykit.cli.main import main as run  # the heavy part: typer, rich, the commands

    run()


if __name__ == "__main__":
    main()
