"""OpenVINO backend: devices from ``Core.available_devices`` plus ``AUTO``/``MULTI``/``HETERO``.

Precision is reported as the compiled model states it (CPUs with bf16 units
default to bf16). Models with dynamic inputs are reshaped to the feed's shape
and compiled once per distinct shape, so static-shape kernels run.
"""

from __future__ import annotations

import queue
import re
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session, SessionInfo, refuse_unsupported_kinds
from deploykit.backends.devices import Device
from deploykit.backends.options import OptionSpec
from deploykit.backends.traits import LoadWording, RawRuntime, RuntimePackage, SearchTraits, device_error
from deploykit.errors import UnsupportedModelError
from deploykit.model import Model
from deploykit.tensors import TensorSpec

_PRECISIONS = {
    "f32": "f32",
    "fp32": "f32",
    "float32": "f32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "f16": "f16",
    "fp16": "f16",
    "float16": "f16",
    "half": "f16",
}
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


def _last_line(exc: BaseException) -> str:
    """The reason in an OpenVINO exception: for a failed ONNX conversion, each failed operation with
    the last line of its own message (the summary alone names the ops, not why); else the last
    line that says something (OpenVINO ends some messages with a lone ';', AUTO's)."""
    text = str(exc).strip()
    failed = re.findall(r"^-- (\S+) with a message:\n(.*?)(?=^-- |^Summary:|\Z)", text, re.M | re.S)
    if failed:
        reasons = []
        for operation, message in failed:
            said = [line.strip() for line in message.splitlines() if any(c.isalnum() for c in line)]
            reasons.append(f"{operation}: {said[-1] if said else 'no reason given'}")
        return "conversion failed for " + "; ".join(reasons)
    lines = [line.strip() for line in text.splitlines() if any(c.isalnum() for c in line)]
    useful = [line for line in lines if not line.startswith(("Check ", "File ", "at "))]
    return (useful or lines or [type(exc).__name__])[-1]


