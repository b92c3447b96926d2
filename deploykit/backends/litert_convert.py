"""ONNX → LiteRT ``.tflite`` with onnx2tf, in the ``litert`` converter environment, once per model.

onnx2tf and TensorFlow never load in deploykit's process: the job runs with the environment's
Python (``deploykit.converters``), offline, as a worker (``deploykit.workers``: JSON job on stdin,
one result line). The job script (``litert_job/deploykit_litert_job.py``) imports only the standard
library and onnx2tf.

The conversions live in the shared converted-model cache (``deploykit.backends.converted``, kind
``litert``): an entry keyed by the model's SHA-256, the environment's pins, the weights asked for and
the input shapes holds ``model.tflite``; it is built once under a lock and rebuilt when its file no
longer matches its record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deploykit.backends.converted import converted as cached_conversion
from deploykit.errors import UnsupportedModelError
from deploykit.model import Model

ENTRY_VERSION = 2  # 2: the shared converted-model cache's entry.json
TFLITE_NAME = "model.tflite"
CONVERT_TIMEOUT_S = 1800
JOB_DIRECTORY = Path(__file__).with_name("litert_job")
JOB_MODULE = "deploykit_litert_job"


def fixed_shapes(model: Model) -> dict[str, list[int]]:
    """Each input's shape for onnx2tf, which converts at fixed shapes: a dynamic first axis (the batch)
    becomes 1; any other dynamic axis is refused by name.

    Raises:
        UnsupportedModelError: an input with an unknown rank or a dynamic axis after the first.
    """
    shapes = {}
    for spec in model.inputs:
        if spec.shape is None or any(not isinstance(d, int) or d < 0 for d in spec.shape[1:]):
            dynamic = [
                f"'{d}'" if isinstance(d, str) else "?" for d in (spec.shape or ())[1:] if not isinstance(d, int)
            ]
            raise UnsupportedModelError(
                f"backend 'litert' | input '{spec.name}' of '{model.path.name}' has the shape {spec.shape_text()} "
                f"(dynamic: {', '.join(dynamic) or 'its rank'}); onnx2tf converts at fixed sizes (a dynamic batch "
                "axis becomes 1).",
                hint="fix the input's sizes in the ONNX model (e.g. export it at a fixed image size), or use another "
                "backend.",
            )
        first = spec.shape[0] if spec.shape else None
        rest = [d for d in spec.shape[1:] if isinstance(d, int)]
        shapes[spec.name] = [first if isinstance(first, int) and first > 0 else 1, *rest] if spec.shape else []
    return shapes


def entry_key(model: Model, weights: str, pins_sha256: str) -> dict[str, Any]:
    return {
        "entry_version": ENTRY_VERSION,
        "model_sha256": model.sha256,
        "pins_sha256": pins_sha256,
        "weights": weights,
        "shapes": fixed_shapes(model),
    }


def converted(model: Model, weights: str, *, timeout_s: float = CONVERT_TIMEOUT_S) -> Path:
    """The cached ``.tflite`` of ``model`` with ``weights`` (``f32``, ``f16`` or ``int8`` dynamic range),
    converted now if it is not cached yet.

    Raises:
        BackendUnavailableError: the ``litert`` converter environment is not ready (the hint creates it).
        UnsupportedModelError: onnx2tf cannot convert the model (its reason), or the shapes are not fixed.
    """
    from deploykit.converters import get_environment

    environment = get_environment("litert").require("converting ONNX to LiteRT (onnx2tf)")
    key = entry_key(model, weights, environment.pins_sha256())

    def build(out: Path) -> None:
        _run_job(model, weights, key["shapes"], out, environment, timeout_s)

    return cached_conversion("litert", key, build).path(TFLITE_NAME)


def _run_job(
    model: Model, weights: str, shapes: dict[str, list[int]], out: Path, environment: Any, timeout_s: float
) -> None:
    from deploykit.workers import Interpreter, rebuild_error, run_worker

    interpreter = Interpreter(
        (str(environment.python),),
        {**environment.worker_environment(), "PYTHONPATH": str(JOB_DIRECTORY)},
    )
    job = {
        "label": f"onnx2tf {model.path.name}",
        "model": str(model.path.resolve()),
        "output": str(out),
        "weights": weights,
        "shapes": shapes,
    }
    outcome = run_worker(JOB_MODULE, job, timeout_s=timeout_s, interpreter=interpreter)
    result = outcome.result
    if result is not None and "error_data" in result:
        raise rebuild_error(result["error_data"], UnsupportedModelError)
    if result is None or not (out / TFLITE_NAME).is_file():
        raise UnsupportedModelError(
            f"backend 'litert' | onnx2tf could not convert '{model.path.name}': {outcome.error or 'it wrote no file'}.",
            hint="try another backend, or 'deploykit inspect' the model for ops onnx2tf lacks.",
        )
