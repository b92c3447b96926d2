"""Entry point of the ``deploykit`` command: one place that turns errors into messages.

A ``DeployKitError`` prints as one paragraph on stderr and exits 1 (``--debug``
shows the traceback instead); a ``UsageError`` (an option or argument the caller got wrong, an output
path onto an input) exits 2, as click's own usage errors do. A reader that
closes stdout early (``| head``) ends the command quietly with 141 (128 + SIGPIPE); Ctrl-C ends it
with one line and 130, SIGTERM with 143 (``launch`` holds the policy while this module loads).
"""

from __future__ import annotations

import _thread
import os
import select
import signal
import stat
import sys
import time
import warnings
from typing import Any, NoReturn

import typer
from rich.text import Text
from typer.core import TyperGroup

from deploykit._version import __version__
from deploykit.errors import DeployKitError, UsageError
from deploykit.io import FULL_ERRNOS, one_line, output_scope

from . import (
    backends_cmd,
    bench_cmd,
    compare_cmd,
    demo_cmd,
    inspect_cmd,
    launch,
    optimize_cmd,
    predict_cmd,
    quantize_cmd,
    report_cmd,
    run_cmd,
    serve_cmd,
    version_cmd,
)
from .console import err_console
from .convert_cmd import convert_app
from .converters_cmd import converters_app
from .export_cmd import export_app
from .fleet_cmd import fleet_app
from .models_cmd import models_app
from .platforms_cmd import platforms_app
from .vocabulary import modernize

# A reader that stops early (deploykit bench --help | head -1) closes the pipe. Python ignores
# SIGPIPE, so the next write raises BrokenPipeError; end as a Unix tool killed by SIGPIPE would:
# no message, status 128 + SIGPIPE = 141. Not 0: the output was cut short, and a script under
# `set -o pipefail` should see what it sees from cat or grep; not 1 with an "error:" line: the
# command did nothing wrong (click's own EPIPE handling exits 1, which reads as a failure).
BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 1
INTERRUPTED_EXIT = 128 + signal.SIGINT  # what a shell reports for Ctrl-C
ERROR_EXIT = 1  # the command was sound and failed: a model, a runtime, the disk
USAGE_EXIT = 2  # the command line was wrong (click's own code for a missing argument or an unknown option)


def exit_code_of(error: DeployKitError) -> int:
    """The exit status for an error: 2 when the caller got an option or argument wrong (``UsageError``), else 1."""
    return USAGE_EXIT if isinstance(error, UsageError) else ERROR_EXIT


def _stdout_is_broken(fd: int | None = None) -> bool:
    """Whether standard output (or ``fd``) is a pipe nobody reads any more (not some other pipe, e.g. a worker's)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno() if fd is None else fd, select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or stdout is no file (tests)
        return False


def _stdout_is_full() -> bool:
    """Whether standard output is a device such as /dev/full (writes to it fail with ENOSPC)."""
    try:
        return stat.S_ISCHR(os.fstat(sys.stdout.fileno()).st_mode) and not os.isatty(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        return False


def _quiet_exit() -> NoReturn:
    # The Python docs' recipe (signal module, "Note on SIGPIPE"): point stdout at devnull so that
    # flushing what is still buffered at exit cannot raise again and print "Exception ignored".
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(BROKEN_PIPE_EXIT)


def _check_working_directory() -> None:
    """A shell left in a deleted folder: every relative path would fail later as 'no such file' or 'cannot
    be parsed', so say what is wrong before the command starts."""
    try:
        os.getcwd()
    except FileNotFoundError:
        raise DeployKitError(
            "current directory | no longer exists (it was deleted while the shell was in it), so no relative "
            "path can be read or written.",
            hint="cd into an existing folder (cd $PWD may bring back one made again), then run the command again.",
        ) from None


