"""The report folder of ``bench --report``: report.json, report.csv, report.md and report.html,
checked before the benchmark runs and written all or nothing after it.

The top of the bench views: it reads the data (``report``) and the views (``views``, ``html``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from deploykit.bench import views
from deploykit.bench.html import render_html
from deploykit.bench.report import BenchmarkReport
from deploykit.errors import OutputError
from deploykit.io import check_outputs, claim_output, commit_outputs

REPORT_FILES = ("report.json", "report.csv", "report.md", "report.html")


def check_report_dir(directory: str | os.PathLike[str], *, inputs: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Refuse a report folder that cannot be written, before the benchmark runs: a file, a path
    under a file, a folder where no file can be created, or report files that cannot be replaced
    or are inputs (``check_outputs``, file by file, once the folder exists).

    Raises:
        OutputError: the folder cannot take the report; the message says why.
    """
    folder = Path(directory)
    hint = "pass a folder you can write to (it is created if missing), e.g. --report out/."
    if folder.exists() and not folder.is_dir():
        raise OutputError(f"--report '{folder}' | is a file, expected a folder to write the report files into.",
                          hint=hint)  # fmt: skip
    claim_output(folder, f"--report '{folder}'", kind="folder")  # a second run onto it is refused
    if folder.is_dir():
        files = {f"--report {name}": folder / name for name in REPORT_FILES}
        check_outputs(files, inputs=[Path(p) for p in inputs])
        return
    existing = folder.absolute()  # the folder is made by write_report: its nearest existing parent must take it
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(
            f"--report '{folder}' | '{existing}' is a file, so no folder can be made under it.", hint=hint
        )
    try:  # os.access is not enough: read-only mounts, immutable folders, root
        handle, probe = tempfile.mkstemp(prefix=".deploykit-probe-", dir=existing)
    except OSError as exc:
        raise OutputError(f"--report '{folder}' | no file can be created in '{existing}' ({exc.strerror or exc}).",
                          hint=hint) from exc  # fmt: skip
    os.close(handle)
    os.unlink(probe)


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
        raise OutputError(f"--report '{folder}' | cannot be created ({exc.strerror or exc}).",
                          hint="pass a folder you can write to, e.g. --report out/.") from exc  # fmt: skip
    paths = [folder / name for name in REPORT_FILES]
    try:
        commit_outputs([], dict(zip(paths, report_texts(report), strict=True)))
    except BaseException:
        if created:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    return paths
