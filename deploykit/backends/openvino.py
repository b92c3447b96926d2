"""OpenVINO backend: devices from ``Core.available_devices`` plus ``AUTO``/``MULTI``/``HETERO``.

Precision is reported as the compiled model states it (CPUs with bf16 units
default to bf16). Models with dynamic inputs are reshaped to the feed's shape
and compiled once per distinct shape, so static-shape kernels run.
"""

from __future__ import annotations

import queue
import threading
from collections import OrderedDict
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.base import Backend, Session, SessionInfo
from deploykit.errors import UnsupportedModelError, UsageError
from deploykit.model import load_onnx, read_interface
from deploykit.tensors import TensorSpec

_PRECISIONS = {"f32": "f32", "fp32": "f32", "bf16": "bf16", "f16": "f16", "fp16": "f16"}
_HINTS = {
    "latency": "LATENCY",
    "throughput": "THROUGHPUT",
    "cumulative_throughput": "CUMULATIVE_THROUGHPUT",
}
_VIRTUAL_DEVICES = ("AUTO", "MULTI", "HETERO", "BATCH")
_SHAPE_CACHE_SIZE = 4


@cache
def _core() -> Any:
    import openvino as ov

    return ov.Core()


def precision_name(element_type: Any) -> str:
    """OpenVINO element type → ``f32`` / ``bf16`` / ``f16`` ..."""
    get_name = getattr(element_type, "get_type_name", None)
    text = get_name() if callable(get_name) else str(element_type)
    return {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}.get(text, text)


class OpenVinoBackend(Backend):
    """Intel OpenVINO: CPU (oneDNN/MKL-class kernels), GPU, NPU and the AUTO plug-in."""

    name = "openvino"
    aliases = ("ov",)
    pip_extra = "openvino"
    module = "openvino"
    default_device = "CPU"
    options: ClassVar[dict[str, str]] = {
        "precision": "f32 | bf16 | f16 (default: the device's own default)",
        "performance_hint": "latency | throughput | cumulative_throughput",
        "streams": "number of inference streams",
        "threads": "inference threads (0 = runtime default)",
        "cache_dir": "directory for compiled-model caching",
        "reshape": "auto (compile per input shape) | never (use the dynamic model)",
    }

    def version(self) -> str:
        ov = self.import_runtime()
        return f"openvino {ov.get_version().split('-')[0]}"

    def devices(self) -> list[str]:
        self.import_runtime()
        return [*list(_core().available_devices), "AUTO"]

    def _normalize_device(self, device: str) -> str:
        name = device.strip().upper()
        base = name.split(":")[0].split(".")[0]
        available = list(_core().available_devices)
        if base in _VIRTUAL_DEVICES or name in available or base in {d.split(".")[0] for d in available}:
            return name
        raise self._device_error(
            device,
            f"OpenVINO on this machine offers {', '.join([*available, 'AUTO'])}.",
            hint="install the device's OpenVINO plug-in and driver (e.g. the Intel GPU "
            "compute runtime for GPU), or pick one of the listed devices.",
        )

    def _config(self, options: dict[str, Any]) -> dict[str, Any]:
        config: dict[str, Any] = {}
        if "precision" in options:
            key = str(options["precision"]).lower()
            if key not in _PRECISIONS:
                raise UsageError(
                    f"backend 'openvino' | precision '{options['precision']}' is not one of f32, bf16, f16.",
                    hint="use f32 for parity checks; bf16/f16 are faster where the device has them.",
                )
            config["INFERENCE_PRECISION_HINT"] = _PRECISIONS[key]
        if "performance_hint" in options:
            key = str(options["performance_hint"]).lower()
            if key not in _HINTS:
                raise UsageError(
                    f"backend 'openvino' | performance_hint '{key}' is not one of {', '.join(_HINTS)}.",
                    hint="latency suits one request at a time; throughput suits many.",
                )
            config["PERFORMANCE_HINT"] = _HINTS[key]
        if "streams" in options:
            config["NUM_STREAMS"] = str(int(options["streams"]))
        if int(options.get("threads", 0)):
            config["INFERENCE_NUM_THREADS"] = int(options["threads"])
        if options.get("cache_dir"):
            config["CACHE_DIR"] = str(options["cache_dir"])
        return config

    def _open(self, model_path: Path, device: str, allow_fallback: bool, options: dict[str, Any]) -> Session:
        ov_device = self._normalize_device(device)
        config = self._config(options)
        reshape = str(options.get("reshape", "auto")).lower()
        if reshape not in ("auto", "never"):
            raise UsageError(
                f"backend 'openvino' | reshape '{reshape}' is not auto or never.",
                hint="auto compiles one static model per input shape; never keeps it dynamic.",
            )
        interface = read_interface(model_path)
        try:
            model = _core().read_model(str(model_path))
        except Exception as exc:
            load_onnx(model_path)
            raise UnsupportedModelError(
                f"backend 'openvino' | cannot read '{model_path.name}': {_last_line(exc)}",
                hint="try another backend, or 'deploykit inspect' the model for unusual ops.",
            ) from exc
        session = OpenVinoSession(
            model_path,
            interface.inputs,
            interface.outputs,
            SessionInfo(
                backend=self.name,
                backend_version=self.version(),
                device_requested=device,
                device=ov_device,
                precision="",
                options=dict(options),
            ),
            model=model,
            device=ov_device,
            config=config,
            reshape=reshape == "auto",
            metadata=interface.metadata,
        )
        return session


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Check ", "File ", "at "))]
    return (useful or lines or [type(exc).__name__])[-1]


