"""Triton's model-configuration extension: what a served model is, in ``ModelConfig``'s JSON form.

Tools built for Triton (``perf_analyzer``, ``model_analyzer``, ``tritonclient.get_model_config``) read
a model's configuration before they send anything: its inputs and outputs (``TYPE_FP32`` ... and
``dims``), ``max_batch_size``, dynamic batching and instance groups. This module writes that
description from what the server really runs, and nothing it does not: ``platform`` and ``backend``
name deploykit's backend, never a Triton platform (``onnxruntime_onnx``) whose options would not
apply; the device is in the instance group's kind and in ``parameters``. The HTTP front end sends the
dict as JSON; the gRPC one parses it into ``ModelConfigResponse``. No runtime or framework is imported.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from deploykit.serve.protocol import v2_datatype, v2_shape

if TYPE_CHECKING:
    from deploykit.serve.runner import ModelRunner
    from deploykit.tensors import TensorSpec

# Triton's DataType names are the v2 datatype names with a prefix, except BYTES, which Triton calls STRING
_STRING = "BYTES"


def data_type(spec: TensorSpec) -> str:
    """Triton's ``DataType`` name for a tensor (``TYPE_FP32``, ``TYPE_INT64`` ...)."""
    name = v2_datatype(spec.dtype)
    return "TYPE_STRING" if name == _STRING else f"TYPE_{name}"


def dims(spec: TensorSpec, batched: bool) -> list[int]:
    """The tensor's dims as the configuration writes them: ``-1`` for a dynamic axis, and without the
    batch axis when the model batches (``max_batch_size > 0``), as Triton does."""
    shape = v2_shape(spec) if spec.shape is not None else [-1]
    return shape[1:] if batched else shape


def instance_kind(device: str | None) -> tuple[str, list[int]]:
    """``KIND_CPU`` / ``KIND_GPU`` (with the GPU's index when the device names one) / ``KIND_MODEL``
    for any other device (an NPU, OpenVINO's ``AUTO``): where the backend, not Triton, places it."""
    text = (device or "cpu").lower()
    if text.startswith("cpu"):
        return "KIND_CPU", []
    match = re.fullmatch(r"(?:cuda|gpu|tensorrt)(?::|\.)?(\d+)?", text)
    if match:
        return "KIND_GPU", [int(match.group(1) or 0)]
    return "KIND_MODEL", []


def _tensor(spec: TensorSpec, batched: bool) -> dict[str, Any]:
    return {"name": spec.name, "data_type": data_type(spec), "dims": dims(spec, batched)}


def model_config(runner: ModelRunner, platform: str) -> dict[str, Any]:
    """The model's ``ModelConfig`` (Triton's JSON form) as this server runs it."""
    described = runner.describe()
    batched = bool(described["dynamic_batching"])
    kind, gpus = instance_kind(described["device"])
    group: dict[str, Any] = {"name": runner.model.name, "kind": kind, "count": runner.model.instances}
    if gpus:
        group["gpus"] = gpus
    parameters = {
        key: str(described[key]) for key in ("backend", "device", "precision", "verdict") if described[key] is not None
    }
    config: dict[str, Any] = {
        "name": runner.model.name,
        "platform": platform,
        "backend": str(described["backend"]),
        "max_batch_size": runner.policy.max_batch if batched else 0,
        "input": [_tensor(s, batched) for s in runner.inputs.values()],
        "output": [_tensor(s, batched) for s in runner.outputs.values()],
        "instance_group": [group],
        "parameters": {key: {"string_value": value} for key, value in parameters.items()},
    }
    if batched:
        config["dynamic_batching"] = {"max_queue_delay_microseconds": round(runner.policy.max_queue_delay_ms * 1000)}
    return config
