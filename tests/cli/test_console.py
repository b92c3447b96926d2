"""The command line's one progress bar (``step_bar``), used by bench, optimize, fleet bench and predict on Ray."""

from __future__ import annotations

from rich.console import Console

from deploykit.cli.console import step_bar


def _rendered(progress) -> str:
    console = Console(record=True, width=120)
    console.print(progress.make_tasks_table(progress.tasks))
    return console.export_text()


def test_the_step_bar_says_done_of_total_and_time_left():
    progress = step_bar(disable=True)
    task = progress.add_task("predict (ray) 12.5 rows/s", total=None)
    assert "predict (ray) 12.5 rows/s" in _rendered(progress) and "0/?" in _rendered(progress)
    progress.update(task, completed=3, total=10)
    shown = _rendered(progress)
    assert "3/10" in shown and "ETA" in shown
