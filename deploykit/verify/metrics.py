"""Numbers that compare one output with its reference: element-wise error, cosine, SNR, degeneracy.

Which numbers decide a verdict depends on the candidate's precision (``Thresholds``): f32/f64
are judged element-wise (``|a - b| <= atol + rtol * |b|``, the numpy ``allclose`` rule);
bf16/f16/int8 by cosine similarity and signal-to-noise ratio, because their rounding moves
every element a little and an element-wise rule would fail every real model. This module only
compares arrays; it never runs a model and never decides the final verdict (``judge`` does).

A tolerance must be able to fail. When a reference output is so small that ``atol`` is more than
``ATOL_SHARE_OF_PEAK`` of its largest magnitude (random-initialised logits peaking at 1e-9, small
probabilities, masks), ``atol`` would pass all zeros, the output negated or shuffled; the element-wise
rule then uses ``ATOL_SHARE_OF_PEAK × peak`` instead and says so (``OutputMetrics.atol_scaled``). A
reference whose magnitudes are below the smallest normal number of its type is ``degenerate``:
rounding there says nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from deploykit.errors import UsageError
from deploykit.io import one_line
from deploykit.tensors import normalize_precision

ELEMENTWISE_PRECISIONS = ("f64", "f32")
REDUCED_PRECISIONS = ("f16", "bf16", "int8")
ATOL_SHARE_OF_PEAK = 1e-2
"""The largest share of a reference output's peak magnitude ``atol`` may be: past it, ``atol`` is scaled down."""
SCALED_RULE = "element-wise, atol scaled to the reference"


@dataclass(frozen=True)
class Thresholds:
    """What a candidate must reach to pass, by the rule its precision implies.

    Attributes:
        atol, rtol: element-wise tolerances (f32/f64 candidates).
        min_cosine: per-output cosine similarity with the reference (reduced precision).
        min_snr_db: per-output signal-to-noise ratio, ``10 log10(|ref|² / |ref - cand|²)``.
        min_top1_agreement: classifiers, on real images: share of images whose top-1 class agrees.
        min_map: detectors, on real images: mAP@0.5 of the candidate's detections against the
            reference's.
    """

    atol: float = 1e-4
    rtol: float = 1e-3
    min_cosine: float = 0.99
    min_snr_db: float = 20.0
    min_top1_agreement: float = 0.9
    min_map: float = 0.9

    def similarity(self) -> dict[str, float]:
        return {"min_cosine": self.min_cosine, "min_snr_db": self.min_snr_db}

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, float]) -> Thresholds:
        return cls(**{k: float(v) for k, v in data.items() if k in cls.__dataclass_fields__})


DEFAULT_THRESHOLDS: dict[str, Thresholds] = {
    "f64": Thresholds(atol=1e-7, rtol=1e-6),
    "f32": Thresholds(atol=1e-4, rtol=1e-3),
    "f16": Thresholds(atol=1e-2, rtol=1e-2, min_cosine=0.999, min_snr_db=30.0),
    "bf16": Thresholds(atol=5e-2, rtol=2e-2, min_cosine=0.99, min_snr_db=20.0),
    # INT8 is judged mainly by its task metric; cosine/SNR only bound what two quantized runtimes
    # may differ by (ONNX Runtime vs OpenVINO on a QDQ MobileNetV2: cosine 0.984, 14.8 dB)
    "int8": Thresholds(atol=1e-1, rtol=5e-2, min_cosine=0.97, min_snr_db=12.0),
}


def thresholds_for(precision: str | None, **overrides: float | None) -> Thresholds:
    """The default thresholds of a precision (unknown names get f16's), with overrides that are not None.

    Raises:
        UsageError: an override is negative, not finite, or a minimum outside its range.
    """
    base = DEFAULT_THRESHOLDS.get(normalize_precision(precision), DEFAULT_THRESHOLDS["f16"])
    given = {k: float(v) for k, v in overrides.items() if v is not None}
    for key, value in given.items():
        if key not in Thresholds.__dataclass_fields__:
            raise UsageError(f"threshold '{key}' | is not one of {', '.join(Thresholds.__dataclass_fields__)}.")
        bounded = key in ("min_cosine", "min_top1_agreement", "min_map")
        if not math.isfinite(value) or value < 0 or (bounded and value > 1):
            expected = "a number in [0, 1]" if bounded else "a finite number ≥ 0"
            raise UsageError(
                f"--{key.replace('_', '-')} {value:g} | expected {expected}.",
                hint="e.g. --atol 1e-4 --rtol 1e-3, --min-cosine 0.99, --min-map 0.9.",
            )
    return replace(base, **given)


