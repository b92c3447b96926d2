"""Entry point of the ``deploykit`` command: one place that turns errors into messages.

A ``DeployKitError`` prints as one paragraph on stderr and exits 1 (``--debug``
shows the traceback instead); usage errors exit 2 as click decides.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import typer
from rich.text import Text
from typer.core import TyperGroup

from deploykit._version import __version__
from deploykit.errors import DeployKitError

from . import (
    backends_cmd,
    bench_cmd,
    compare_cmd,
    demo_cmd,
    inspect_cmd,
    predict_cmd,
    quantize_cmd,
    report_cmd,
    run_cmd,
)
from .console import err_console
from .convert_cmd import convert_app
from .fleet_cmd import fleet_app
from .models_cmd import models_app


class _Group(TyperGroup):
    def invoke(self, ctx: Any) -> Any:  # click's Context (typer vendors click privately)
        try:
            return super().invoke(ctx)
        except DeployKitError as exc:
            if ctx.params.get("debug") or os.environ.get("DEPLOYKIT_DEBUG"):
                raise
            err_console.print(Text(f"error: {exc}"), soft_wrap=True)
            raise typer.Exit(1) from None
        except OSError as exc:
            # The last line of defence: the operating system refused a path (name too long, no
            # permission, disk full ...) somewhere that did not check it first. Still one message.
            if ctx.params.get("debug") or os.environ.get("DEPLOYKIT_DEBUG"):
                raise
            subject = f"'{exc.filename}'" if exc.filename else type(exc).__name__
            err_console.print(Text(f"error: {subject} | {exc.strerror or exc}."), soft_wrap=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    name="deploykit",
    help="Convert models to ONNX, run them on ONNX Runtime, OpenVINO or OpenCV DNN, "
    "and compare backends on this device.",
    no_args_is_help=True,
    add_completion=False,
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


app.command("backends")(backends_cmd.backends)
app.command("inspect")(inspect_cmd.inspect)
app.command("run")(run_cmd.run)
app.command("demo")(demo_cmd.demo)
app.add_typer(convert_app, name="convert")
app.command("bench")(bench_cmd.bench)
app.command("compare")(compare_cmd.compare)
app.command("report")(report_cmd.report)
app.command("predict")(predict_cmd.predict)
app.command("quantize")(quantize_cmd.quantize)
app.add_typer(models_app, name="models")
app.add_typer(fleet_app, name="fleet")


def _exit_on_signal(signum: int, frame: object) -> None:
    # SIGTERM/SIGHUP become an exit that unwinds: finally blocks remove temporary files and kill
    # isolated workers (bench, compare, convert), instead of leaving them behind as SIG_DFL would.
    raise SystemExit(128 + signum)


def main() -> None:
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:  # an ignored SIGHUP (nohup) stays ignored
            signal.signal(signum, _exit_on_signal)
    app()


if __name__ == "__main__":
    main()