class OpenVinoBackend(Backend):
    """Intel OpenVINO: CPU (oneDNN/MKL-class kernels), GPU, NPU and the AUTO plug-in."""

    name = "openvino"
    aliases = ("ov",)
    runtime = RuntimePackage(module="openvino", pip_extra="openvino", distributions=("openvino",))
    default_device = "CPU"
    search = SearchTraits(virtual_devices=_VIRTUAL_DEVICES)
    options: ClassVar[Mapping[str, OptionSpec | str]] = {
        "precision": OptionSpec(
            "compute precision (default: the device's own)", "str", None, choices=tuple(_PRECISIONS)
        ),
        "performance_hint": OptionSpec("what to optimise for", "str", None, choices=tuple(_HINTS)),
        "streams": OptionSpec("number of inference streams", "int", None, low=1, per_cpu=True),
        "threads": OptionSpec("inference threads (0 = runtime default)", "int", 0, low=0, per_cpu=True),
        "cache_dir": OptionSpec("directory for compiled-model caching", "path"),
        "reshape": OptionSpec(
            "auto (compile per input shape) | never (use the dynamic model)", "str", "auto", choices=("auto", "never")
        ),
        "shape_cache": OptionSpec(
            "compiled input shapes kept per session (reshape=auto); a shape compiled again is "
            "counted in session.info.recompiles",
            "int",
            _SHAPE_CACHE_SIZE,
            low=1,
            high=1024,
        ),
    }

    wording = LoadWording(verb="read", explain=_last_line)
    raw = RawRuntime("deploykit.backends.raw:run_openvino", {"threads": 1})

    def version(self) -> str:
        ov = self.import_runtime()
        return f"openvino {ov.get_version().split('-')[0]}"

    def devices(self) -> list[str]:
        self.import_runtime()
        return [*list(_core().available_devices), "AUTO"]

    def precisions(self, device: str | None = None) -> list[str]:
        """f32 everywhere; bf16/f16 where the device's plug-in says it computes them natively."""
        self.import_runtime()
        parsed = Device.parse(device or self.default_device, index_separator=".")
        base = parsed.kind.upper()
        available = {d.split(".")[0] for d in _core().available_devices}
        if base in _VIRTUAL_DEVICES:  # AUTO/MULTI/HETERO may run on any device they list: what all of them run
            listed = [d.strip().split(".")[0] for d in parsed.detail.upper().split(",") if d.strip()]
            members = [d for d in (listed or sorted(available)) if d in available]
            offered = [self.precisions(d) for d in members]
            return [p for p in offered[0] if all(p in other for other in offered)] if offered else ["f32"]
        if base not in available:
            return ["f32"]
        capabilities = set(_core().get_property(base, "OPTIMIZATION_CAPABILITIES"))
        found = ["f32"]
        found += ["bf16"] if "BF16" in capabilities else []
        found += ["f16"] if "FP16" in capabilities else []
        return found

    def _normalize_device(self, device: str, allow_fallback: bool = False) -> tuple[str, str | None]:
        """The OpenVINO device string to compile for, and why it differs from the request (fallback).

        ``MULTI``/``HETERO`` run on every listed device, so a listed device this machine lacks is
        an error (with ``allow_fallback``, it is dropped and said). ``AUTO`` chooses among its
        list by design, but needs at least one listed device that exists.
        """
        name = device.strip().upper()
        parsed = Device.parse(name, index_separator=".")
        base = parsed.kind.upper()
        available = list(_core().available_devices)
        bases = {d.split(".")[0] for d in available}
        if base in _VIRTUAL_DEVICES and ":" in name:
            listed = [d.strip() for d in parsed.detail.split(",") if d.strip()]
            missing = [d for d in listed if d not in available and d.split(".")[0] not in bases]
            present = [d for d in listed if d not in missing]
            if not missing:
                return name, None
            reason = (
                f"{base} lists {', '.join(missing)}, which this machine does not offer "
                f"(OpenVINO here offers {', '.join(available)})"
            )
            if base == "AUTO" and present:
                return f"AUTO:{','.join(present)}", None  # AUTO picks among what exists, and says which
            if allow_fallback and present:
                return f"{base}:{','.join(present)}", reason
            if allow_fallback:
                return "CPU", reason
            raise device_error(
                self.name,
                device,
                reason + ".",
                hint="install the device's OpenVINO plug-in and driver, list only devices that exist, "
                "or pass allow_fallback=True (--allow-fallback) to run on the rest and have it reported.",
            )
        if base in _VIRTUAL_DEVICES or name in available or base in bases:
            return name, None
        raise device_error(
            self.name,
            device,
            f"OpenVINO on this machine offers {', '.join([*available, 'AUTO'])}.",
            hint="install the device's OpenVINO plug-in and driver (e.g. the Intel GPU "
            "compute runtime for GPU), or pick one of the listed devices.",
        )

    def _config(self, request: OpenRequest) -> dict[str, Any]:
        """The compile properties the options set; an option left at its default (None, 0) leaves the
        property to OpenVINO."""
        config: dict[str, Any] = {}
        if (precision := request.option("precision")) is not None:
            config["INFERENCE_PRECISION_HINT"] = _PRECISIONS[precision]
        if (hint := request.option("performance_hint")) is not None:
            config["PERFORMANCE_HINT"] = _HINTS[hint]
        if (streams := request.option("streams")) is not None:
            config["NUM_STREAMS"] = str(streams)
        if threads := request.option("threads"):
            config["INFERENCE_NUM_THREADS"] = threads
        if cache_dir := request.option("cache_dir"):
            config["CACHE_DIR"] = str(cache_dir)
        return config

    def _open(self, model: Model, request: OpenRequest) -> Session:
        device, allow_fallback = request.device, request.allow_fallback
        ov_device, fallback_reason = self._normalize_device(device, allow_fallback)
        config = self._config(request)
        model_path, interface = model.path, model
        refuse_unsupported_kinds(self, model_path, interface.inputs, interface.outputs)
        compiled_from = _core().read_model(str(model_path))
        session = OpenVinoSession(
            model_path,
            list(interface.inputs),
            list(interface.outputs),
            SessionInfo(
                backend=self.name,
                backend_version=self.version(),
                device_requested=device,
                device=ov_device,
                precision="",
                fallback=fallback_reason is not None,
                fallback_reason=fallback_reason,
                options=dict(request.options),
            ),
            model=compiled_from,
            device=ov_device,
            config=config,
            metadata=dict(interface.metadata_props),
            request=request,
        )
        return session


def _compiled_precision(compiled: Any, execution_devices: list[str]) -> str | None:
    """The precision a compiled model computes in: its own hint, or for AUTO/MULTI/HETERO (which do
    not answer that) the hints of the devices that execute it (``f32``, or ``CPU bf16, GPU f16``)."""
    try:
        return precision_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
    except Exception:
        pass
    try:
        per_device = compiled.get_property("DEVICE_PROPERTIES")
    except Exception:
        return None
    found = {}
    for device, properties in per_device.items():
        hint = properties.get("INFERENCE_PRECISION_HINT") if hasattr(properties, "get") else None
        if hint is not None and (not execution_devices or device in execution_devices):
            found[device] = precision_name(hint)
    if len(set(found.values())) == 1:
        return next(iter(found.values()))
    return ", ".join(f"{device} {precision}" for device, precision in found.items()) or None