def is_reduced(precision: str | None) -> bool:
    """True for precisions judged by similarity and task metrics instead of element-wise."""
    return normalize_precision(precision) not in ELEMENTWISE_PRECISIONS


@dataclass
class OutputMetrics:
    """How one output of one input set compares with its reference.

    ``passed`` is by the rule named in ``rule``; ``degenerate`` says why the reference carries no
    information (then agreement proves nothing). The worst element is the one furthest past the
    element-wise tolerance (the one that fails first), or the largest absolute error when all pass.
    """

    name: str
    case: int
    rule: str
    passed: bool
    max_abs_error: float
    max_rel_error: float
    cosine: float | None
    snr_db: float | None
    worst_index: tuple[int, ...] | None = None
    worst_value: float | None = None
    worst_reference: float | None = None
    problem: str | None = None
    degenerate: str | None = None
    atol_scaled: float | None = None
    """The absolute tolerance used when ``atol`` was too large for this reference (``ATOL_SHARE_OF_PEAK``
    of its peak magnitude); None when the given ``atol`` judged."""

    def describe(self) -> str:
        prefix = f"output '{self.name}'" + (f" (input set {self.case})" if self.case else "")
        if self.problem:
            return f"{prefix} | {self.problem}"
        cosine = "undefined" if self.cosine is None else f"{self.cosine:.6f}"
        snr = "∞" if self.snr_db is None or math.isinf(self.snr_db) else f"{self.snr_db:.1f} dB"
        text = (
            f"{prefix} | max abs error {self.max_abs_error:.3g}, max rel error {self.max_rel_error:.3g}, "
            f"cosine {cosine}, SNR {snr}"
        )
        if not self.passed and self.worst_index is not None and self.rule.startswith("element-wise"):
            text += (
                f"; worst element {list(self.worst_index)}: {self.worst_value!r} vs reference {self.worst_reference!r}"
            )
        if self.atol_scaled is not None:
            text += f"; {scaled_note(self.atol_scaled)}"
        if self.degenerate:
            text += f"; reference is degenerate: {self.degenerate}"
        return text

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["worst_index"] = None if self.worst_index is None else list(self.worst_index)
        for key in ("max_abs_error", "max_rel_error", "snr_db", "cosine"):
            value = data[key]
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutputMetrics:
        """The metrics ``to_dict`` wrote: ``"inf"``/``"-inf"`` back to floats, a missing error to NaN."""

        def number(value: Any, missing: float | None) -> float | None:
            return missing if value is None else float(value)

        index = data.get("worst_index")
        return cls(
            name=data["name"],
            case=int(data.get("case", 0)),
            rule=data["rule"],
            passed=bool(data["passed"]),
            max_abs_error=number(data.get("max_abs_error"), math.nan),  # type: ignore[arg-type]
            max_rel_error=number(data.get("max_rel_error"), math.nan),  # type: ignore[arg-type]
            cosine=number(data.get("cosine"), None),
            snr_db=number(data.get("snr_db"), None),
            worst_index=None if index is None else tuple(index),
            worst_value=data.get("worst_value"),
            worst_reference=data.get("worst_reference"),
            problem=data.get("problem"),
            degenerate=data.get("degenerate"),
            atol_scaled=number(data.get("atol_scaled"), None),
        )


def scaled_atol(atol: float, reference: np.ndarray) -> float | None:
    """The absolute tolerance a reference this small needs (``ATOL_SHARE_OF_PEAK`` of its peak
    magnitude), or None when ``atol`` already is no more than that share (it can tell wrong from right)."""
    peak = float(np.abs(reference).max()) if reference.size else 0.0
    share = ATOL_SHARE_OF_PEAK * peak
    return share if atol > share else None