def _show_warning(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    """A library warning (a bundle chosen on another machine, a leftover removed) as one line, never as
    Python's "file:line: Category" with a source line under it."""
    err_console.print(Text(f"warning: {one_line(str(message), None)}"), soft_wrap=True)


class _Group(TyperGroup):
    def make_context(self, info_name: str | None, args: list[str], *rest: Any, **kwargs: Any) -> Any:
        args = modernize(args)  # the old spellings of options, with a deprecation line each
        try:  # 'deploykit --help' prints while parsing, before invoke
            return super().make_context(info_name, args, *rest, **kwargs)
        except KeyboardInterrupt:  # click would print "Aborted!" and exit 1
            _say_interrupted()
        except BrokenPipeError:
            if _stdout_is_broken():
                _quiet_exit()
            raise

    def invoke(self, ctx: Any) -> Any:  # click's Context (typer vendors click privately)
        try:
            _check_working_directory()
            with output_scope(), warnings.catch_warnings():  # outputs stay this command's until it ends
                warnings.showwarning = _show_warning
                return super().invoke(ctx)
        except KeyboardInterrupt:  # click would print "Aborted!" and exit 1; a shell expects 130
            if ctx.params.get("debug") or os.environ.get("DEPLOYKIT_DEBUG"):
                raise
            _say_interrupted()
        except DeployKitError as exc:
            if ctx.params.get("debug") or os.environ.get("DEPLOYKIT_DEBUG"):
                raise
            # one paragraph: a newline inside a name or a runtime's text (shown as ␊) cannot forge a line
            err_console.print(Text(f"error: {one_line(str(exc), None)}"), soft_wrap=True)
            raise typer.Exit(exit_code_of(exc)) from None
        except OSError as exc:
            if isinstance(exc, BrokenPipeError) and _stdout_is_broken():
                _quiet_exit()
            # The last line of defence: the operating system refused a path (name too long, no
            # permission, disk full ...) somewhere that did not check it first. Still one message.
            if ctx.params.get("debug") or os.environ.get("DEPLOYKIT_DEBUG"):
                raise
            full_stdout = exc.errno in FULL_ERRNOS and _stdout_is_full()
            subject = f"'{exc.filename}'" if exc.filename else "standard output" if full_stdout else type(exc).__name__
            reason = f"{exc.strerror or exc}"
            if exc.errno in FULL_ERRNOS:
                where = "standard output" if full_stdout else "a file deploykit was writing"
                reason += (
                    f" while writing {where}: the disk is full or a file-size limit (ulimit -f) is set. "
                    "Hint: free some space, raise the limit or write elsewhere, then run the command again"
                )
            err_console.print(Text(f"error: {one_line(f'{subject} | {reason}.', None)}"), soft_wrap=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    name="deploykit",
    help="Convert models to ONNX, run them on ONNX Runtime, OpenVINO, OpenCV DNN, ncnn, MNN or LiteRT, "
    "and compare backends on this device.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"deploykit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks instead of short errors."),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """deploykit: deploy neural networks to edge devices."""


app.command("version")(version_cmd.version)
app.command("backends")(backends_cmd.backends)
app.command("inspect")(inspect_cmd.inspect)
app.command("run")(run_cmd.run)
app.command("demo")(demo_cmd.demo)
app.add_typer(convert_app, name="convert")
app.add_typer(export_app, name="export")
app.add_typer(converters_app, name="converters")
app.command("bench")(bench_cmd.bench)
app.command("compare")(compare_cmd.compare)
app.command("report")(report_cmd.report)
app.command("predict")(predict_cmd.predict)
app.command("quantize")(quantize_cmd.quantize)
app.command("optimize")(optimize_cmd.optimize)
app.command("serve")(serve_cmd.serve)
app.add_typer(models_app, name="models")
app.add_typer(fleet_app, name="fleet")
app.add_typer(platforms_app, name="platforms")


class _SignalExit(SystemExit):
    """The exit a SIGTERM or SIGHUP raises (its ``signum`` says which)."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class _Interrupted(KeyboardInterrupt):
    """The KeyboardInterrupt a Ctrl-C raises."""

    signum = signal.SIGINT


def _exit_on_signal(signum: int, frame: object) -> None:
    # SIGTERM/SIGHUP become an exit that unwinds: finally blocks remove temporary files and kill
    # isolated workers (bench, compare, convert), instead of leaving them behind as SIG_DFL would.
    raise _SignalExit(signum)


#: A SIGINT this soon after the one that began the unwinding is the same Ctrl-C delivered twice, not a
#: second press: ``timeout -s INT`` signals the command and then its whole process group (the command
#: included), and so does a supervisor that signals a process and its group.
SAME_CTRL_C_S = 0.5

_first_ctrl_c_at: list[float] = []  # when the first Ctrl-C's handler ran (monotonic seconds)


def _interrupt(signum: int, frame: object) -> None:
    # The first Ctrl-C unwinds (finally blocks remove temporary files and stop workers); a second one,
    # while that runs, leaves at once as during start-up.
    _first_ctrl_c_at[:] = [time.monotonic()]
    signal.signal(signal.SIGINT, _interrupt_again)
    raise _Interrupted


def _interrupt_again(signum: int, frame: object) -> None:
    # The same Ctrl-C delivered twice must not cut the unwinding short (its temporary files, its output
    # locks and its workers would be left behind); a press after that leaves at once.
    if _first_ctrl_c_at and time.monotonic() - _first_ctrl_c_at[0] < SAME_CTRL_C_S:
        return
    launch.stop_at_once(signum, None)


def _signal_met_a_callback(unraisable: Any) -> None:
    """``sys.unraisablehook``: a Python handler runs at whatever bytecode comes next, and that may be a
    weakref callback, a ``__del__`` or a garbage-collector callback, where Python prints "Exception
    ignored" and goes on: the signal was lost (``backends`` exited 0 after a SIGTERM met importlib's
    module-lock callback). The signal is sent again from another thread, so that its handler runs once
    the main thread has left the callback; other unraisable exceptions go to the previous hook."""
    signum = getattr(unraisable.exc_value, "signum", None)
    if not isinstance(unraisable.exc_value, _SignalExit | _Interrupted) or signum is None:
        _previous_unraisablehook(unraisable)
        return
    if signum == signal.SIGINT:  # the first Ctrl-C did not unwind: the next one still should
        signal.signal(signal.SIGINT, _interrupt)
    # A raw thread, which start_new_thread does not wait for (Thread.start does, and the handler then ran
    # inside this hook): it needs the GIL to send, which this thread gives up after leaving the callback.
    try:
        _thread.start_new_thread(os.kill, (os.getpid(), signum))
    except RuntimeError:  # no new thread at the interpreter's exit: the handler runs at the next bytecode
        os.kill(os.getpid(), signum)


_previous_unraisablehook = sys.unraisablehook


def _install_signal_policy() -> None:
    """Ctrl-C raises KeyboardInterrupt (one line and 130 at the top, see ``_Group``); SIGTERM/SIGHUP become
    an exit that unwinds. A signal the caller ignores (nohup, trap '' INT) stays ignored."""
    sys.unraisablehook = _signal_met_a_callback
    for signum, handler in (
        (signal.SIGINT, _interrupt),
        (signal.SIGTERM, _exit_on_signal),
        (signal.SIGHUP, _exit_on_signal),
    ):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, handler)


def _say_interrupted() -> NoReturn:
    err_console.print(Text(launch.interrupted_line(signal.SIGINT)), soft_wrap=True)
    raise SystemExit(INTERRUPTED_EXIT)


def main() -> None:
    try:  # a duplicate of stdout, to ask at exit whether its reader went away (dup2 may replace fd 1)
        original = os.dup(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        original = None
    try:
        _install_signal_policy()
        app()
    except KeyboardInterrupt:  # between the policy and click's own handling, or after it
        _say_interrupted()
    except SystemExit as done:
        # rich meets a broken pipe with the same recipe but exits 1 (Console.on_broken_pipe, which
        # typer's help uses): its sign is stdout turned into devnull while the real pipe is broken.
        if done.code not in (0, None) and original is not None and _is_devnull() and _stdout_is_broken(original):
            raise SystemExit(BROKEN_PIPE_EXIT) from None
        raise
    finally:
        # The work is done: a signal from here on ends the command at once with the shell's code, never
        # a KeyboardInterrupt inside the flush or a teardown hook (the one line while Python still runs).
        launch.install_start_policy()
        try:  # what is still buffered goes out now, while a broken pipe can still end quietly
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_exit()
        finally:
            if original is not None:
                os.close(original)
            # The interpreter's exit runs steps after its last bytecode, where a Python handler would
            # never run (the signal lost, exit 0): the kernel's default action takes over.
            launch.leave_to_the_kernel()


def _is_devnull() -> bool:
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
    except (AttributeError, OSError, ValueError):
        return False


if __name__ == "__main__":
    main()