def _port_indices(ports: Any, names: list[str], direction: str) -> list[int]:
    """The compiled model's port index for each graph name. OpenVINO may merge a pass-through's
    tensor names (one-input ``Sum``: the input port is named after the output), so a name no port
    carries takes the port at its own index, but only when that port exists and no other graph
    name claims it; anything else is an error, never a guess."""
    index_of: dict[str, int] = {}
    port_names: list[set[str]] = []
    for index, port in enumerate(ports):
        port_names.append(set(port.get_names()))
        for name in port_names[-1]:
            index_of.setdefault(name, index)
    claimed = {index_of[name] for name in names if name in index_of}
    indices = []
    for position, name in enumerate(names):
        if name in index_of:
            indices.append(index_of[name])
        elif len(port_names) == len(names) and position not in claimed:
            indices.append(position)
        else:
            carried = "; ".join(f"{i}: {', '.join(sorted(n)) or '(no name)'}" for i, n in enumerate(port_names))
            raise UnsupportedModelError(
                f"backend 'openvino' | the compiled model has no {direction} port for graph {direction} "
                f"'{name}'; expected one port per graph {direction}, its ports are {carried or 'none'}.",
                hint="OpenVINO removed or renamed that port while compiling; try another backend.",
            )
    return indices


def _passes_through(compiled: Any) -> bool:
    """True when a result of the compiled graph is one of its parameters (an identity graph, a
    one-input Sum, inference Dropout, Einsum '->'): OpenVINO then hands the input's memory through
    and a caller-bound output buffer may never be written, so such a model binds no outputs."""
    try:
        results = compiled.get_runtime_model().get_results()
    except Exception:  # a device plug-in without a runtime model: nothing to be sure of
        return True
    return any(result.input_value(0).get_node().get_type_name() == "Parameter" for result in results)


def _numpy_dtype(port: Any) -> np.dtype[Any] | None:
    """The numpy dtype of a port's element type, or None where numpy has no exact match (bf16, f8,
    int4 ...: OpenVINO's ``to_dtype`` names a stand-in of the same size, float16 for bf16)."""
    import openvino as ov

    element = port.get_element_type()
    try:
        dtype = np.dtype(element.to_dtype())
        exact = ov.Type(dtype) == element
    except Exception:
        return None
    return dtype if exact and dtype.kind in "fiub" and dtype.itemsize == element.size else None


def _extra_dtype(dtype: np.dtype[Any]) -> bool:
    """True for ONNX's element types numpy has only through ml_dtypes (bfloat16, float8 ...)."""
    return dtype.type.__module__.startswith("ml_dtypes")


class _Bound:
    """An infer request and the arrays its tensors wrap. A shared ``ov.Tensor`` does not keep its
    array alive, so the arrays are held here for as long as they are bound."""

    __slots__ = ("inputs", "outputs", "request")

    def __init__(self, request: Any, inputs: list[np.ndarray | None], outputs: list[np.ndarray | None]) -> None:
        self.request, self.inputs, self.outputs = request, inputs, outputs


