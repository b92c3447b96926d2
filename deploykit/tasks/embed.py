"""The ``embed`` task: does a candidate encoder give the embedding the reference gives?

An encoder (an image backbone without its classifier, a sentence encoder) answers with a vector
per input; what matters downstream (retrieval, clustering, a similarity search) is its direction.
Each input's embedding is pooled to one vector — (N, D) as is, token embeddings (N, T, D) averaged
over the tokens, feature maps (N, C, H, W) averaged over the positions — and the metric is the
cosine similarity of the candidate's vector with the reference's, the worst over all inputs.

A model is an encoder when its metadata says so (``deploykit.task = "embed"``): an (N, D) output
looks like a classifier's, so the task is never guessed from shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from deploykit.tasks.base import Outputs, Task
from deploykit.tensors import TensorSpec

# The minimum cosine of every input's pooled embedding, by the candidate's precision. f32 runtimes
# differ in summation order only (ONNX Runtime against PyTorch: > 0.99999); f16 keeps ~3 decimal
# digits; ORT's INT8 QDQ of MobileNetV2's backbone measured 0.985 (worst) / 0.991 (mean) on 7 of
# Darknet's photos (deploykit quantize, 2026-12-02), so int8 gets INT8's per-output 0.97.
MIN_COSINE = {"f64": 0.9999, "f32": 0.999, "f16": 0.999, "bf16": 0.99, "int8": 0.97}


def pooled(array: np.ndarray) -> np.ndarray:
    """One vector per input row: (N, D) as is, (N, T, D) the mean over T, (N, C, H, W) over H and W."""
    values = np.asarray(array, dtype=np.float64)
    if values.ndim == 3:
        return values.mean(axis=1)
    if values.ndim >= 4:
        return values.reshape(values.shape[0], values.shape[1], -1).mean(axis=2)
    return values.reshape(values.shape[0], -1)


def cosines(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity; 1.0 where both rows are zero, 0.0 where only one is."""
    dot = np.sum(reference * candidate, axis=1)
    norms = np.linalg.norm(reference, axis=1) * np.linalg.norm(candidate, axis=1)
    both_zero = (np.linalg.norm(reference, axis=1) == 0) & (np.linalg.norm(candidate, axis=1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(norms > 0, dot / np.where(norms > 0, norms, 1.0), 0.0)
    return np.where(both_zero, 1.0, value)


class EmbedTask(Task):
    """Encoders: the worst cosine similarity of pooled embeddings with the reference's."""

    name = "embed"
    metric = "embedding cosine"

    def __init__(self, output: str) -> None:
        self.output = output

    @classmethod
    def recognise(
        cls, outputs: Mapping[str, TensorSpec], metadata: Mapping[str, str], stated: str | None
    ) -> Task | None:
        if stated != cls.name:
            return None
        ranked = [spec for spec in outputs.values() if spec.shape is None or len(spec.shape) >= 2]
        return cls(ranked[0].name) if ranked else None

    def decode(self, outputs: Outputs, feeds: Outputs, *, reference: bool) -> np.ndarray:
        return pooled(outputs[self.output])

    def agreement(self, reference: Sequence[Any], candidate: Sequence[Any]) -> tuple[float, dict[str, Any]]:
        expected, found = np.concatenate(reference), np.concatenate(candidate)
        if expected.shape != found.shape:
            return 0.0, {"problem": f"embedding shapes differ: {found.shape} against the reference's {expected.shape}"}
        measured = cosines(expected, found)
        return float(measured.min()), {
            "samples": int(measured.size),
            "output": self.output,
            "dimensions": int(expected.shape[1]),
            "min_cosine": float(measured.min()),
            "mean_cosine": float(measured.mean()),
        }

    def threshold(self, thresholds: Any, precision: str | None) -> float:
        from deploykit.tensors import normalize_precision

        return MIN_COSINE.get(normalize_precision(precision), MIN_COSINE["f16"])