def scaled_note(atol_scaled: float) -> str:
    """How a scaled tolerance is said on a row: what judged, and why."""
    peak = atol_scaled / ATOL_SHARE_OF_PEAK
    return (
        f"the reference peaks at {peak:.3g}, too small for atol to tell a wrong answer from a right one, so atol "
        f"was scaled to {ATOL_SHARE_OF_PEAK:g} of that peak: {atol_scaled:.3g}"
    )


def _failed(name: str, case: int, rule: str, problem: str) -> OutputMetrics:
    return OutputMetrics(name, case, rule, False, math.inf, math.inf, None, None, problem=problem)


def _as_bytes(value: Any) -> bytes:
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else bytes(value)


def _compare_text(name: str, actual: np.ndarray, reference: np.ndarray, case: int) -> OutputMetrics:
    """String outputs compared element by element as bytes (runtimes return str or bytes)."""
    for index in np.ndindex(reference.shape):
        got, expected = actual[index], reference[index]
        got, expected = (v.item() if isinstance(v, np.generic) else v for v in (got, expected))
        try:
            same = _as_bytes(got) == _as_bytes(expected)
        except TypeError:  # a number where text was expected (or the other way): not the same value
            same = False
        if not same:
            where = list(index)
            return _failed(
                name,
                case,
                "exact",
                f"element {where} is {one_line(repr(got))}, the reference's "
                f"{one_line(repr(expected))} (text is compared exactly)",
            )
    return OutputMetrics(name, case, "exact", True, 0.0, 0.0, None, None)


def degeneracy(
    reference: np.ndarray, candidate: np.ndarray | None = None, dtype: np.dtype[Any] | None = None
) -> str | None:
    """Why a reference output says nothing, or None: NaN/inf where the candidate has numbers, constant, or
    (for a floating ``dtype``, default the reference's own) every magnitude below that type's smallest
    normal number."""
    if reference.size == 0:
        return None
    finite = np.isfinite(reference)
    if not finite.all():
        nan = int(np.isnan(reference).sum())
        if nan:  # a NaN says the reference computed nothing there, even where the candidate agrees
            return f"it holds NaN ({nan} of {reference.size} elements)"
        if not finite.any():  # an output that overflowed everywhere: agreeing on infinity proves nothing
            return f"every element is ±infinity ({reference.size} of {reference.size})"
        if candidate is None or not np.array_equal(np.isfinite(candidate), finite):
            return "it holds infinity where the candidate has numbers"
        return None  # infinities at some positions (a -inf mask), matched by the candidate, finite elsewhere
    if reference.size > 1 and float(reference.max()) == float(reference.min()):
        value = float(reference.flat[0])
        return "all zero" if value == 0 else f"constant ({value:g})"
    dtype = np.dtype(dtype or reference.dtype)
    if dtype.kind == "f":
        # below the smallest normal number precision is lost with every operation: no tolerance means anything
        peak = float(np.abs(reference).max())
        if 0 < peak < float(np.finfo(dtype).tiny):
            return f"its largest magnitude {peak:.3g} is below {dtype.name}'s smallest normal number"
    return None


def cosine_snr(reference: np.ndarray, candidate: np.ndarray) -> tuple[float | None, float]:
    """Cosine similarity and SNR in dB (``10 log10(|ref|² / |ref − cand|²)``) of two arrays, flattened.

    Both are computed in float64. The cosine is None when either array is all zero (it is
    undefined there); the SNR is ``inf`` when the arrays are equal and ``-inf`` when they differ
    and the reference is all zero. Non-finite elements are the caller's to mask (``compare_array``
    does): with them the two numbers mean nothing.
    """
    ref = np.asarray(reference, np.float64).ravel()
    cand = np.asarray(candidate, np.float64).ravel()
    norm = float(np.linalg.norm(ref) * np.linalg.norm(cand))
    cosine = float(np.dot(ref, cand) / norm) if norm > 0 else None
    diff = ref - cand
    signal, noise = float(np.sum(ref * ref)), float(np.sum(diff * diff))
    snr_db = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
    return cosine, snr_db


