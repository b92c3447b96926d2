"""Output parity between sessions and references, with precision-aware tolerances.

An output passes when every element satisfies ``|a - b| <= atol + rtol * |b|``
(``b`` the reference), the numpy ``allclose`` rule, and shapes and NaN/inf
positions agree. This module only compares arrays; it never runs a model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

# (atol, rtol) by compute precision; the f32 pair is what converters are held to.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "f64": (1e-7, 1e-6),
    "f32": (1e-4, 1e-3),
    "f16": (1e-2, 1e-2),
    "bf16": (5e-2, 2e-2),
}


def tolerance_for(precision: str) -> tuple[float, float]:
    """(atol, rtol) for a precision name; unknown names get the f16 pair."""
    return DEFAULT_TOLERANCES.get(precision, DEFAULT_TOLERANCES["f16"])


@dataclass
class OutputParity:
    """How one output compares with its reference."""

    name: str
    passed: bool
    max_abs_error: float
    max_rel_error: float
    cosine: float
    atol: float
    rtol: float
    worst_index: tuple[int, ...] | None = None
    worst_value: float | None = None
    worst_reference: float | None = None
    problem: str | None = None

    def describe(self) -> str:
        if self.problem:
            return f"output '{self.name}' | {self.problem}"
        text = (
            f"output '{self.name}' | max abs error {self.max_abs_error:.3g}, max rel error "
            f"{self.max_rel_error:.3g}, cosine {self.cosine:.6f} (atol {self.atol:g}, "
            f"rtol {self.rtol:g})"
        )
        if not self.passed and self.worst_index is not None:
            text += (
                f"; worst element {list(self.worst_index)}: {self.worst_value!r} vs reference {self.worst_reference!r}"
            )
        return text


@dataclass
class ParityReport:
    """Parity of every output of one candidate against one reference."""

    outputs: list[OutputParity] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)

    def failures(self) -> list[OutputParity]:
        return [o for o in self.outputs if not o.passed]

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "outputs": [asdict(o) for o in self.outputs]}


def compare_array(name: str, actual: np.ndarray, reference: np.ndarray, *, atol: float, rtol: float) -> OutputParity:
    """Compare one output with its reference."""
    actual = np.asarray(actual)
    reference = np.asarray(reference)
    if actual.shape != reference.shape:
        return OutputParity(
            name,
            False,
            float("inf"),
            float("inf"),
            0.0,
            atol,
            rtol,
            problem=f"shape {actual.shape} differs from the reference's {reference.shape}",
        )
    if actual.size == 0:
        return OutputParity(name, True, 0.0, 0.0, 1.0, atol, rtol)
    a = actual.astype(np.float64)
    b = reference.astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b) or not np.array_equal(np.isinf(a), np.isinf(b)):
        return OutputParity(
            name,
            False,
            float("inf"),
            float("inf"),
            0.0,
            atol,
            rtol,
            problem="NaN or infinity at other positions than in the reference",
        )
    finite = np.isfinite(a) & np.isfinite(b)
    a_f = np.where(finite, a, 0.0)
    b_f = np.where(finite, b, 0.0)
    inf_mismatch = bool(np.any(~finite & ~nan_a & (a != b)))
    diff = np.abs(a_f - b_f)
    rel = diff / np.maximum(np.abs(b_f), np.finfo(np.float64).tiny)
    excess = diff - (atol + rtol * np.abs(b_f))
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    norm = float(np.linalg.norm(a_f) * np.linalg.norm(b_f))
    cosine = float(np.dot(a_f.ravel(), b_f.ravel()) / norm) if norm > 0 else float(np.array_equal(a_f, b_f))
    passed = bool(excess[worst] <= 0) and not inf_mismatch
    return OutputParity(
        name=name,
        passed=passed,
        max_abs_error=float(diff.max()),
        max_rel_error=float(np.where(diff > 0, rel, 0.0).max()),
        cosine=cosine,
        atol=atol,
        rtol=rtol,
        worst_index=tuple(int(i) for i in worst),
        worst_value=float(a[worst]),
        worst_reference=float(b[worst]),
        problem="infinity with another sign than in the reference" if inf_mismatch else None,
    )


def compare_outputs(
    actual: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    *,
    atol: float | None = None,
    rtol: float | None = None,
    precision: str = "f32",
) -> ParityReport:
    """Compare every reference output with the candidate's output of the same name.

    Args:
        actual: the candidate's outputs by name.
        reference: the reference outputs by name.
        atol, rtol: override the tolerances that ``precision`` implies.
        precision: the candidate's compute precision (``f32``, ``f16``, ``bf16``).
    """
    default_atol, default_rtol = tolerance_for(precision)
    atol = default_atol if atol is None else atol
    rtol = default_rtol if rtol is None else rtol
    report = ParityReport()
    for name, ref in reference.items():
        if name not in actual:
            report.outputs.append(
                OutputParity(
                    name,
                    False,
                    float("inf"),
                    float("inf"),
                    0.0,
                    atol,
                    rtol,
                    problem="missing from the candidate's outputs",
                )
            )
            continue
        report.outputs.append(compare_array(name, actual[name], ref, atol=atol, rtol=rtol))
    return report
