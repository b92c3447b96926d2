"""The report folder of ``bench --report``: report.json, report.csv, report.md and report.html,
checked before the benchmark runs and written all or nothing after it.

The top of the bench views: it reads the data (``report``) and the views (``views``, ``html``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from deploykit.bench import views
from deploykit.bench.html import render_html
from deploykit.bench.report import BenchmarkReport
from deploykit.errors import OutputError
from deploykit.io import check_report_folder, commit_outputs

REPORT_FILES = ("report.json", "report.csv", "report.md", "report.html")


def check_report_dir(directory: str | os.PathLike[str], *, inputs: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Refuse a report folder that cannot be written, before the benchmark runs
    (``deploykit.io.check_report_folder`` for the four report files).

    Raises:
        OutputError: the folder cannot take the report; the message says why.
    """
    check_report_folder(directory, REPORT_FILES, inputs=inputs)


def report_texts(report: BenchmarkReport) -> list[str]:
    """The four files' texts, in ``REPORT_FILES`` order."""
    return [report.to_json(), views.csv_text(report), views.markdown_text(report), render_html([report])]


def write_report(report: BenchmarkReport, directory: str | os.PathLike[str]) -> list[Path]:
    """report.json, report.csv, report.md and report.html in ``directory`` (created if needed):
    all four, or (a full disk, a signal) none."""
    folder = Path(directory)
    check_report_dir(folder)
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"--report '{folder}' | cannot be created ({exc.strerror or exc}).",
            hint="pass a folder you can write to, e.g. --report out/.",
        ) from exc
    paths = [folder / name for name in REPORT_FILES]
    try:
        commit_outputs([], dict(zip(paths, report_texts(report), strict=True)))
    except BaseException:
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return paths
