"""Judging a benchmark report: which configuration is fastest, which may be recommended, the
Pareto front of speed against accuracy, and what regressed against a baseline.

Functions of a ``BenchmarkReport`` (data, never changed here except by ``judge``, which records
the recommendation and the front in it). The ranking rule is deploykit's one rule
(``deploykit.optimize.ranking.DECISION_RULE``). Views read these; nothing here renders.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from deploykit.bench.report import BenchmarkReport
from deploykit.bench.rows import Recommendation, Row, short_error
from deploykit.errors import ReportError

if TYPE_CHECKING:
    from deploykit.optimize.ranking import Ranking

# Worse to the right; no verdict counts as unverified.
_VERDICT_RANK = {"pass": 0, "unverified": 1, None: 1, "degenerate": 2, "fail": 3, "error": 4}


def _score(report: BenchmarkReport, row: Row) -> float:
    """Lower is better."""
    value = report.headline_value(row)
    return -value if report.headline == "throughput_sps" else value


def fastest(report: BenchmarkReport) -> Row | None:
    """The ``ok`` row with the best headline figure, verified or not."""
    rows = report.ok_rows()
    return min(rows, key=lambda row: _score(report, row)) if rows else None


def eligible_rows(report: BenchmarkReport) -> list[Row]:
    """The rows a recommendation may pick: verified (else agreeing), within the accuracy budget."""
    verified = [r for r in report.ok_rows() if r.verdict is not None and r.verdict.status == "pass"]
    agreeing = [r for r in report.ok_rows() if r.verdict is not None and r.verdict.agreement is True]
    rows = verified or agreeing
    budget = report.settings.max_drop
    if budget is not None:
        rows = [r for r in rows if r.accuracy_delta is not None and r.accuracy_delta <= budget]
    return rows


def ranking(report: BenchmarkReport, rows: Sequence[Row] | None = None) -> Ranking | None:
    """``rows`` (default: every ``ok`` row) ranked by the headline with deploykit's one ranking
    rule (``deploykit.optimize.ranking.DECISION_RULE``): faster only when the bootstrap
    intervals over the rows' blocks separate; a tie goes to f32, fewer threads, a smaller batch."""
    from deploykit.optimize.ranking import RankEntry, rank

    rows = report.ok_rows() if rows is None else list(rows)
    if not rows:
        return None
    key = report.headline
    entries = []
    for row in rows:
        rounds = [[float(getattr(b, key)) for b in part] for part in row.round_blocks()]
        entries.append(
            RankEntry(
                row.label,
                rounds or [[report.headline_value(row)]],
                row.precision,
                row.precision == "int8",
                row.config.threads,
                row.config.batch,
                row.calls(),
            )
        )
    unit = "samples/s" if key == "throughput_sps" else "ms"
    return rank(entries, higher_is_better=key == "throughput_sps", unit=unit)


def best(report: BenchmarkReport) -> Row | None:
    """The fastest configuration an independent oracle verified (the recommendation's row); without
    any verified row, the fastest that agrees with the others (the recommendation says so)."""
    rows = eligible_rows(report)
    ranked = ranking(report, rows)
    return None if ranked is None else next(r for r in rows if r.label == ranked.chosen)


def pareto_front(report: BenchmarkReport) -> list[Row]:
    """The configurations no other beats on both latency (the headline) and accuracy delta,
    fastest first: the trade-off a user picks from when reduced precision is on the table."""
    judged = ("pass", "fail", "unverified")
    rows = sorted(
        (
            r
            for r in report.ok_rows()
            if r.accuracy_delta is not None and r.verdict is not None and r.verdict.status in judged
        ),
        key=lambda row: _score(report, row),
    )
    front: list[Row] = []
    for row in rows:
        if not front or row.accuracy_delta < front[-1].accuracy_delta:  # type: ignore[operator]
            front.append(row)
    return front


def _backend_options(name: str) -> Sequence[str]:
    from deploykit.backends.registry import get_backend
    from deploykit.errors import DeployKitError

    try:
        return list(get_backend(name).options)
    except DeployKitError:  # a report from a machine with a plug-in this one lacks
        return []


def _why(row: Row) -> str:
    verdict = row.verdict
    assert verdict is not None
    cost = f", accuracy delta {row.accuracy_delta:.1%}" if row.accuracy_delta else ""
    if verdict.status == "pass":
        return (
            f"the fastest configuration verified against {verdict.oracle.name} "
            f"({verdict.precision}, {verdict.rule}{cost})"
        )
    return f"the fastest configuration that agrees with {verdict.oracle.name}; no independent oracle verified it"


