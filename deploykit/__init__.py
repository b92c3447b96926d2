"""deploykit: convert models to ONNX and run them on ONNX Runtime, OpenVINO or OpenCV DNN.

The public API::

    import deploykit
    with deploykit.load("model.onnx", backend="openvino", device="CPU") as session:
        outputs = session.run({"images": x})
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from deploykit._version import __version__
from deploykit.backends.base import Backend, Session, SessionInfo
from deploykit.backends.options import OptionValue
from deploykit.backends.registry import all_backends, backend_names, get_backend
from deploykit.errors import (
    BackendError,
    BackendUnavailableError,
    BundleError,
    ConversionError,
    DeployKitError,
    DeviceUnavailableError,
    InputError,
    InvalidModelError,
    MetadataError,
    ModelError,
    ModelNotFoundError,
    OracleError,
    OutputError,
    ParityError,
    QuantizationError,
    ReportError,
    ServeError,
    UnknownBackendError,
    UnsupportedLayerError,
    UnsupportedModelError,
    UsageError,
)
from deploykit.inputs import make_inputs
from deploykit.model import Model, summarize
from deploykit.tensors import TensorSpec
from deploykit.verify import OracleInfo, Thresholds, Verdict, VerificationReport, verify_model

if TYPE_CHECKING:  # the real objects, typed; imported on first use so workers and --help start fast
    from deploykit import optimize, quantize, serve
    from deploykit.bench.report import BenchmarkReport
    from deploykit.bench.rows import Row
    from deploykit.bench.runner import benchmark
    from deploykit.convert.darknet.convert import convert_darknet
    from deploykit.convert.report import ConversionReport
    from deploykit.convert.torch import convert_torch
    from deploykit.optimize import OptimizeReport
    from deploykit.quantize import QuantizeReport
    from deploykit.vision.pipelines import Classifier, Detector
    from deploykit.vision.results import Classification, Detection, draw

_LAZY = {
    "BenchmarkReport": "deploykit.bench.report",
    "BenchmarkResult": "deploykit.bench.report",  # the earlier name of BenchmarkReport, not in __all__
    "Row": "deploykit.bench.rows",
    "benchmark": "deploykit.bench.runner",
    "convert_darknet": "deploykit.convert.darknet.convert",
    "ConversionReport": "deploykit.convert.report",
    "convert_torch": "deploykit.convert.torch",
    "QuantizeReport": "deploykit.quantize",
    "OptimizeReport": "deploykit.optimize",
    "Detector": "deploykit.vision.pipelines",
    "Classifier": "deploykit.vision.pipelines",
    "Detection": "deploykit.vision.results",
    "Classification": "deploykit.vision.results",
    "draw": "deploykit.vision.results",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in ("quantize", "optimize", "ray", "serve"):  # subpackages; quantize, optimize and serve are callable
        return importlib.import_module(f"deploykit.{name}")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'deploykit' has no attribute {name!r}")


def load(
    model: Model | str | os.PathLike[str],
    backend: str | None = None,
    device: str | None = None,
    *,
    allow_fallback: bool = False,
    **options: OptionValue,
) -> Session:
    """Load a model on a backend and device.

    Args:
        model: a ``Model`` (``deploykit.model.Model.open``: read once, not again here), the path of an
            ``.onnx`` file (or a Darknet ``.cfg`` for OpenCV 4.x), or a bundle folder
            written by ``deploykit optimize -o``: then its chosen model file opens on its chosen
            backend, device, precision and threads (``deploykit.optimize.bundle.open_bundle``).
        backend: ``onnxruntime``/``ort`` (the default), ``openvino``/``ov``, ``opencv``/``cv`` or a plug-in.
        device: the backend's device name; its default device (the CPU) when omitted.
        allow_fallback: run on the CPU when the device cannot be used and report it in
            ``session.info.fallback``; otherwise that is a ``DeviceUnavailableError``.
        **options: backend options, e.g. ``threads=2`` or OpenVINO's ``precision="f32"``.

    Returns:
        an open ``Session``; use it as a context manager. The session runs the runtime in this
        process: a runtime that crashes ends it (``deploykit run`` and ``compare`` use worker
        processes instead; see docs/conformance.md).
    """
    if not isinstance(model, Model) and os.path.isdir(model):
        from deploykit.optimize.bundle import open_bundle

        return open_bundle(model, backend=backend, device=device, allow_fallback=allow_fallback, **options)
    return get_backend(backend or "onnxruntime").open(model, device, allow_fallback=allow_fallback, **options)


__all__ = [  # noqa: RUF022  (grouped: classes, then functions)
    "Classification",
    "Classifier",
    "Detection",
    "Detector",
    "draw",
    "Backend",
    "BackendError",
    "BackendUnavailableError",
    "BundleError",
    "ConversionError",
    "DeployKitError",
    "DeviceUnavailableError",
    "InputError",
    "InvalidModelError",
    "MetadataError",
    "Model",
    "ModelError",
    "ModelNotFoundError",
    "OracleError",
    "OutputError",
    "ParityError",
    "QuantizationError",
    "ReportError",
    "ServeError",
    "Session",
    "SessionInfo",
    "TensorSpec",
    "UnknownBackendError",
    "UnsupportedLayerError",
    "UnsupportedModelError",
    "UsageError",
    "__version__",
    "all_backends",
    "backend_names",
    "BenchmarkReport",
    "Row",
    "ConversionReport",
    "OracleInfo",
    "Thresholds",
    "Verdict",
    "VerificationReport",
    "benchmark",
    "verify_model",
    "convert_darknet",
    "convert_torch",
    "get_backend",
    "load",
    "make_inputs",
    "QuantizeReport",
    "quantize",
    "OptimizeReport",
    "optimize",
    "serve",
    "summarize",
]
