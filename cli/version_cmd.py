"""``deploykit version``: deploykit, Python, the platform, the CPU features that matter and every
runtime (installed or not, and why not), as a table or ``--json``. Loads no model."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from . import options as opt
from .console import console, print_json


def version(as_json: opt.Json = False) -> None:
    """Show deploykit's version, Python, the platform and CPU features, and every runtime's version and build."""
    from deploykit.about import about

    report = about()
    if as_json:
        print_json(report.to_dict())
        return
    console.print(f"deploykit {report.deploykit}", highlight=False)
    console.print(f"python    {report.python} ({report.python_implementation}, {escape(report.executable)})")
    console.print(f"platform  {escape(report.platform)} ({report.architecture})")
    console.print(f"cpu       {escape(report.cpu_model or 'unknown')}")
    if report.cpu_features:
        features = "  ".join(f"{name} {'yes' if has else 'no'}" for name, has in report.cpu_features.items())
        console.print(f"features  {features}", soft_wrap=True)
    else:
        console.print(f"features  not readable on {report.architecture} (no /proc/cpuinfo flags)")
    runtimes = Table(title="runtimes")
    for column in ("backend", "version", "packages", "build", "status"):
        runtimes.add_column(column, overflow="fold")
    for runtime in report.runtimes:
        packages = ", ".join(f"{name} {number}" for name, number in runtime.distributions.items()) or "-"
        build = "; ".join(f"{key}: {_short(value)}" for key, value in runtime.build.items()) or "-"
        status = "[green]available[/]" if runtime.available else f"[red]unavailable[/]: {escape(runtime.reason or '')}"
        runtimes.add_row(runtime.backend, runtime.version or "-", escape(packages), escape(build), status)
    console.print(runtimes)
    tools = Table(title="tools")
    for column in ("package", "version", "used for"):
        tools.add_column(column)
    for tool in report.tools:
        missing = f"not installed (pip install 'deploykit[{tool.pip_extra}]')" if tool.pip_extra else "not installed"
        tools.add_row(tool.name, tool.version or f"[yellow]{escape(missing)}[/]", tool.used_for)
    console.print(tools)
    if report.environments:
        environments = Table(title="managed converter environments")
        for column in ("environment", "path", "versions"):
            environments.add_column(column, overflow="fold")
        for environment in report.environments:
            versions = ", ".join(f"{name} {number}" for name, number in environment.versions.items())
            environments.add_row(environment.name, escape(environment.path), escape(versions))
        console.print(environments)
    else:
        console.print("managed converter environments: none")


def _short(value: object) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(str(item) for item in value)
    return str(value)