def _rounds_hint(rounds: int) -> str:
    """What an inconclusive decision needs when the rounds asked for could never give the rule its
    evidence (``--rounds 1``, bench's default, measures each configuration once)."""
    from deploykit.optimize.ranking import MIN_ROUNDS

    if rounds >= MIN_ROUNDS:
        return ""
    plural = "round" if rounds == 1 else "rounds"
    return (
        f"; {rounds} {plural} per configuration can never call one faster: pass --rounds {MIN_ROUNDS} "
        f"(interleaved, with at least 9 timed runs each) for a decision"
    )


def recommend(report: BenchmarkReport) -> Recommendation | None:
    """The recommendation for this report's rows: what to deploy, with the command and the call."""
    row = best(report)
    if row is None or row.session is None:
        return None
    config, model = row.config, report.model.path
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
    ranked = ranking(report, eligible_rows(report))
    decided = "" if ranked is None or len(ranked.order) < 2 else f"; {ranked.reason}"
    if ranked is not None and ranked.decision == "inconclusive":
        decided += _rounds_hint(report.settings.rounds)
    budget = report.settings.max_drop
    return Recommendation(
        label=row.label,
        headline=report.headline,
        value=report.headline_value(row),
        why=_why(row) + ("" if budget is None else f"; within the accuracy budget of {budget:.1%}") + decided,
        command=command,
        python=f"deploykit.load({model!r}, backend={config.backend!r}, device={device!r}{option_text})",
    )


def judge(report: BenchmarkReport) -> BenchmarkReport:
    """Record the recommendation and the Pareto front in ``report`` (what its builders call last)."""
    report.recommendation = recommend(report)
    report.pareto_front = [row.label for row in pareto_front(report)]
    return report


def differences(report: BenchmarkReport, baseline: BenchmarkReport) -> list[str]:
    """What makes the comparison with ``baseline`` less than like for like: another model file,
    another machine, another scenario (notes, not regressions)."""
    notes = []
    if report.model.sha256 != baseline.model.sha256:
        notes.append(
            f"the baseline benchmarked another model file ({Path(baseline.model.path).name}, "
            f"sha256 {baseline.model.sha256[:12]}… vs {report.model.sha256[:12]}…)"
        )
    if report.device.get("cpu", {}).get("model") != baseline.device.get("cpu", {}).get("model"):
        notes.append(f"the baseline ran on another CPU ({baseline.device.get('cpu', {}).get('model')})")
    if report.settings.scenario != baseline.settings.scenario:
        notes.append(f"the baseline's scenario was {baseline.settings.scenario}, this one's {report.settings.scenario}")
    for row in report.rows:
        if baseline.row(row.label) is None:
            notes.append(f"{row.label}: new, not in the baseline")
    return notes


def regressions(report: BenchmarkReport, baseline: BenchmarkReport, threshold: float = 0.10) -> list[str]:
    """What got worse versus ``baseline``: p50/p99 grew (or throughput fell) by more than
    ``threshold``, a configuration that ran now fails or is missing, or its verdict got worse
    (pass → unverified → degenerate → fail → error). Improvements are not regressions.

    Raises:
        ReportError: the two reports have no configuration in common.
    """
    old = {r.label: r for r in baseline.rows}
    if not any(r.label in old for r in report.rows):
        raise ReportError(
            f"baseline | shares no configuration with this report (this: "
            f"{', '.join(r.label for r in report.rows)}; baseline: {', '.join(old) or 'none'}).",
            hint="benchmark the same backends, devices, batch sizes and threads as the baseline.",
        )
    findings = [f"{label}: in the baseline, missing from this report" for label in old if report.row(label) is None]
    for row in report.rows:
        label, before = row.label, old.get(row.label)
        if before is None:
            continue
        if before.ok and not row.ok:
            reason = short_error(row.error, 120).rstrip(".")
            findings.append(f"{label}: status {before.status} → {row.status} ({reason})")
            continue
        if not (row.ok and before.ok):
            continue
        for key in ("p50_ms", "p99_ms"):
            was, now = before.latency_ms(key), row.latency_ms(key)
            if was > 0 and now > was * (1 + threshold):
                findings.append(f"{label}: {key} {was:.3f} → {now:.3f} ms (+{100 * (now / was - 1):.0f}%)")
        was_tp, now_tp = before.throughput_sps or 0, row.throughput_sps or 0
        if report.headline == "throughput_sps" and was_tp > 0 and now_tp < was_tp * (1 - threshold):
            findings.append(f"{label}: throughput {was_tp:.1f} → {now_tp:.1f} samples/s")
        verdict_before = None if before.verdict is None else before.verdict.status
        verdict_now = None if row.verdict is None else row.verdict.status
        if _VERDICT_RANK.get(verdict_now, 1) > _VERDICT_RANK.get(verdict_before, 1):
            findings.append(f"{label}: verdict {verdict_before} → {verdict_now}")
    return findings
