"""deploykit: convert models to ONNX and run them on ONNX Runtime, OpenVINO, OpenCV DNN or ncnn.

The public API::

    import deploykit
    with deploykit.load("model.onnx", backend="openvino", device="CPU") as session:
        outputs = session.run({"images": x})

It mirrors the commands, one function each: ``convert torch`` → ``convert_torch``, ``convert darknet``
→ ``convert_darknet``, ``compare`` → ``compare``, ``bench`` → ``benchmark``,
``quantize``, ``optimize``, ``predict``, ``serve``, ``export`` → ``export_ncnn``, ``inspect`` →
``summarize``, ``run`` → ``load``, ``backends`` → ``all_backends``; ``report`` reads
``BenchmarkReport.from_json``. (``tests/test_public_api.py`` holds the table.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deploykit._version import __version__
from deploykit.quiet import silence_telemetry

# Every process that imports deploykit (the CLI, its workers, an app) does so before any runtime, which
# deploykit imports lazily: the telemetry those runtimes would load is off before they can load it.
silence_telemetry()

# Everything is imported on first use: `deploykit` (the command) installs its signal
# policy before anything heavy loads, and workers and --help start fast.
if TYPE_CHECKING:  # the real objects, typed
    from deploykit import optimize, quantize, serve
    from deploykit.backends.base import Backend, Session, SessionInfo
    from deploykit.backends.registry import all_backends, backend_names, get_backend
    from deploykit.bench.plan import BenchPlan
    from deploykit.bench.report import BenchmarkReport
    from deploykit.bench.rows import Row
    from deploykit.bench.runner import benchmark
    from deploykit.convert.darknet.convert import convert_darknet
    from deploykit.convert.darknet.settings import DarknetExportSettings
    from deploykit.convert.report import ConversionReport
    from deploykit.convert.torch import convert_torch
    from deploykit.convert.torch_stage import TorchExportSettings
    from deploykit.distributed.batch import predict
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
        ResourceError,
        ServeError,
        UnknownBackendError,
        UnsupportedLayerError,
        UnsupportedModelError,
        UsageError,
    )
    from deploykit.export import export_ncnn
    from deploykit.inputs import make_inputs
    from deploykit.model import Model, summarize
    from deploykit.optimize import OptimizePlan, OptimizeReport
    from deploykit.quantize import QuantizeReport, QuantizeSettings
    from deploykit.sessions import load
    from deploykit.tensors import TensorSpec
    from deploykit.verify import (
        OracleInfo,
        ThresholdOverrides,
        Thresholds,
        Verdict,
        VerificationReport,
        VerifySettings,
        compare,
    )
    from deploykit.verify.check import verify_model as verify_model  # 0.1's name of compare, deprecated
    from deploykit.vision.pipelines import Classifier, Detector
    from deploykit.vision.preprocess import PreprocessOverrides
    from deploykit.vision.results import Classification, Detection, draw

_LAZY = {
    "BackendError": "deploykit.errors",
    "BackendUnavailableError": "deploykit.errors",
    "BundleError": "deploykit.errors",
    "ConversionError": "deploykit.errors",
    "DeployKitError": "deploykit.errors",
    "DeviceUnavailableError": "deploykit.errors",
    "InputError": "deploykit.errors",
    "InvalidModelError": "deploykit.errors",
    "MetadataError": "deploykit.errors",
    "ModelError": "deploykit.errors",
    "ModelNotFoundError": "deploykit.errors",
    "OracleError": "deploykit.errors",
    "OutputError": "deploykit.errors",
    "ParityError": "deploykit.errors",
    "QuantizationError": "deploykit.errors",
    "ReportError": "deploykit.errors",
    "ResourceError": "deploykit.errors",
    "ServeError": "deploykit.errors",
    "UnknownBackendError": "deploykit.errors",
    "UnsupportedLayerError": "deploykit.errors",
    "UnsupportedModelError": "deploykit.errors",
    "UsageError": "deploykit.errors",
    "Backend": "deploykit.backends.base",
    "Session": "deploykit.backends.base",
    "SessionInfo": "deploykit.backends.base",
    "all_backends": "deploykit.backends.registry",
    "backend_names": "deploykit.backends.registry",
    "get_backend": "deploykit.backends.registry",
    "make_inputs": "deploykit.inputs",
    "Model": "deploykit.model",
    "summarize": "deploykit.model",
    "load": "deploykit.sessions",
    "TensorSpec": "deploykit.tensors",
    "OracleInfo": "deploykit.verify",
    "ThresholdOverrides": "deploykit.verify",
    "Thresholds": "deploykit.verify",
    "Verdict": "deploykit.verify",
    "VerificationReport": "deploykit.verify",
    "VerifySettings": "deploykit.verify",
    "compare": "deploykit.verify",
    "verify_model": "deploykit.verify.check",  # 0.1's name of compare: deprecated, not in __all__
    "BenchPlan": "deploykit.bench.plan",
    "QuantizeSettings": "deploykit.quantize.settings",
    "OptimizePlan": "deploykit.optimize.plan",
    "TorchExportSettings": "deploykit.convert.torch_stage",
    "DarknetExportSettings": "deploykit.convert.darknet.settings",
    "BenchmarkReport": "deploykit.bench.report",
    "Row": "deploykit.bench.rows",
    "benchmark": "deploykit.bench.runner",
    "convert_darknet": "deploykit.convert.darknet.convert",
    "ConversionReport": "deploykit.convert.report",
    "convert_torch": "deploykit.convert.torch",
    "predict": "deploykit.distributed.batch",
    "export_ncnn": "deploykit.export",
    "QuantizeReport": "deploykit.quantize",
    "OptimizeReport": "deploykit.optimize",
    "Detector": "deploykit.vision.pipelines",
    "Classifier": "deploykit.vision.pipelines",
    "PreprocessOverrides": "deploykit.vision.preprocess",
    "Detection": "deploykit.vision.results",
    "Classification": "deploykit.vision.results",
    "draw": "deploykit.vision.results",
}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):  # a submodule (quantize, optimize and serve are callable ones), on first use
        try:
            return importlib.import_module(f"deploykit.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"deploykit.{name}":
                raise
    raise AttributeError(f"module 'deploykit' has no attribute {name!r}")


__all__ = [  # noqa: RUF022  (grouped: classes, then functions)
    "Classification",
    "Classifier",
    "Detection",
    "Detector",
    "PreprocessOverrides",
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
    "ResourceError",
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
    "ThresholdOverrides",
    "Thresholds",
    "Verdict",
    "VerificationReport",
    "VerifySettings",
    "BenchPlan",
    "benchmark",
    "compare",
    "DarknetExportSettings",
    "TorchExportSettings",
    "convert_darknet",
    "convert_torch",
    "export_ncnn",
    "get_backend",
    "load",
    "make_inputs",
    "QuantizeReport",
    "QuantizeSettings",
    "quantize",
    "OptimizePlan",
    "OptimizeReport",
    "optimize",
    "predict",
    "serve",
    "summarize",
]
