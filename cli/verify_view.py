"""How verdicts print, and the ``--shape``/``--batch-axis`` text as input settings (the options are in ``options``).

No domain logic: parsing option text into library arguments, and tables of ``Verdict`` objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import typer
from rich.table import Table

from deploykit.inputs import InputSetting, parse_batch_axes, parse_input_settings
from deploykit.verify.verdict import Verdict

from .console import console, err_console

STYLES = {"pass": "green", "fail": "red", "error": "red", "degenerate": "yellow", "unverified": "yellow"}


def input_settings(shapes: Sequence[str], batch_axes: Sequence[str]) -> tuple[dict[str, InputSetting], dict[str, int]]:
    return parse_input_settings(shapes), parse_batch_axes(batch_axes)


def styled(verdict: Verdict | dict[str, Any]) -> str:
    status = verdict.status if isinstance(verdict, Verdict) else verdict["status"]
    label = verdict.label if isinstance(verdict, Verdict) else verdict["label"]
    agreement = verdict.agreement if isinstance(verdict, Verdict) else verdict.get("agreement")
    colour = "red" if agreement is False else STYLES.get(status, "white")
    return f"[{colour}]{label}[/]"


def verdict_table(title: str, verdicts: Sequence[Verdict]) -> Table:
    """One row per candidate: device, precision, rule, the deciding numbers, the verdict."""
    table = Table(title=title)
    for column in (
        "candidate",
        "device",
        "precision",
        "rule",
        "max abs err",
        "min cosine",
        "min SNR",
        "task",
        "verdict",
    ):
        table.add_column(column)
    for verdict in verdicts:
        outputs = verdict.outputs
        errors = [o.max_abs_error for o in outputs]
        cosines = [o.cosine for o in outputs if o.cosine is not None]
        snrs = [o.snr_db for o in outputs if o.snr_db is not None]
        table.add_row(
            verdict.candidate,
            verdict.device or "-",
            verdict.precision or "-",
            verdict.rule if verdict.status != "error" else "-",
            f"{max(errors):.2e}" if errors else "-",
            f"{min(cosines):.6f}" if cosines else "-",
            (f"{min(snrs):.1f} dB" if min(snrs) != float("inf") else "∞") if snrs else "-",
            _task_cell(verdict),
            styled(verdict),
        )
    return table


def _task_cell(verdict: Verdict) -> str:
    if verdict.task is not None:
        return f"{verdict.task.metric} {verdict.task.value:.3f}"
    return "-¹" if verdict.task_note else "-"


def print_details(verdicts: Sequence[Verdict], notes: Sequence[str] = ()) -> None:
    """The reason of every verdict that is not a plain pass, and the report's notes, on stderr."""
    for verdict in verdicts:
        if verdict.status != "pass":
            err_console.print(f"{verdict.candidate}: {verdict.label} — {verdict.explanation}", soft_wrap=True)
    for verdict in verdicts:
        if verdict.task_note:
            err_console.print(f"¹ {verdict.candidate}: {verdict.task_note}", soft_wrap=True)
    for note in notes:
        err_console.print(f"note: {note}", soft_wrap=True)


def exit_for(verdicts: Sequence[Verdict], *, require_oracle: bool = False) -> None:
    """Exit 1 for a failure, error, disagreement or degenerate reference (and with
    ``require_oracle`` for an unverified verdict); print why."""
    bad = [v for v in verdicts if v.blocking]
    unverified = [v for v in verdicts if v.status == "unverified"]
    if require_oracle and unverified and not bad:
        console.print(
            "[red]no independent oracle verified[/] "
            + ", ".join(v.candidate for v in unverified)
            + " (--require-oracle)"
        )
    if bad or (require_oracle and unverified):
        raise typer.Exit(1)
