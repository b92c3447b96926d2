"""Benchmark results: one versioned JSON schema, and its views (table, CSV, Markdown, HTML),
baseline regression checks and multi-device merges.

The schema is ``docs/report-schema.json``; ``schema_version`` grows when a field changes meaning.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from deploykit.bench import views
from deploykit.bench.report_schema import validate_report
from deploykit.bench.rows import BenchSettings, ModelInfo, Recommendation, Row, accuracy_delta
from deploykit.errors import OutputError, ReportError
from deploykit.io import check_outputs, claim_output, commit_outputs, special_file_problem, written

if TYPE_CHECKING:
    from rich.table import Table

    from deploykit.optimize.ranking import Ranking

__all__ = ["BenchSettings", "BenchmarkReport", "ModelInfo", "Recommendation", "Row", "accuracy_delta", "merge_html"]

SCHEMA = "deploykit.bench"
SCHEMA_VERSION = 1
REPORT_FILES = ("report.json", "report.csv", "report.md", "report.html")

HEADLINE = {"singlestream": "p90_ms", "multistream": "p90_ms", "offline": "throughput_sps"}


def _backend_options(name: str) -> Sequence[str]:
    from deploykit.backends.registry import get_backend
    from deploykit.errors import DeployKitError

    try:
        return list(get_backend(name).options)
    except DeployKitError:  # a report from a machine with a plug-in this one lacks
        return []


def _budget(max_drop: float | None) -> str:
    return "" if max_drop is None else f"; within the accuracy budget of {max_drop:.1%}"


def _why(row: Row) -> str:
    verdict = row.verdict
    assert verdict is not None
    cost = f", accuracy delta {row.accuracy_delta:.1%}" if row.accuracy_delta else ""
    if verdict.status == "pass":
        return (f"the fastest configuration verified against {verdict.oracle.name} "
                f"({verdict.precision}, {verdict.rule}{cost})")  # fmt: skip
    return f"the fastest configuration that agrees with {verdict.oracle.name}; no independent oracle verified it"


# Worse to the right; no verdict counts as unverified.
_VERDICT_RANK = {"pass": 0, "unverified": 1, None: 1, "degenerate": 2, "fail": 3, "error": 4}


def check_report_dir(directory: str | os.PathLike[str], *, inputs: Sequence[str | os.PathLike[str]] = ()) -> None:
    """Refuse a report folder that cannot be written, before the benchmark runs: a file, a path
    under a file, a folder where no file can be created, or report files that cannot be replaced
    or are inputs (``check_outputs``, file by file, once the folder exists).

    Raises:
        OutputError: the folder cannot take the report; the message says why.
    """
    import tempfile

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
    existing = folder.absolute()  # the folder is made by write_all: its nearest existing parent must take it
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


def _invalid(file: Path, problem: str) -> ReportError:
    return ReportError(f"report '{file}' | {problem}", hint="pass a report.json written by deploykit bench.")


@dataclass
class BenchmarkReport:
    """A benchmark report: the model, the machine, the settings and one ``Row`` per configuration;
    methods judge it (fastest, best, Pareto front, regressions) and render it (JSON, CSV, Markdown,
    HTML, a rich table). ``to_dict()`` is ``docs/report-schema.json``; notebooks show the HTML page.

    Attributes:
        model: the benchmarked file (path, sha256, interface).
        settings: how it ran.
        device: the machine's fingerprint (CPU, flags, memory, GPUs, runtime versions).
        rows: one per configuration, in the order they ran.
        created: ISO 8601 UTC time the bench finished.
        notes: precisions not supported here, which oracle ran, budgets nothing met.
        recommendation: the configuration to deploy, or None when nothing was verified.
    """

    model: ModelInfo
    settings: BenchSettings
    device: dict[str, Any]
    rows: list[Row]
    created: str = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    notes: list[str] = field(default_factory=list)
    recommendation: Recommendation | None = None

    # --- reading -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "model": self.model.to_dict(),
            "settings": self.settings.to_dict(),
            "device": self.device,
            "rows": [row.to_dict() for row in self.rows],
            "notes": list(self.notes),
            "pareto_front": [row.label for row in self.pareto_front()],
            "recommendation": None if self.recommendation is None else self.recommendation.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | os.PathLike[str] = "<report>") -> BenchmarkReport:
        """The report ``to_dict`` wrote, validated against the schema first.

        Raises:
            ReportError: not a deploykit bench report, a newer schema version, or a field that
                breaks the schema (the message names its JSON path).
        """
        file = Path(source)
        if not isinstance(data, Mapping) or data.get("schema") != SCHEMA:
            raise _invalid(file, "is not a deploykit bench report.")
        version = data.get("schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise _invalid(file, f"does not follow the report schema: schema_version is {version!r}, expected 1.")
        if version > SCHEMA_VERSION:
            raise ReportError(
                f"report '{file}' | has schema version {version}, this deploykit reads up to {SCHEMA_VERSION}.",
                hint="upgrade deploykit to read reports from newer versions.",
            )
        validate_report(dict(data), file)
        recommendation = data.get("recommendation")
        return cls(
            model=ModelInfo.from_dict(data["model"]),
            settings=BenchSettings.from_dict(data["settings"]),
            device=dict(data["device"]),
            rows=[Row.from_dict(row) for row in data["rows"]],
            created=data["created"],
            notes=list(data.get("notes") or []),
            recommendation=None if recommendation is None else Recommendation.from_dict(recommendation),
        )

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> BenchmarkReport:
        """Read a ``report.json``.

        Raises:
            ReportError: no such file, not JSON, or not a valid deploykit bench report.
        """
        file = Path(path)
        problem = special_file_problem(file)
        if problem is not None:
            raise _invalid(file, f"{problem}.")

        def no_constants(name: str) -> Any:
            raise ValueError(f"{name} is not a JSON number (deploykit writes null for a missing figure)")

        try:
            data = json.loads(file.read_text(), parse_constant=no_constants)
        except FileNotFoundError as exc:
            raise _invalid(file, "no such file.") from exc
        except (OSError, ValueError) as exc:
            raise _invalid(file, f"is not JSON: {exc}.") from exc
        except RecursionError as exc:  # '[' * 100000: no report nests so deep
            raise _invalid(file, "is JSON nested too deeply to read; a report is a few levels deep.") from exc
        return cls.from_dict(data, file)

    @property
    def data(self) -> dict[str, Any]:
        """The JSON document, as ``BenchmarkResult.data`` was; use ``to_dict()`` (or the attributes)."""
        import warnings

        warnings.warn("BenchmarkReport.data is to_dict() now; read the attributes (rows, model, settings ...)",
                      DeprecationWarning, stacklevel=2)  # fmt: skip
        return self.to_dict()

    def __repr__(self) -> str:
        best = self.recommendation.label if self.recommendation else None
        return (f"BenchmarkReport({Path(self.model.path).name!r}, {len(self.rows)} rows, "
                f"{len(self.ok_rows())} ok, recommended {best!r})")  # fmt: skip

    @property
    def headline(self) -> str:
        """The figure configurations are ranked by: ``p90_ms``, or ``throughput_sps`` offline."""
        return HEADLINE[self.settings.scenario]

    def headline_value(self, row: Row) -> float:
        """``row``'s headline figure (an ``ok`` row)."""
        if self.headline == "throughput_sps":
            return float(row.throughput_sps or 0.0)
        return row.latency_ms(self.headline)

    def _score(self, row: Row) -> float:
        """Lower is better."""
        value = self.headline_value(row)
        return -value if self.headline == "throughput_sps" else value

    def row(self, label: str) -> Row | None:
        """The row of the configuration labelled ``label`` (``openvino:CPU b1 bf16``), if any."""
        return next((r for r in self.rows if r.label == label), None)

    def ok_rows(self) -> list[Row]:
        return [r for r in self.rows if r.ok]

    def fastest(self) -> Row | None:
        rows = self.ok_rows()
        return min(rows, key=self._score) if rows else None

    def best(self) -> Row | None:
        """The fastest configuration an independent oracle verified (the recommendation's row); without
        any verified row, the fastest that agrees with the others (the recommendation says so)."""
        rows = self.eligible_rows()
        ranking = self.ranking(rows)
        return None if ranking is None else next(r for r in rows if r.label == ranking.chosen)

    def eligible_rows(self) -> list[Row]:
        """The rows a recommendation may pick: verified (else agreeing), within the accuracy budget."""
        verified = [r for r in self.ok_rows() if r.verdict is not None and r.verdict.status == "pass"]
        agreeing = [r for r in self.ok_rows() if r.verdict is not None and r.verdict.agreement is True]
        rows = verified or agreeing
        budget = self.settings.max_drop
        if budget is not None:
            rows = [r for r in rows if r.accuracy_delta is not None and r.accuracy_delta <= budget]
        return rows

    def ranking(self, rows: Sequence[Row] | None = None) -> Ranking | None:
        """``rows`` (default: every ``ok`` row) ranked by the headline with deploykit's one ranking
        rule (``deploykit.optimize.ranking.DECISION_RULE``): faster only when the bootstrap
        intervals over the rows' blocks separate; a tie goes to f32, fewer threads, a smaller batch."""
        from deploykit.optimize.ranking import RankEntry, rank

        rows = self.ok_rows() if rows is None else list(rows)
        if not rows:
            return None
        key = "throughput_sps" if self.headline == "throughput_sps" else self.headline
        entries = []
        for row in rows:
            blocks = [float(getattr(b, key)) for b in row.blocks]
            entries.append(RankEntry(row.label, [blocks or [self.headline_value(row)]], row.precision,
                                     row.precision == "int8", row.config.threads, row.config.batch))  # fmt: skip
        unit = "samples/s" if key == "throughput_sps" else "ms"
        return rank(entries, higher_is_better=key == "throughput_sps", unit=unit)

    def pareto_front(self) -> list[Row]:
        """The configurations no other beats on both latency (the headline) and accuracy delta,
        fastest first: the trade-off a user picks from when reduced precision is on the table."""
        judged = ("pass", "fail", "unverified")
        rows = sorted(
            (r for r in self.ok_rows()
             if r.accuracy_delta is not None and r.verdict is not None and r.verdict.status in judged),
            key=self._score,
        )  # fmt: skip
        front: list[Row] = []
        for row in rows:
            if not front or row.accuracy_delta < front[-1].accuracy_delta:  # type: ignore[operator]
                front.append(row)
        return front

    def recommend(self) -> Recommendation | None:
        """The recommendation for this report's rows: what to deploy, with the command and the call."""
        row = self.best()
        if row is None or row.session is None:
            return None
        config, model = row.config, self.model.path
        options = dict(config.options or {})
        if config.threads:
            options["threads"] = config.threads
        precision = config.precision or row.session.precision
        if precision and "precision" in _backend_options(config.backend):  # pin what ran, not a device default
            options["precision"] = precision
        device = row.session.device_requested
        command = f"deploykit bench {model} -b {config.backend}:{device} --batch {config.batch}"
        if config.threads:
            command += f" --threads {config.threads}"
        if options.get("precision"):
            command += f" --precision {options['precision']}"
        option_text = "".join(f", {k}={v!r}" for k, v in options.items())
        ranking = self.ranking(self.eligible_rows())
        decided = "" if ranking is None or len(ranking.order) < 2 else f"; {ranking.reason}"
        return Recommendation(
            label=row.label,
            headline=self.headline,
            value=self.headline_value(row),
            why=_why(row) + _budget(self.settings.max_drop) + decided,
            command=command,
            python=f"deploykit.load({model!r}, backend={config.backend!r}, device={device!r}{option_text})",
        )

    # --- writing -------------------------------------------------------------------------
    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        return written(json.dumps(self.to_dict(), indent=2, default=str), path)

    def to_csv(self, path: str | os.PathLike[str] | None = None) -> str:
        """One line per configuration, the headline numbers flattened (``views.CSV_COLUMNS``)."""
        return written(views.csv_text(self), path)

    def summary_rows(self) -> list[dict[str, str]]:
        """Rows as the table, Markdown and HTML show them: headline ratio vs the fastest."""
        return views.summary_rows(self)

    def to_markdown(self, path: str | os.PathLike[str] | None = None) -> str:
        return written(views.markdown_text(self), path)

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        from deploykit.bench.html import render_html

        return written(render_html([self]), path)

    def write_all(self, directory: str | os.PathLike[str]) -> list[Path]:
        """report.json, report.csv, report.md and report.html in ``directory`` (created if needed)."""
        folder = Path(directory)
        check_report_dir(folder)
        created = not folder.exists()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(f"--report '{folder}' | cannot be created ({exc.strerror or exc}).",
                              hint="pass a folder you can write to, e.g. --report out/.") from exc  # fmt: skip
        paths = [folder / name for name in REPORT_FILES]
        texts = [self.to_json(), self.to_csv(), self.to_markdown(), self.to_html()]
        try:  # the four files are one output: all of them, or (a full disk, a signal) none
            commit_outputs([], dict(zip(paths, texts, strict=True)))
        except BaseException:
            if created:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return paths

    def table(self) -> Table:
        """A rich Table of the summary rows (print it with rich's console)."""
        return views.rich_table(self)

    def _repr_html_(self) -> str:
        return self.to_html()

    # --- judging -------------------------------------------------------------------------
    def differences(self, baseline: BenchmarkReport) -> list[str]:
        """What makes the comparison with ``baseline`` less than like for like: another model file,
        another machine, another scenario (notes, not regressions)."""
        notes = []
        if self.model.sha256 != baseline.model.sha256:
            notes.append(f"the baseline benchmarked another model file ({Path(baseline.model.path).name}, "
                         f"sha256 {baseline.model.sha256[:12]}… vs {self.model.sha256[:12]}…)")  # fmt: skip
        if self.device.get("cpu", {}).get("model") != baseline.device.get("cpu", {}).get("model"):
            notes.append(f"the baseline ran on another CPU ({baseline.device.get('cpu', {}).get('model')})")
        if self.settings.scenario != baseline.settings.scenario:
            notes.append(
                f"the baseline's scenario was {baseline.settings.scenario}, this one's {self.settings.scenario}"
            )
        for row in self.rows:
            if baseline.row(row.label) is None:
                notes.append(f"{row.label}: new, not in the baseline")
        return notes

    def regressions(self, baseline: BenchmarkReport, threshold: float = 0.10) -> list[str]:
        """What got worse versus ``baseline``: p50/p99 grew (or throughput fell) by more than
        ``threshold``, a configuration that ran now fails or is missing, or its verdict got worse
        (pass → unverified → degenerate → fail → error). Improvements are not regressions.

        Raises:
            ReportError: the two reports have no configuration in common.
        """
        old = {r.label: r for r in baseline.rows}
        if not any(r.label in old for r in self.rows):
            raise ReportError(
                f"baseline | shares no configuration with this report (this: "
                f"{', '.join(r.label for r in self.rows)}; baseline: {', '.join(old) or 'none'}).",
                hint="benchmark the same backends, devices, batch sizes and threads as the baseline.",
            )
        findings = [f"{label}: in the baseline, missing from this report" for label in old if self.row(label) is None]
        for row in self.rows:
            label, before = row.label, old.get(row.label)
            if before is None:
                continue
            if before.ok and not row.ok:
                findings.append(
                    f"{label}: status {before.status} → {row.status} ({views.short_error(row.error, 120).rstrip('.')})"
                )
                continue
            if not (row.ok and before.ok):
                continue
            for key in ("p50_ms", "p99_ms"):
                was, now = before.latency_ms(key), row.latency_ms(key)
                if was > 0 and now > was * (1 + threshold):
                    findings.append(f"{label}: {key} {was:.3f} → {now:.3f} ms (+{100 * (now / was - 1):.0f}%)")
            was_tp, now_tp = before.throughput_sps or 0, row.throughput_sps or 0
            if self.headline == "throughput_sps" and was_tp > 0 and now_tp < was_tp * (1 - threshold):
                findings.append(f"{label}: throughput {was_tp:.1f} → {now_tp:.1f} samples/s")
            verdict_before = None if before.verdict is None else before.verdict.status
            verdict_now = None if row.verdict is None else row.verdict.status
            if _VERDICT_RANK.get(verdict_now, 1) > _VERDICT_RANK.get(verdict_before, 1):
                findings.append(f"{label}: verdict {verdict_before} → {verdict_now}")
        return findings


BenchmarkResult = BenchmarkReport
"""The earlier name of ``BenchmarkReport`` (whose ``data`` dict is now ``to_dict()``), kept for existing code."""


def merge_html(reports: Sequence[BenchmarkReport]) -> str:
    """One HTML page with several devices' reports side by side."""
    from deploykit.bench.html import render_html

    return render_html(list(reports))
