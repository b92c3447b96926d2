"""INT8 and float16 models from float ONNX models, with their accuracy delta and speedup measured.

``quantize`` (in ``api``) is the entry point; ``calibration`` turns images into calibration and
held-out samples, ``graph`` holds the graph facts (already quantized? the YOLO head?), ``engines``
wraps ONNX Runtime, NNCF and onnxconverter-common, ``evaluate`` measures the result, ``results``
holds the typed report (``QuantizeReport`` with its ``AccuracyDelta``, ``SpeedComparison`` ...).

The package and its function share the name, so the package itself is callable:
``deploykit.quantize("model.onnx", "model.int8.onnx", calibrate="photos/")`` is ``quantize(...)``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from deploykit.quantize.api import parse_drop, quantize, read_metadata
from deploykit.quantize.results import (
    AccuracyDelta,
    DetectionDelta,
    LayerDivergence,
    OutputSimilarity,
    QuantizeReport,
    SpeedComparison,
    SpeedRounds,
    SpeedRow,
)
from deploykit.quantize.settings import QuantizeSettings


class _CallablePackage(types.ModuleType):
    # a function bound as deploykit.quantize would hide this package from 'import deploykit.quantize.x'
    def __call__(self, *args: Any, **kwargs: Any) -> QuantizeReport:
        return quantize(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage

__all__ = [
    "AccuracyDelta",
    "DetectionDelta",
    "LayerDivergence",
    "OutputSimilarity",
    "QuantizeReport",
    "QuantizeSettings",
    "SpeedComparison",
    "SpeedRounds",
    "SpeedRow",
    "parse_drop",
    "quantize",
    "read_metadata",
]