def compare_array(
    name: str, actual: np.ndarray, reference: np.ndarray, thresholds: Thresholds, *, reduced: bool, case: int = 0
) -> OutputMetrics:
    """Compare one output with its reference by the rule of the candidate's precision."""
    rule = "cosine/SNR" if reduced else "element-wise"
    actual, reference = np.asarray(actual), np.asarray(reference)
    if actual.shape != reference.shape:
        return _failed(name, case, rule, f"shape {actual.shape} differs from the reference's {reference.shape}")
    if actual.dtype.kind in "OSU" or reference.dtype.kind in "OSU":  # text: equal or not, no tolerance
        return _compare_text(name, actual, reference, case)
    if actual.size == 0:  # agreeing on no values proves nothing: with only empty outputs the verdict is degenerate
        empty = f"it is empty (shape {reference.shape})"
        return OutputMetrics(name, case, rule, True, 0.0, 0.0, None, None, degenerate=empty)
    a = actual.astype(np.float64)
    b = reference.astype(np.float64)
    degenerate = degeneracy(b, a, reference.dtype)
    if degenerate and not np.isfinite(b).all():  # the reference, not the candidate, is broken
        return OutputMetrics(name, case, rule, True, math.inf, math.inf, None, None, degenerate=degenerate)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if not np.array_equal(nan_a, nan_b) or not np.array_equal(np.isinf(a), np.isinf(b)):
        metrics = _failed(name, case, rule, "NaN or infinity at other positions than in the reference")
        metrics.degenerate = degenerate
        return metrics
    finite = np.isfinite(a) & np.isfinite(b)
    inf_mismatch = bool(np.any(~finite & ~nan_a & (a != b)))
    a_f = np.where(finite, a, 0.0)
    b_f = np.where(finite, b, 0.0)
    diff = np.abs(a_f - b_f)
    atol_scaled = None if reduced else scaled_atol(thresholds.atol, b_f)
    atol = thresholds.atol if atol_scaled is None else atol_scaled
    allowed = atol + thresholds.rtol * np.abs(b_f)
    excess = diff - allowed
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    rel = diff / np.maximum(np.abs(b_f), max(atol, np.finfo(np.float64).tiny))
    cosine, snr_db = cosine_snr(b_f, a_f)
    if reduced:
        passed = (cosine if cosine is not None else float(np.array_equal(a_f, b_f))) >= thresholds.min_cosine
        passed = passed and snr_db >= thresholds.min_snr_db
    else:
        passed = bool(excess[worst] <= 0)
    return OutputMetrics(
        name=name,
        case=case,
        rule=rule if atol_scaled is None else SCALED_RULE,
        passed=passed and not inf_mismatch,
        max_abs_error=float(diff.max()),
        max_rel_error=float(rel.max()),
        cosine=cosine,
        snr_db=snr_db,
        worst_index=tuple(int(i) for i in worst),
        worst_value=float(a[worst]),
        worst_reference=float(b[worst]),
        problem="infinity with another sign than in the reference" if inf_mismatch else None,
        degenerate=degenerate,
        atol_scaled=atol_scaled,
    )


def compare_outputs(
    actual: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    thresholds: Thresholds,
    *,
    reduced: bool = False,
    case: int = 0,
) -> list[OutputMetrics]:
    """Every reference output against the candidate's output of the same name."""
    rule = "cosine/SNR" if reduced else "element-wise"
    return [
        compare_array(name, actual[name], ref, thresholds, reduced=reduced, case=case)
        if name in actual
        else _failed(name, case, rule, "missing from the candidate's outputs")
        for name, ref in reference.items()
    ]


def uncomparable(model: Any) -> str | None:
    """Why no element-wise comparison can judge ``model`` (an ``onnx.ModelProto``) against any
    oracle, reference or backend: an op whose results the ONNX spec leaves in an order each runtime
    chooses (``TopK`` with ``sorted=0``): one right answer of many, which another right answer
    would "fail". None when there is no such op. The verdicts are then ``unverified`` with this reason.
    """
    from deploykit.model import walk_nodes

    for node in walk_nodes(model.graph):
        if node.op_type == "TopK" and node.domain in ("", "ai.onnx"):
            if any(a.name == "sorted" and a.i == 0 for a in node.attribute):
                return (
                    f"TopK with sorted=0 (node '{node.name or node.output[0]}') returns its k results in an order "
                    "the ONNX spec leaves to each runtime, so no element-wise comparison can judge them"
                )
    return None