class _Compiled:
    """One compiled model and a pool of infer requests, so threads never share a request.

    Nothing is copied on the way in or out: each input tensor wraps the caller's array, and
    each output with a static shape is an array OpenVINO writes into and the caller then owns
    (except in a model that passes an input through, where OpenVINO may not write it).
    An output array is reused on the next call only once the caller has dropped it, and an input
    passed again as the same array stays bound, so a steady loop rebinds nothing (as a raw
    ``request.infer()`` loop would). Outputs with a dynamic shape are copied out of the request.
    """

    def __init__(self, compiled: Any, input_names: list[str], outputs: list[TensorSpec]) -> None:
        import openvino as ov

        self.compiled = compiled
        self.requests: queue.SimpleQueue[_Bound] = queue.SimpleQueue()
        self._tensor = ov.Tensor
        self._shape = ov.Shape
        self.inputs = [
            (name, index, _numpy_dtype(compiled.inputs[index]))
            for name, index in zip(input_names, _port_indices(compiled.inputs, input_names, "input"), strict=True)
        ]
        # element types numpy has only through ml_dtypes (bf16, f8): fed and read as their bytes
        self.input_elements = {index: compiled.inputs[index].get_element_type() for _, index, _ in self.inputs}
        self.output_ports = _port_indices(compiled.outputs, [spec.name for spec in outputs], "output")
        self.output_views = [
            spec.dtype
            if _extra_dtype(spec.dtype) and spec.dtype.itemsize == compiled.outputs[i].get_element_type().size
            else None
            for spec, i in zip(outputs, self.output_ports, strict=True)
        ]
        self.output_layouts: list[tuple[tuple[int, ...], np.dtype[Any]] | None] = []
        bind_outputs = not _passes_through(compiled)
        for port in compiled.outputs:
            dtype = _numpy_dtype(port)
            static = bind_outputs and port.get_partial_shape().is_static and dtype is not None
            self.output_layouts.append((tuple(port.get_shape()), dtype) if static else None)  # type: ignore[arg-type]

    def infer(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            bound = self.requests.get_nowait()
        except queue.Empty:
            request = self.compiled.create_infer_request()
            bound = _Bound(request, [None] * len(self.inputs), [None] * len(self.output_layouts))
        try:
            request, tensor = bound.request, self._tensor
            for slot, (name, index, dtype) in enumerate(self.inputs):
                given = feeds[name]
                if given is bound.inputs[slot]:  # the very array of the last call: still bound
                    continue
                array = np.asarray(given, dtype=dtype, order="C")  # ascontiguousarray makes a 0-d array 1-d
                if not array.flags.writeable:  # OpenVINO wraps only writeable memory
                    array = array.copy()
                element = self.input_elements[index]
                if dtype is None and _extra_dtype(array.dtype) and array.dtype.itemsize == element.size:
                    raw = array.reshape(-1).view(np.uint8)  # bf16/f8: numpy's bytes, OpenVINO's type
                    request.set_input_tensor(index, tensor(raw, self._shape(list(array.shape)), element))
                else:
                    request.set_input_tensor(index, tensor(array, shared_memory=True))
                bound.inputs[slot] = array
            for index, layout in enumerate(self.output_layouts):
                # reuse last call's array only when nobody else holds it (the list and getrefcount's
                # argument are the 2 references): the caller dropped it, so it is ours to overwrite
                if layout is None or (bound.outputs[index] is not None and sys.getrefcount(bound.outputs[index]) == 2):
                    continue
                output = np.empty(layout[0], layout[1])
                request.set_output_tensor(index, tensor(output, shared_memory=True))
                bound.outputs[index] = output
            request.infer()
            results = [
                result if (result := bound.outputs[i]) is not None else request.get_output_tensor(i).data.copy()
                for i in self.output_ports
            ]
            return [
                result if view is None or result.dtype == view else result.view(view)
                for result, view in zip(results, self.output_views, strict=True)
            ]
        finally:
            self.requests.put(bound)


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
        metadata: dict[str, str] | None = None,
        request: OpenRequest,
    ) -> None:
        """``request.options`` say whether a dynamic model is reshaped to each feed (``reshape``) and how many
        shapes stay compiled (``shape_cache``)."""
        super().__init__(model_path, inputs, outputs, info, metadata, request=request)
        reshape = request.option("reshape") == "auto"
        self._shape_cache = request.option("shape_cache")
        self._evicted: set[tuple[Any, ...]] = set()
        self._model = model
        self._device = device
        self._config = config
        self._dynamic = reshape and not all(spec.is_static for spec in inputs)
        self._by_shape: OrderedDict[tuple[Any, ...], _Compiled] = OrderedDict()
        self._compile_lock = threading.Lock()
        self._static: _Compiled | None = None
        self._last: tuple[tuple[Any, ...], _Compiled | None] = ((), None)
        if self._dynamic:
            info.providers = [device]
            self._settle_precision(config.get("INFERENCE_PRECISION_HINT") or self._device_default_precision())
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
        self._settle_precision(
            _compiled_precision(compiled, self.info.providers) or self.info.precision or "device default"
        )
        return _Compiled(compiled, list(self.inputs), list(self.outputs.values()))

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
            if key in self._evicted:
                self.info.recompiles += 1
            self._by_shape[key] = entry
            if len(self._by_shape) > self._shape_cache:
                self._evicted.add(self._by_shape.popitem(last=False)[0])
            self._last = (key, entry)
            return entry

    def explain(self, exc: BaseException) -> str:
        return _last_line(exc)  # as on load: the reason, not the C++ source location of the first line

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        compiled = self._static if self._static is not None else self._for_shapes(feeds)
        return dict(zip(self.outputs, compiled.infer(feeds), strict=True))

    def _close(self) -> None:
        self._static = None
        self._last = ((), None)
        self._by_shape.clear()
        self._model = None
