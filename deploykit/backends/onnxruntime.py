"""ONNX Runtime backend: devices ``cpu``, ``cuda[:N]`` and ``tensorrt[:N]``.

Works with either the ``onnxruntime`` or the ``onnxruntime-gpu`` package. A GPU
session whose providers end up CPU-only is an error unless fallback was allowed.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session, SessionInfo
from deploykit.backends.devices import DeviceNames
from deploykit.backends.options import OptionSpec
from deploykit.backends.traits import LoadWording, RawRuntime, RuntimePackage, device_error
from deploykit.errors import InvalidModelError
from deploykit.model import Model
from deploykit.tensors import KINDS

_PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
}
# ORT's OpenVINO execution provider ships in the onnxruntime-openvino package (which replaces the
# onnxruntime module); ``openvino:GPU`` picks its device_type, ``openvino`` means its CPU.
_OPENVINO_DEVICE_TYPES = ("CPU", "GPU", "NPU", "AUTO")
_DEVICE_NAMES = DeviceNames(
    kinds=frozenset(_PROVIDERS),
    expected="cpu, cuda, cuda:N, tensorrt, tensorrt:N, openvino or openvino:CPU|GPU|NPU",
    indexed=frozenset(_PROVIDERS) - {"openvino"},
    details={"openvino": frozenset(_OPENVINO_DEVICE_TYPES)},
    aliases={"gpu": "cuda"},
)
_PROVIDER_LIBRARIES = {
    "CUDAExecutionProvider": "libonnxruntime_providers_cuda.so",
    "TensorrtExecutionProvider": "libonnxruntime_providers_tensorrt.so",
}
_OPTIMIZATION_LEVELS = ("disable", "basic", "extended", "all")


# onnx >= 1.23 saves IR version 14 by default, which older runtimes refuse with this sentence.
_IR_VERSION = re.compile(r"Unsupported model IR version: (\d+)(?:, max supported IR version: (\d+))?")

# ORT's text: "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : <reason>" with the detail on the next lines
# and a closing "Please fix either the inputs/outputs or the model." that names no reason.
_ORT_PREFIX = re.compile(r"^\s*\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
_ORT_BOILERPLATE = ("please fix either", "stacktrace")
# "Load model from /the/file's/path.onnx failed:<reason>": the message names the model itself, and a
# reason must not change with where the file lives.
_ORT_LOAD_FROM = re.compile(r"^Load model from .*? failed:\s*", re.S)


def ort_reason(exc: BaseException) -> str:
    """ONNX Runtime's reason in one line: its first line that says something (without the status
    prefix) and the detail lines under it, not the closing "Please fix ..." that names nothing."""
    from deploykit.backends.traits import last_meaningful_line

    match = _IR_VERSION.search(str(exc))
    if match:
        return match.group(0)
    kept: list[str] = []
    text = _ORT_LOAD_FROM.sub("", _ORT_PREFIX.sub("", str(exc).strip()), count=1)
    for line in text.splitlines():
        line = line.strip()
        if line.lower().startswith(_ORT_BOILERPLATE):
            break
        if any(c.isalpha() for c in line):
            kept.append(line)
    return "; ".join(kept[:4]) if kept else last_meaningful_line(exc)


_DISTRIBUTIONS = ("onnxruntime-gpu", "onnxruntime", "onnxruntime-openvino", "onnxruntime-directml")


def _distribution() -> str:
    for name in _DISTRIBUTIONS:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return "onnxruntime (unknown distribution)"


def _ir_version_hint(exc: BaseException) -> str | None:
    """The hint for a model whose IR version this runtime is too old for, or None for another failure."""
    match = _IR_VERSION.search(str(exc))
    if match is None:
        return None
    newest = match.group(2)
    if newest is None:
        return "re-save it with an older ir_version (onnx.save after model.ir_version = N), or upgrade onnxruntime."
    return (
        f"re-save it with ir_version ≤ {newest} (onnx.save after model.ir_version = {newest}), or upgrade onnxruntime."
    )


def _build_info() -> dict[str, Any]:
    return {"build_providers": OnnxRuntimeBackend().import_runtime().get_available_providers()}


class OnnxRuntimeBackend(Backend):
    """ONNX Runtime with its CPU, CUDA and TensorRT execution providers."""

    name = "onnxruntime"
    aliases = ("ort",)
    runtime = RuntimePackage(
        module="onnxruntime",
        pip_extra="onnxruntime",
        distributions=_DISTRIBUTIONS,
        cpu_distribution="onnxruntime",
        build_info=_build_info,
    )
    options: ClassVar[Mapping[str, OptionSpec | str]] = {
        "threads": OptionSpec("intra-op threads (0 = runtime default)", "int", 0, low=0, per_cpu=True),
        "inter_op_threads": OptionSpec("inter-op threads (0 = runtime default)", "int", 0, low=0, per_cpu=True),
        "graph_optimization": OptionSpec("graph optimization level", "str", "all", choices=_OPTIMIZATION_LEVELS),
        "log_level": OptionSpec("0 verbose … 4 fatal", "int", 3, low=0, high=4),
        "spinning": OptionSpec(
            "let idle intra-op threads spin (false when other runtimes share the CPU)", "bool", True
        ),
    }

    value_kinds = frozenset(KINDS)  # lists for sequences, None for empty optionals, both ways
    wording = LoadWording(explain=ort_reason, hint_for=_ir_version_hint)
    raw = RawRuntime("deploykit.backends.raw:run_onnxruntime", {"threads": 1})

    def version(self) -> str:
        self.import_runtime()
        return _distribution()

    def unavailable_devices(self) -> dict[str, str]:
        ort = self.import_runtime()
        available = set(ort.get_available_providers())
        problems = {}
        for kind, provider in _PROVIDERS.items():
            if provider not in available:
                extra = "onnxruntime-openvino" if kind == "openvino" else "onnxruntime-gpu"
                problems[kind] = f"this {_distribution()} has no {provider} (install {extra} instead)"
            elif (problem := _provider_library_problem(provider)) is not None:
                problems[kind] = problem
        return problems

    def devices(self) -> list[str]:
        ort = self.import_runtime()
        available = set(ort.get_available_providers())
        return [
            kind
            for kind, provider in _PROVIDERS.items()
            if provider in available and _provider_library_problem(provider) is None
        ]

    def _open(self, model: Model, request: OpenRequest) -> Session:
        device, allow_fallback = request.device, request.allow_fallback
        ort = self.import_runtime()
        parsed = _DEVICE_NAMES.parse(self.name, device)
        kind, index = parsed.kind, parsed.number
        model_path = model.path
        wanted = _PROVIDERS[kind]
        fallback_reason: str | None = None
        if wanted not in ort.get_available_providers():
            fallback_reason = (
                f"this {_distribution()} build has no {wanted} (it has {', '.join(ort.get_available_providers())})"
            )
            self._refuse_or_fallback(device, fallback_reason, allow_fallback)
            kind, wanted = "cpu", _PROVIDERS["cpu"]

        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = request.option("threads")
        session_options.inter_op_num_threads = request.option("inter_op_threads")
        session_options.log_severity_level = request.option("log_level")
        if not request.option("spinning"):
            session_options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        level = request.option("graph_optimization")
        session_options.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[level]

        providers: list[Any] = []
        if kind == "openvino":
            providers.append((wanted, {"device_type": parsed.detail.upper() or "CPU"}))
        if kind == "tensorrt":
            providers.append((wanted, {"device_id": index}))
        if kind in ("tensorrt", "cuda"):
            providers.append((_PROVIDERS["cuda"], {"device_id": index}))
        providers.append(_PROVIDERS["cpu"])
        session = ort.InferenceSession(str(model_path), sess_options=session_options, providers=providers)

        active = session.get_providers()
        if wanted not in active:
            fallback_reason = _provider_failure(wanted)
            self._refuse_or_fallback(device, fallback_reason, allow_fallback)
        # the first active provider runs the model; after a fallback it is not the one that was asked for
        running = {provider: name for name, provider in _PROVIDERS.items()}.get(active[0], "cpu") if active else "cpu"
        actual = "cpu" if running == "cpu" else device.lower() if running == kind else f"{running}:{index}"
        info = SessionInfo(
            backend=self.name,
            backend_version=_distribution(),
            device_requested=device,
            device=actual,
            precision=model.precision,
            providers=list(active),
            fallback=fallback_reason is not None,
            fallback_reason=fallback_reason,
            options=dict(request.options),
        )
        return OnnxRuntimeSession(model_path, model.inputs, model.outputs, info, session, model.metadata_props, request)

    def _refuse_or_fallback(self, device: str, reason: str, allow_fallback: bool) -> None:
        if not allow_fallback:
            raise device_error(
                self.name,
                device,
                reason + ".",
                hint=(
                    "install onnxruntime-openvino in place of onnxruntime (it replaces the module)"
                    if device.lower().startswith("openvino")
                    else "install the CUDA/cuDNN (or TensorRT) libraries this onnxruntime-gpu needs"
                )
                + ", use device 'cpu', or pass allow_fallback=True (--allow-fallback) to run on "
                "the CPU and have it reported.",
            )


def _provider_library_problem(provider: str) -> str | None:
    """Why a GPU provider's library cannot load (the dynamic loader's own words), or None."""
    import onnxruntime as ort

    library = _PROVIDER_LIBRARIES.get(provider)
    if library is None:
        return None
    path = Path(ort.__file__).parent / "capi" / library
    if not path.exists():
        return f"{provider}'s library {library} is not part of this onnxruntime installation"
    try:
        ctypes.CDLL(str(path))
    except OSError as exc:
        return f"{provider} failed to load: {exc}"
    return None


def _provider_failure(provider: str) -> str:
    """Why ORT dropped a provider it was asked for."""
    return _provider_library_problem(provider) or (
        f"onnxruntime could not create {provider} (no usable GPU or driver?)"
    )


class OnnxRuntimeSession(Session):
    def __init__(
        self,
        model_path: Path,
        inputs: Any,
        outputs: Any,
        info: SessionInfo,
        session: Any,
        metadata: Any = None,
        request: OpenRequest | None = None,
    ) -> None:
        super().__init__(model_path, inputs, outputs, info, metadata, request=request)
        self._session = session
        self._output_names = [o.name for o in session.get_outputs()]

    def explain(self, exc: BaseException) -> str:
        return ort_reason(exc)

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        try:
            results = self._session.run(self._output_names, feeds)
        except UnicodeDecodeError as exc:  # ORT decodes STRING outputs as UTF-8 when it hands them over
            raise self._not_utf8(feeds, exc) from exc
        return dict(zip(self._output_names, results, strict=True))

    def _not_utf8(self, feeds: dict[str, np.ndarray], exc: UnicodeDecodeError) -> InvalidModelError:
        """The model's fault, not the runtime's: name the STRING output whose bytes are not UTF-8."""
        culprits = []
        for name, spec in self.outputs.items():
            if spec.dtype.kind not in "OSU":
                continue
            try:
                self._session.run([name], feeds)
            except UnicodeDecodeError:
                culprits.append(name)
        named = ", ".join(f"'{n}'" for n in culprits) or "a string output"
        return InvalidModelError(
            f"output {named} of '{self.model_path.name}' | holds bytes that are not UTF-8 text "
            f"({exc.reason} at byte {exc.start}); ONNX strings are UTF-8, and ONNX Runtime returns them as text.",
            hint="fix the string values the model makes (its initializers or Constant nodes), or run it on "
            "backend 'openvino', which returns string outputs as raw bytes.",
        )

    def _close(self) -> None:
        self._session = None