class _Compiled:
    """One compiled model and a pool of infer requests, so threads never share a request."""

    def __init__(self, compiled: Any, output_names: list[str]) -> None:
        self.compiled = compiled
        self.requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        port_of: dict[str, int] = {}
        for index, port in enumerate(compiled.outputs):
            for name in port.get_names():
                port_of.setdefault(name, index)
        self.output_ports = [port_of.get(name, i) for i, name in enumerate(output_names)]

    def infer(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            request = self.requests.get_nowait()
        except queue.Empty:
            request = self.compiled.create_infer_request()
        try:
            produced = request.infer(feeds).to_tuple()  # copies out of the request's buffers
            return [produced[i] for i in self.output_ports]
        finally:
            self.requests.put(request)


class OpenVinoSession(Session):
    def __init__(
        self,
        model_path: Path,
        inputs: list[TensorSpec],
        outputs: list[TensorSpec],
        info: SessionInfo,
        *,
        model: Any,
        device: str,
        config: dict[str, Any],
        reshape: bool,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(model_path, inputs, outputs, info, metadata)
        self._model = model
        self._device = device
        self._config = config
        self._dynamic = reshape and not all(spec.is_static for spec in inputs)
        self._by_shape: OrderedDict[tuple[Any, ...], _Compiled] = OrderedDict()
        self._compile_lock = threading.Lock()
        self._static: _Compiled | None = None
        self._last: tuple[tuple[Any, ...], _Compiled | None] = ((), None)
        if self._dynamic:
            hint = config.get("INFERENCE_PRECISION_HINT")
            info.precision = hint or self._device_default_precision()
            info.providers = [device]
        else:
            self._static = self._compile(model)

    def _device_default_precision(self) -> str:
        try:
            return precision_name(_core().get_property(self._device, "INFERENCE_PRECISION_HINT"))
        except Exception:
            return "device default"

    def _compile(self, model: Any) -> _Compiled:
        try:
            compiled = _core().compile_model(model, self._device, self._config)
        except Exception as exc:
            raise UnsupportedModelError(
                f"backend 'openvino' | cannot compile '{self.model_path.name}' for {self._device}: {_last_line(exc)}",
                hint="try device CPU, another precision, or another backend.",
            ) from exc
        try:
            self.info.providers = [str(d) for d in compiled.get_property("EXECUTION_DEVICES")]
        except Exception:
            self.info.providers = [self._device]
        try:
            self.info.precision = precision_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
        except Exception:
            self.info.precision = self.info.precision or "device default"
        return _Compiled(compiled, list(self.outputs))

    def _for_shapes(self, feeds: dict[str, np.ndarray]) -> _Compiled:
        key = tuple(feeds[name].shape for name in self.inputs)
        last_key, last_entry = self._last
        if key == last_key and last_entry is not None:  # the common case: same shape as before
            return last_entry
        with self._compile_lock:
            entry = self._by_shape.get(key)
            if entry is not None:
                self._by_shape.move_to_end(key)
                self._last = (key, entry)
                return entry
            model = self._model.clone()
            model.reshape({name: list(feeds[name].shape) for name in self.inputs})
            entry = self._compile(model)
            self._by_shape[key] = entry
            if len(self._by_shape) > _SHAPE_CACHE_SIZE:
                self._by_shape.popitem(last=False)
            self._last = (key, entry)
            return entry

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        compiled = self._static if self._static is not None else self._for_shapes(feeds)
        return dict(zip(self.outputs, compiled.infer(feeds), strict=True))

    def _close(self) -> None:
        self._static = None
        self._last = ((), None)
        self._by_shape.clear()
        self._model = None
