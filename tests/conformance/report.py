"""The conformance results as the table in docs/conformance.md: per backend, how many node cases
the raw runtime passes, how many deploykit passes, how many deploykit lost (must be 0), and what
the passes say each backend supports (sequences, optionals, 0-d tensors, element types)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tests.conformance.outcome import NOT_RUN
from tests.conformance.sweep import CaseResult


@dataclass(frozen=True)
class BackendRow:
    backend: str
    cases: int
    raw_passes: int
    deploykit_passes: int
    lost: list[str]
    features: dict[str, tuple[int, int, int]]
    """feature → (cases with it, raw passes, deploykit passes)."""
    raw_run: int = 0
    """cases the raw runtime ran (all of them, unless its runner states a domain or a sample)."""
    deploykit_run: int = 0


def backend_row(backend: str, results: Sequence[CaseResult], features: Mapping[str, set[str]]) -> BackendRow:
    counted: dict[str, list[int]] = {}
    for result in results:
        for feature in features.get(result.name, set()):
            tally = counted.setdefault(feature, [0, 0, 0])
            tally[0] += 1
            tally[1] += result.raw.passed
            tally[2] += result.deploykit.passed
    return BackendRow(
        backend,
        len(results),
        sum(r.raw.passed for r in results),
        sum(r.deploykit.passed for r in results),
        [r.name for r in results if r.raw.passed and not r.deploykit.passed],
        {feature: (t[0], t[1], t[2]) for feature, t in sorted(counted.items())},
        sum(r.raw.status != NOT_RUN for r in results),
        sum(r.deploykit.status != NOT_RUN for r in results),
    )


def summary_lines(rows: Sequence[BackendRow]) -> list[str]:
    lines = [
        "| backend | cases | run raw / through deploykit | raw runtime passes | through deploykit | lost by deploykit |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r.backend} | {r.cases} | {r.raw_run} / {r.deploykit_run} | {r.raw_passes} | {r.deploykit_passes} "
        f"| {len(r.lost)} |"
        for r in rows
    ]
    names = sorted({feature for r in rows for feature in r.features})
    lines += ["", "| cases with … (deploykit passes / cases) | " + " | ".join(r.backend for r in rows) + " |"]
    lines.append("|---" * (len(rows) + 1) + "|")
    for feature in names:
        cells = []
        for r in rows:
            total, _, through = r.features.get(feature, (0, 0, 0))
            cells.append(f"{through} / {total}")
        lines.append(f"| {feature} | " + " | ".join(cells) + " |")
    return lines
