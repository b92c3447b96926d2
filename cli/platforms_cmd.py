"""``deploykit platforms``: the emulated targets a candidate may run on (``--platform linux/arm64``):
list them with a self-test, prepare one in the cache, remove one."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from . import options as opt
from .console import console, err_console, print_json

if TYPE_CHECKING:
    from deploykit.platforms import EmulatedPlatform
    from deploykit.verify.verdict import VerificationReport

platforms_app = typer.Typer(
    help="Emulated targets (linux/arm64 under user-mode QEMU): list, add, remove.", no_args_is_help=True
)

PLATFORM_HELP = (
    "Where each candidate runs: host (default), linux/arm64 (the aarch64 builds under emulation; "
    "'deploykit platforms add linux/arm64' prepares it), or several: host,linux/arm64."
)


def _check_platforms(value: str | None) -> str | None:
    """The --platform value, or a usage error (exit 2) listing the known platforms."""
    if value is None:
        return None
    from deploykit.errors import UsageError
    from deploykit.platforms import parse_platforms

    try:
        parse_platforms(value)
    except UsageError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


PLATFORM_OPTION = typer.Option(None, "--platform", help=PLATFORM_HELP, callback=_check_platforms)


@platforms_app.command("list")
def list_platforms(
    self_test: bool = typer.Option(True, "--self-test/--no-self-test", help="Run a one-line check in each target."),
    as_json: opt.Json = False,
) -> None:
    """Every platform, whether it is prepared, its (emulated) CPU and the runtimes' versions there."""
    from deploykit.platforms import PLATFORMS

    statuses = [platform.status(self_test=self_test) for platform in PLATFORMS.values()]
    if as_json:
        print_json([s.to_dict() for s in statuses])
        return
    table = Table(title="platforms (emulated timings are not the board's speed: use bench --fleet on the device)")
    for column in ("platform", "state", "cpu", "emulator", "python", "runtimes", "detail"):
        table.add_column(column, overflow="fold")
    for status in statuses:
        runtimes = ", ".join(status.runtimes.values())
        table.add_row(
            *(
                escape(x)
                for x in (
                    status.name,
                    status.state,
                    status.cpu,
                    status.emulator,
                    status.python,
                    runtimes,
                    status.detail,
                )
            )
        )
    console.print(table)


def _emulated(name: str) -> EmulatedPlatform:
    from deploykit.errors import UsageError
    from deploykit.platforms import EmulatedPlatform, get_platform

    platform = get_platform(name)
    if not isinstance(platform, EmulatedPlatform):
        raise UsageError(
            f"platform '{name}' | is this machine: nothing to prepare; expected an emulated platform.",
            hint="e.g. deploykit platforms add linux/arm64.",
        )
    return platform


@platforms_app.command("add")
def add(name: str = typer.Argument(..., help="linux/arm64 or linux/riscv64.")) -> None:
    """Prepare a target in deploykit's cache: QEMU >= 8, a Debian sysroot with Python, the target's wheels
    of numpy, onnx and each installed runtime, and deploykit itself. Steps already done are kept."""
    platform = _emulated(name)
    started = time.perf_counter()
    manifest = platform.prepare(lambda text: err_console.print(escape(text)))
    probe = manifest.get("probe") or {}
    versions = ", ".join((probe.get("backends") or {}).values())
    console.print(
        f"{escape(platform.base_name)} ready in {time.perf_counter() - started:.1f} s: "
        f"{escape(platform.describe())}; {escape(versions)}"
    )
    for package in manifest["packages"]:
        if not package["exact"]:
            note = package["reason"] or "not installed"
            console.print(f"  {escape(package['distribution'])}: {escape(note)}")


@platforms_app.command("remove")
def remove(name: str = typer.Argument(..., help="linux/arm64 or linux/riscv64.")) -> None:
    """Delete a target from the cache (the QEMU extracted for all targets stays)."""
    platform = _emulated(name)
    if platform.remove():
        console.print(f"removed {escape(platform.base_name)} ({escape(str(platform.folder()))})")
    else:
        console.print(f"{escape(platform.base_name)} was not prepared; nothing to remove")


def print_emulated(report: VerificationReport) -> None:
    """The emulated rows of a bench: verdict, the precision that ran, and one pass's load/run seconds,
    marked emulated and in their own table, so nothing ranks them against the host's."""
    from .verify_view import print_details, styled

    table = Table(
        title="under emulation: one pass in seconds, NOT the board's speed (not ranked; use bench --fleet "
        "on the device)"
    )
    for column in ("candidate", "platform", "precision", "verdict", "load s (emulated)", "run s (emulated)"):
        table.add_column(column)
    for verdict in report.verdicts:
        seconds = report.emulated_seconds.get(verdict.candidate) or {}
        runs = seconds.get("run") or []
        table.add_row(
            escape(verdict.candidate),
            escape(str(seconds.get("platform", "-"))),
            escape(verdict.precision or "-"),
            styled(verdict),
            f"{seconds['load']:.2f}" if "load" in seconds else "-",
            f"{sum(runs) / len(runs):.2f}" if runs else "-",
        )
    console.print(table)
    print_details(report.verdicts, report.notes)
