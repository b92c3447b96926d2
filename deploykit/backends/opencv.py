"""OpenCV DNN backend: targets ``cpu``, ``opencl``, ``opencl_fp16``, ``cuda``, ``cuda_fp16``.

Works with OpenCV 4.8+ and 5.x. Reads ONNX, and Darknet ``.cfg`` + ``.weights``
natively where the installed OpenCV still has ``readNetFromDarknet`` (4.x).
Outputs are fetched by graph name, never by OpenCV's internal order. A
``cv2.dnn.Net`` is not thread-safe, so each session guards its net with a lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session, SessionInfo, refuse_unsupported_kinds
from deploykit.backends.devices import Device, DeviceNames
from deploykit.backends.options import OptionSpec
from deploykit.backends.traits import LoadWording, RawRuntime, RuntimePackage, device_error
from deploykit.backends.values import sentence
from deploykit.errors import ModelError, UnsupportedModelError, UsageError
from deploykit.model import Model, check_model_path
from deploykit.tensors import TensorSpec

_TARGETS = ("cpu", "opencl", "opencl_fp16", "cuda", "cuda_fp16")
_DEVICE_NAMES = DeviceNames(
    kinds=frozenset(_TARGETS), expected=f"one of {', '.join(_TARGETS)}", problem="is not a target", listed="targets"
)


def cuda_device_count(cv2: Any) -> int:
    try:
        return int(cv2.cuda.getCudaEnabledDeviceCount())
    except Exception:
        return 0


def has_opencl(cv2: Any) -> bool:
    try:
        return bool(cv2.ocl.haveOpenCL())
    except Exception:
        return False


def _cv_message(exc: BaseException) -> str:
    """OpenCV's reason on one line: after its ``OpenCV(version) file:line: error:`` prefix, with the
    ``>`` that starts each continuation line dropped (a lone one ended the message)."""
    text = str(exc).strip()
    if "error:" in text:
        text = text.split("error:", 1)[1]
    lines = [line.strip().lstrip(">").strip() for line in text.splitlines()]
    return " ".join(" ".join(line for line in lines if line).split())


def _build_info() -> dict[str, Any]:
    build = OpenCvBackend().import_runtime().getBuildInformation()
    keys = ("Parallel framework", "CPU/HW features", "Baseline", "OpenCL:", "CUDA:")
    return {"build": [" ".join(line.split()) for line in build.splitlines() if any(k in line for k in keys)][:8]}


def _subject() -> str:
    """Messages name OpenCV with its version: what it can import differs much between releases."""
    return f"backend 'opencv' ({OpenCvBackend().import_runtime().__version__})"


class OpenCvBackend(Backend):
    """OpenCV's DNN module with its own CPU kernels, OpenCL or CUDA."""

    name = "opencv"
    aliases = ("cv", "cv2")
    runtime = RuntimePackage(
        module="cv2",
        pip_extra="opencv",
        distributions=(
            "opencv-python-headless",
            "opencv-python",
            "opencv-contrib-python-headless",
            "opencv-contrib-python",
        ),
        cpu_distribution="opencv-python-headless",
        build_info=_build_info,
    )  # an emulated target installs the headless build
    formats = (".onnx", ".cfg")
    options: ClassVar[Mapping[str, OptionSpec | str]] = {
        "threads": OptionSpec(
            "cv2.setNumThreads for the whole process (0 = OpenCV default)", "int", 0, low=0, per_cpu=True
        ),
        "weights": OptionSpec("Darknet .weights file, when the model is a Darknet .cfg (OpenCV 4.x only)", "path"),
    }

    wording = LoadWording(
        verb="import",
        hint="OpenCV DNN supports fewer ops than ONNX Runtime or OpenVINO; try backend 'onnxruntime' or 'openvino'.",
        explain=_cv_message,
        subject=_subject,
    )
    raw = RawRuntime("deploykit.backends.raw:run_opencv")

    def version(self) -> str:
        cv2 = self.import_runtime()
        return f"opencv {cv2.__version__}"

    def devices(self) -> list[str]:
        cv2 = self.import_runtime()
        devices = ["cpu"]
        if has_opencl(cv2):
            devices += ["opencl", "opencl_fp16"]
        if cuda_device_count(cv2):
            devices += ["cuda", "cuda_fp16"]
        return devices

    def precisions(self, device: str | None = None) -> list[str]:
        """The ``_fp16`` targets compute f16; the others the model's own precision (f32 for a float model)."""
        return ["f16"] if Device.parse(device or self.default_device).kind.endswith("_fp16") else ["f32"]

    def model_precision(self, own: str, device: str | None = None) -> str:
        """OpenCV's importer widens f16/bf16 weights to f32, and its cpu/opencl/cuda targets compute
        f32; only the ``_fp16`` targets compute f16."""
        if Device.parse(device or self.default_device).kind.endswith("_fp16"):
            return "f16"
        return "f32" if own in ("f16", "bf16") else own

    def read_model(self, model: Model | str | os.PathLike[str]) -> Model:
        """A Darknet ``.cfg``'s interface comes from its ``[net]`` section (the input) and, once OpenCV
        has read it, the network's unconnected layers (the outputs); anything else as ``Backend.read_model``."""
        if isinstance(model, Model) or Path(model).suffix.lower() != ".cfg":
            return super().read_model(model)
        from deploykit.darknet_cfg import read_cfg

        cfg_path = check_model_path(model)
        section = read_cfg(cfg_path).net
        width, height = section.integer("width", 416), section.integer("height", 416)
        channels = section.integer("channels", 3)
        return Model.native(cfg_path, inputs=(TensorSpec("data", np.dtype(np.float32), (1, channels, height, width)),))

    def model_files(self, path: Path, options: Mapping[str, Any]) -> list[Path]:
        """A Darknet ``.cfg`` with the ``.weights`` file its ``weights`` option names."""
        files = super().model_files(path, options)
        weights = self.option_value(options, "weights")
        if path.suffix.lower() == ".cfg" and weights:
            files.append(Path(weights))
        return files

    def _open(self, model: Model, request: OpenRequest) -> Session:
        device, allow_fallback = request.device, request.allow_fallback
        cv2 = self.import_runtime()
        target = _DEVICE_NAMES.parse(self.name, device).kind
        fallback_reason = self._target_problem(cv2, target)
        if fallback_reason:
            if not allow_fallback:
                raise device_error(
                    self.name,
                    device,
                    fallback_reason,
                    hint="use device 'cpu', install an OpenCV built with that target, or pass "
                    "allow_fallback=True (--allow-fallback) to run on the CPU and have it reported.",
                )
            target = "cpu"
        if threads := request.option("threads"):
            cv2.setNumThreads(threads)

        model_path = model.path
        inputs, outputs, precision, metadata = model.inputs, model.outputs, model.precision, model.metadata_props
        if model.format == ".cfg":
            net = self._read_darknet(cv2, model_path, request.option("weights"))
            outputs = tuple(TensorSpec(name, np.dtype(np.float32), None) for name in net.getUnconnectedOutLayersNames())
        else:
            refuse_unsupported_kinds(self, model_path, inputs, outputs)
            net = cv2.dnn.readNetFromONNX(str(model_path))
        backend_id, target_id = {
            "cpu": (cv2.dnn.DNN_BACKEND_OPENCV, cv2.dnn.DNN_TARGET_CPU),
            "opencl": (cv2.dnn.DNN_BACKEND_OPENCV, cv2.dnn.DNN_TARGET_OPENCL),
            "opencl_fp16": (cv2.dnn.DNN_BACKEND_OPENCV, cv2.dnn.DNN_TARGET_OPENCL_FP16),
            "cuda": (cv2.dnn.DNN_BACKEND_CUDA, cv2.dnn.DNN_TARGET_CUDA),
            "cuda_fp16": (cv2.dnn.DNN_BACKEND_CUDA, cv2.dnn.DNN_TARGET_CUDA_FP16),
        }[target]
        if target != "cpu":  # OpenCV 5's new engine warns on any explicit target call
            net.setPreferableBackend(backend_id)
            net.setPreferableTarget(target_id)
        info = SessionInfo(
            backend=self.name,
            backend_version=self.version(),
            device_requested=device,
            device=target,
            precision=self.model_precision(precision, target),
            providers=[f"DNN_BACKEND_{'CUDA' if 'cuda' in target else 'OPENCV'}", target],
            fallback=fallback_reason is not None,
            fallback_reason=fallback_reason,
            options=dict(request.options),
        )
        return OpenCvSession(model_path, inputs, outputs, info, net, dict(metadata), request)

    @staticmethod
    def _target_problem(cv2: Any, target: str) -> str | None:
        if target.startswith("cuda") and not cuda_device_count(cv2):
            built = "YES" in "".join(line for line in cv2.getBuildInformation().splitlines() if "NVIDIA CUDA" in line)
            return (
                "OpenCV sees no CUDA device."
                if built
                else f"this OpenCV {cv2.__version__} was built without CUDA (pip wheels never have it)."
            )
        if target.startswith("opencl") and not has_opencl(cv2):
            return "OpenCV finds no OpenCL platform/device on this machine."
        return None

    def _read_darknet(self, cv2: Any, cfg_path: Path, weights: str | None) -> Any:
        if not hasattr(cv2.dnn, "readNetFromDarknet"):
            raise UnsupportedModelError(
                f"backend 'opencv' ({cv2.__version__}) | cannot read Darknet '{cfg_path.name}': "
                "OpenCV 5 removed readNetFromDarknet.",
                hint="convert it first: deploykit convert darknet MODEL.cfg MODEL.weights "
                "-o model.onnx, then run the .onnx on any backend.",
            )
        if not weights:
            raise UsageError(
                f"backend 'opencv' | Darknet model '{cfg_path.name}' needs its .weights file.",
                hint="pass weights='model.weights' (--option weights=model.weights).",
            )
        weights_path = check_model_path(weights)
        try:
            net = cv2.dnn.readNetFromDarknet(str(cfg_path), str(weights_path))
        except Exception as exc:
            raise ModelError(
                f"Darknet model '{cfg_path.name}' | OpenCV cannot read it: {_cv_message(exc)}",
                hint="check that the .weights file belongs to this .cfg.",
            ) from exc
        return net


