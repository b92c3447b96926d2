"""Benchmark results: one versioned JSON schema, and its views (table, CSV, Markdown, HTML),
baseline regression checks and multi-device merges.

The schema is ``docs/report-schema.json``; ``schema_version`` grows when a field changes meaning.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from deploykit.bench.report_schema import validate_report
from deploykit.errors import ReportError
from deploykit.io import atomic_path

SCHEMA_VERSION = 1
LATENCY_KEYS = ("min_ms", "mean_ms", "std_ms", "cov", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms")
HEADLINE = {"singlestream": "p90_ms", "multistream": "p90_ms", "offline": "throughput_sps"}
CSV_COLUMNS = [
    "label",
    "backend",
    "device",
    "precision",
    "batch",
    "threads",
    "scenario",
    "streams",
    "status",
    "load_ms",
    "first_inference_ms",
    *LATENCY_KEYS,
    "throughput_sps",
    "peak_rss_bytes",
    "energy_j_per_inference",
    "cost_per_million",
    "verdict",
    "accuracy_delta",
    "max_abs_error",
    "error",
]


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    config, latency, session = row["config"], row.get("latency") or {}, row.get("session") or {}
    verdict = row.get("verdict")
    errors = [o["max_abs_error"] for o in (verdict or {}).get("outputs", []) if isinstance(o["max_abs_error"], float)]
    max_abs = max(errors, default=None)
    return {
        "label": config["label"],
        "backend": config["backend"],
        "device": session.get("device") or config.get("device"),
        "precision": session.get("precision"),
        "batch": config["batch"],
        "threads": config.get("threads"),
        "scenario": config["scenario"],
        "streams": config.get("streams"),
        "status": row["status"],
        "load_ms": row.get("load_ms"),
        "first_inference_ms": row.get("first_inference_ms"),
        **{k: latency.get(k) for k in LATENCY_KEYS},
        "throughput_sps": row.get("throughput_sps"),
        "peak_rss_bytes": row.get("peak_rss_bytes"),
        "energy_j_per_inference": row.get("energy_j_per_inference"),
        "cost_per_million": row.get("cost_per_million"),
        "verdict": None if verdict is None else verdict["label"],
        "accuracy_delta": row.get("accuracy_delta"),
        "max_abs_error": max_abs,
        "error": row.get("error"),
    }


def accuracy_delta(verdict: dict[str, Any] | None) -> float | None:
    """What a configuration costs in task accuracy: 0 for an element-wise pass (f32), 1 − the task
    metric (top-1 agreement, mAP@0.5) for reduced precision on real images, else unknown (None)."""
    if not verdict or verdict["status"] in ("error", "degenerate"):
        return None
    if verdict["rule"] == "element-wise":
        return 0.0 if verdict["status"] == "pass" or verdict.get("agreement") else None
    task = verdict.get("task")
    return None if task is None else round(1.0 - float(task["value"]), 6)


def _backend_options(name: str) -> Sequence[str]:
    from deploykit.backends.registry import get_backend
    from deploykit.errors import DeployKitError

    try:
        return list(get_backend(name).options)
    except DeployKitError:  # a report from a machine with a plug-in this one lacks
        return []


def _short(error: str | None, limit: int = 60) -> str:
    """An error as a table cell: without its hint, cut to ``limit`` characters (the full text is in the JSON)."""
    text = (error or "").split(" Hint: ")[0]
    text = text.split(" | ", 1)[-1]
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _budget(max_drop: float | None) -> str:
    return "" if max_drop is None else f"; within the accuracy budget of {max_drop:.1%}"


def _why(row: dict[str, Any]) -> str:
    verdict = row["verdict"]
    oracle = verdict["oracle"]["name"]
    delta = row.get("accuracy_delta")
    cost = f", accuracy delta {delta:.1%}" if delta else ""
    if verdict["status"] == "pass":
        rule = verdict["rule"]
        return f"the fastest configuration verified against {oracle} ({verdict['precision']}, {rule}{cost})"
    return f"the fastest configuration that agrees with {oracle}; no independent oracle verified it"


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}" if abs(value) < 1e6 else f"{value:.3g}"
    return str(value)


class BenchmarkResult:
    """A benchmark report: ``data`` is the JSON document; methods render and judge it."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    # --- reading -------------------------------------------------------------------------
    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> BenchmarkResult:
        file = Path(path)
        try:
            data = json.loads(file.read_text())
        except FileNotFoundError as exc:
            raise ReportError(
                f"report '{file}' | no such file.", hint="pass a report.json written by deploykit bench."
            ) from exc
        except (OSError, ValueError) as exc:
            raise ReportError(
                f"report '{file}' | is not JSON: {exc}.",
                hint="pass a report.json written by deploykit bench.",
            ) from exc
        if not isinstance(data, dict) or data.get("schema") != "deploykit.bench":
            raise ReportError(
                f"report '{file}' | is not a deploykit bench report.",
                hint="pass a report.json written by deploykit bench.",
            )
        version = data.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ReportError(
                f"report '{file}' | has schema version {version}, this deploykit reads up to {SCHEMA_VERSION}.",
                hint="upgrade deploykit to read reports from newer versions.",
            )
        validate_report(data, file)
        return cls(data)

    @property
    def rows(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self.data["rows"]
        return rows

    @property
    def headline(self) -> str:
        return HEADLINE[self.data["settings"]["scenario"]]

    def _score(self, row: dict[str, Any]) -> float:
        """Lower is better."""
        if self.headline == "throughput_sps":
            return -float(row["throughput_sps"])
        return float(row["latency"][self.headline])

    def ok_rows(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["status"] == "ok"]

    def fastest(self) -> dict[str, Any] | None:
        rows = self.ok_rows()
        return min(rows, key=self._score) if rows else None

    def best(self) -> dict[str, Any] | None:
        """The fastest configuration an independent oracle verified (the recommendation's row); without
        any verified row, the fastest that agrees with the others (the recommendation says so)."""
        verified = [r for r in self.ok_rows() if (r.get("verdict") or {}).get("status") == "pass"]
        agreeing = [r for r in self.ok_rows() if (r.get("verdict") or {}).get("agreement") is True]
        rows = verified or agreeing
        budget = self.data["settings"].get("max_drop")
        if budget is not None:
            rows = [r for r in rows if r.get("accuracy_delta") is not None and r["accuracy_delta"] <= budget]
        return min(rows, key=self._score) if rows else None

    def pareto_front(self) -> list[dict[str, Any]]:
        """The configurations no other beats on both latency (the headline) and accuracy delta,
        fastest first: the trade-off a user picks from when reduced precision is on the table."""
        rows = sorted(
            (r for r in self.ok_rows() if r.get("accuracy_delta") is not None and (r.get("verdict") or {}).get(
                "status") in ("pass", "fail", "unverified")),
            key=self._score,
        )  # fmt: skip
        front: list[dict[str, Any]] = []
        for row in rows:
            if not front or row["accuracy_delta"] < front[-1]["accuracy_delta"]:
                front.append(row)
        return front

    def recommend(self) -> dict[str, Any] | None:
        row = self.best()
        if row is None:
            return None
        config, model = row["config"], self.data["model"]["path"]
        options = dict(config.get("options") or {})
        if config.get("threads"):
            options["threads"] = config["threads"]
        precision = config.get("precision") or row["session"].get("precision")
        if precision and "precision" in _backend_options(config["backend"]):  # pin what ran, not a device default
            options["precision"] = precision
        device = row["session"]["device_requested"]
        spec = f"{config['backend']}:{device}"
        option_text = "".join(f", {k}={v!r}" for k, v in options.items())
        command = f"deploykit bench {model} -b {spec} --batch {config['batch']}"
        if config.get("threads"):
            command += f" --threads {config['threads']}"
        if options.get("precision"):
            command += f" --precision {options['precision']}"
        return {
            "label": config["label"],
            "headline": self.headline,
            "value": row["throughput_sps"] if self.headline == "throughput_sps" else row["latency"][self.headline],
            "why": _why(row) + _budget(self.data["settings"].get("max_drop")),
            "command": command,
            "python": (f"deploykit.load({model!r}, backend={config['backend']!r}, device={device!r}{option_text})"),
        }

    # --- writing -------------------------------------------------------------------------
    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        text = json.dumps(self.data, indent=2, default=str)
        if path is not None:
            with atomic_path(path) as temporary:
                temporary.write_text(text)
        return text

    def to_csv(self, path: str | os.PathLike[str] | None = None) -> str:
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in self.rows:
            writer.writerow(_flat(row))
        if path is not None:
            with atomic_path(path) as temporary:
                temporary.write_text(buffer.getvalue())
        return buffer.getvalue()

    def summary_rows(self) -> list[dict[str, str]]:
        """Rows as the table, Markdown and HTML show them: headline ratio vs the fastest."""
        fastest = self.fastest()
        best = self.best()
        shown = []
        for row in self.rows:
            flat = _flat(row)
            ratio = "-"
            if row["status"] == "ok" and fastest is not None:
                if self.headline == "throughput_sps":
                    ratio = f"{fastest['throughput_sps'] / row['throughput_sps']:.2f}x"
                else:
                    ratio = f"{row['latency'][self.headline] / fastest['latency'][self.headline]:.2f}x"
            shown.append(
                {
                    "configuration": flat["label"] + (" ★" if row is best else ""),
                    "device": _fmt(flat["device"]),
                    "precision": _fmt(flat["precision"]),
                    "load ms": _fmt(flat["load_ms"], 1),
                    "first ms": _fmt(flat["first_inference_ms"], 2),
                    "p50 ms": _fmt(flat["p50_ms"]),
                    "p90 ms": _fmt(flat["p90_ms"]),
                    "p99 ms": _fmt(flat["p99_ms"]),
                    "CoV": _fmt(flat["cov"], 2),
                    "samples/s": _fmt(flat["throughput_sps"], 1),
                    "peak RSS MiB": _fmt(None if flat["peak_rss_bytes"] is None else flat["peak_rss_bytes"] / 2**20, 0),
                    "vs fastest": ratio,
                    "acc. delta": "-" if flat["accuracy_delta"] is None else f"{flat['accuracy_delta']:.1%}",
                    "verdict": flat["verdict"] or ("-" if row["status"] == "ok" else f"failed: {_short(row['error'])}"),
                    **(
                        {"$/1M": _fmt(flat["cost_per_million"], 4)}
                        if self.data["settings"].get("cost_per_hour")
                        else {}
                    ),
                }
            )
        return shown

    def to_markdown(self, path: str | os.PathLike[str] | None = None) -> str:
        rows = self.summary_rows()
        device = self.data["device"]
        lines = [
            f"# deploykit bench: {Path(self.data['model']['path']).name}",
            "",
            f"{device['cpu']['model']} ({device['cpu']['logical_cores']} logical cores, flags "
            f"{', '.join(device['cpu']['flags']) or '-'}), {device['os']}, Python {device['python']}; "
            f"scenario {self.data['settings']['scenario']}, headline {self.headline}; {self.data['created']}",
            "",
        ]
        if rows:
            header = list(rows[0])
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(r[h].replace("|", "/") for h in header) + " |" for r in rows]
        recommendation = self.data.get("recommendation")
        if recommendation:
            lines += [
                "",
                f"**Recommendation**: {recommendation['label']} — {recommendation['why']}.",
                "",
                f"`{recommendation['command']}`",
                "",
                f"`{recommendation['python']}`",
            ]
        text = "\n".join(lines) + "\n"
        if path is not None:
            with atomic_path(path) as temporary:
                temporary.write_text(text)
        return text

    def to_html(self, path: str | os.PathLike[str] | None = None) -> str:
        from deploykit.bench.html import render_html

        text = render_html([self])
        if path is not None:
            with atomic_path(path) as temporary:
                temporary.write_text(text)
        return text

    def write_all(self, directory: str | os.PathLike[str]) -> list[Path]:
        """report.json, report.csv, report.md and report.html in ``directory`` (created if needed)."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f"report.{ext}" for ext in ("json", "csv", "md", "html")]
        self.to_json(paths[0])
        self.to_csv(paths[1])
        self.to_markdown(paths[2])
        self.to_html(paths[3])
        return paths

    def table(self) -> Any:
        """A rich Table of the summary rows (print it with rich's console)."""
        from rich.table import Table

        table = Table(title=f"{Path(self.data['model']['path']).name} — headline {self.headline} (★ = recommended)")
        rows = self.summary_rows()
        for column in rows[0] if rows else ["configuration"]:
            table.add_column(column, overflow="fold")
        from rich.markup import escape

        for row in rows:
            table.add_row(*(escape(value) for value in row.values()))
        return table

    def _repr_html_(self) -> str:
        return self.to_html()

    # --- judging -------------------------------------------------------------------------
    def regressions(self, baseline: BenchmarkResult, threshold: float = 0.10) -> list[str]:
        """Configurations whose p50/p99 grew (or throughput fell) by more than ``threshold``,
        or whose verdict or status changed, versus ``baseline``.

        Raises:
            ReportError: the two reports have no configuration in common.
        """
        old = {r["config"]["label"]: r for r in baseline.rows}
        if not any(r["config"]["label"] in old for r in self.rows):
            raise ReportError(
                f"baseline | shares no configuration with this report (this: "
                f"{', '.join(r['config']['label'] for r in self.rows)}; "
                f"baseline: {', '.join(old) or 'none'}).",
                hint="benchmark the same backends, devices, batch sizes and threads as the baseline.",
            )
        findings = []
        for row in self.rows:
            label = row["config"]["label"]
            before = old.get(label)
            if before is None:
                continue
            if before["status"] != row["status"]:
                findings.append(f"{label}: status {before['status']} → {row['status']}")
                continue
            if row["status"] != "ok":
                continue
            for key in ("p50_ms", "p99_ms"):
                was, now = before["latency"][key], row["latency"][key]
                if was > 0 and now > was * (1 + threshold):
                    findings.append(f"{label}: {key} {was:.3f} → {now:.3f} ms (+{100 * (now / was - 1):.0f}%)")
            was_tp, now_tp = before.get("throughput_sps") or 0, row.get("throughput_sps") or 0
            if self.headline == "throughput_sps" and was_tp > 0 and now_tp < was_tp * (1 - threshold):
                findings.append(f"{label}: throughput {was_tp:.1f} → {now_tp:.1f} samples/s")
            verdict_before = (before.get("verdict") or {}).get("status")
            verdict_now = (row.get("verdict") or {}).get("status")
            if verdict_before != verdict_now:
                findings.append(f"{label}: verdict {verdict_before} → {verdict_now}")
        return findings


def merge_html(reports: Sequence[BenchmarkResult]) -> str:
    """One HTML page with several devices' reports side by side."""
    from deploykit.bench.html import render_html

    return render_html(list(reports))