def _graph_shaped(array: Any, spec: TensorSpec) -> Any:
    """An output in the rank the graph declares: OpenCV 4's ``Mat`` has no 0-d or 1-d shape and
    returns (1, 1) for a scalar, (n, 1) for a vector. Only trailing axes of size 1 are dropped,
    so nothing is reordered and a shape that disagrees in any other way is returned as it is."""
    if not isinstance(array, np.ndarray) or spec.shape is None or array.ndim <= len(spec.shape):
        return array
    rank = len(spec.shape)
    if all(size == 1 for size in array.shape[rank:]):
        return array.reshape(array.shape[:rank])
    return array


class OpenCvSession(Session):
    def __init__(
        self,
        model_path: Path,
        inputs: Sequence[TensorSpec],
        outputs: Sequence[TensorSpec],
        info: SessionInfo,
        net: Any,
        metadata: dict[str, str] | None = None,
        request: OpenRequest | None = None,
    ) -> None:
        super().__init__(model_path, inputs, outputs, info, metadata, request=request)
        self._net = net
        self._lock = threading.Lock()
        self._output_names = list(self.outputs)

    def explain(self, exc: BaseException) -> str:
        return _cv_message(exc)

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        with self._lock:
            try:  # setInput refuses dtypes and shapes with a reason too: the same message as forward's
                for name, array in feeds.items():
                    self._net.setInput(array, name)
                results = self._net.forward(self._output_names)
            except Exception as exc:
                raise UnsupportedModelError(
                    f"backend 'opencv' on {self.info.device} | failed to run "
                    f"'{self.model_path.name}': {sentence(self.explain(exc))}",
                    hint="OpenCV DNN supports fewer ops and dtypes than ONNX Runtime or "
                    "OpenVINO; try backend 'onnxruntime' or 'openvino'.",
                ) from exc
        return {
            name: _graph_shaped(array, self.outputs[name])
            for name, array in zip(self._output_names, results, strict=True)
        }

    def _close(self) -> None:
        self._net = None
