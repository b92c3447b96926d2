"""LiteRT backend: Google's edge runtime (the TensorFlow Lite interpreter, XNNPACK kernels), device ``cpu``.

A native ``.tflite`` opens as it is: with the ``.json`` that ``deploykit export litert`` writes beside
it, under the ONNX names, shapes and layout; without one, under its signature's own. An ``.onnx``
model is converted once with onnx2tf in deploykit's ``litert`` converter environment
(``litert_convert``; the user creates it with ``deploykit converters add litert``, never implicitly)
and opened with the ONNX interface: onnx2tf makes channel-first tensors channel-last, and the session
transposes feeds and outputs back (``litert_layout``). onnx2tf converts at fixed shapes.

Precision: the interpreter computes in f32 on this CPU's XNNPACK kernels; a file with f16 weights
(``weights=f16``) computes in f32 on f16-rounded weights and reports ``f16``, as ncnn and ONNX
Runtime report such a model; dynamic-range INT8 weights (``weights=int8``) report an int8 model
whose float layers compute in f32.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session, SessionInfo
from deploykit.backends.converted import Carried, interface_file
from deploykit.backends.devices import DeviceNames
from deploykit.backends.litert_layout import LiteRtLayout, io_ports, match, own_specs, read_io, signature_ports
from deploykit.backends.options import OptionSpec
from deploykit.backends.traits import Conversion, LoadWording, RawRuntime, RuntimePackage, SearchTraits
from deploykit.errors import InputError, ModelNotFoundError, UnsupportedModelError, UsageError
from deploykit.model import Model
from deploykit.tensors import TensorSpec

WEIGHTS = ("f32", "f16", "int8")
_DEVICE_NAMES = DeviceNames(kinds=frozenset({"cpu"}), expected="cpu", problem="is not a device of this backend")


def _onnx_unavailable_reason() -> str | None:
    """An ``.onnx`` model needs the ``litert`` converter environment (``deploykit converters add litert``)."""
    from deploykit.converters import get_environment
    from deploykit.errors import DeployKitError

    try:
        get_environment("litert").require("converting ONNX to LiteRT (onnx2tf)")
    except DeployKitError as exc:
        return str(exc)
    return None


def _recorded_interface(path: Path) -> tuple[list[TensorSpec], list[TensorSpec], dict[str, str]] | None:
    """The ONNX interface and metadata in the ``.json`` that ``export litert`` (or a bundle) writes beside
    a ``.tflite``; alone, only its runtime can say it."""
    io = read_io(path)
    if io is None:
        return None
    specs_in, _ = io_ports(io, "inputs")
    specs_out, _ = io_ports(io, "outputs")
    return specs_in, specs_out, {str(k): str(v) for k, v in (io.get("metadata") or {}).items()}


def _converted_file(model: Model, options: Mapping[str, Any]) -> Path | None:
    """The cached ``.tflite`` of an ``.onnx`` model with the ``weights`` option's weights (None: a ``.tflite``)."""
    if model.format != ".onnx":
        return None
    from deploykit.backends.litert_convert import converted

    return converted(model, LiteRtBackend.option_value(options, "weights"))


def _carry(model: Model, options: Mapping[str, Any], folder: Path, stem: str) -> Carried | None:
    """``stem.tflite`` and ``stem.json`` (the ONNX names, the NHWC ↔ NCHW permutation of each port, the
    metadata, the source's and the file's SHA-256): what ``deploykit export litert`` writes."""
    import dataclasses
    import json
    import shutil

    cached = _converted_file(model, options)
    if cached is None:
        return None
    target = folder / f"{stem}.tflite"
    shutil.copyfile(cached, target)
    layout = dataclasses.replace(layout_for(model, cached), tflite=target)
    document = layout.io_document(model.path, LiteRtBackend.option_value(options, "weights"))
    io = interface_file(target)
    io.write_text(json.dumps(document, indent=1) + "\n")
    return Carried(target, (target, io), ("weights",))


class LiteRtBackend(Backend):
    """LiteRT's interpreter (``ai-edge-litert``), with onnx2tf converting ONNX models in its own environment."""

    name = "litert"
    aliases = ("tflite", "tensorflow-lite")
    runtime = RuntimePackage(module="ai_edge_litert.interpreter", pip_extra="litert", distributions=("ai-edge-litert",))
    formats = (".onnx", ".tflite")
    # Opening an .onnx model needs the converter environment, which only the user creates: a default
    # sweep (compare, bench) must not stop at a missing environment, so LiteRT is asked for by name.
    search = SearchTraits(default_candidate=False, searched_when_ready=True)
    options: ClassVar[Mapping[str, OptionSpec | str]] = {
        "threads": OptionSpec("interpreter threads (0 = LiteRT's default)", "int", 0, low=0, per_cpu=True),
        "xnnpack": OptionSpec("XNNPACK kernels (false: LiteRT's reference builtin kernels)", "bool", True),
        "weights": OptionSpec(
            "weights of an .onnx model's conversion: f32 | f16 | int8 (dynamic range); a .tflite keeps its own",
            "str",
            "f32",
            choices=WEIGHTS,
        ),
    }
    wording = LoadWording(hint="try another backend, or 'deploykit inspect' the model for ops onnx2tf or LiteRT lack.")
    # onnx2tf takes seconds a case (TensorFlow starts on each side): a sparser sample than ncnn's
    raw = RawRuntime(
        "deploykit.backends.raw:run_litert",
        {"threads": 1},
        outside="deploykit.backends.raw:litert_outside",
        sample_every=40,
        without_converter={"DEPLOYKIT_CACHE_DIR": "/nonexistent/deploykit-conformance/cache"},
    )
    conversion = Conversion(
        converted_file=_converted_file,
        carry=_carry,
        recorded_interface=_recorded_interface,
        onnx_unavailable_reason=_onnx_unavailable_reason,
        weights={
            "int8": {"weights": "int8"},  # dynamic range: int8 weights, float activations
            "f16": {"weights": "f16"},
        },
    )

    def version(self) -> str:
        self.import_runtime()
        return f"ai-edge-litert {metadata.version('ai-edge-litert')}"

    def devices(self) -> list[str]:
        self.import_runtime()
        return ["cpu"]

    def _open(self, model: Model, request: OpenRequest) -> Session:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        device = request.device
        _DEVICE_NAMES.parse(self.name, device)
        tflite = self._tflite(model, request.options)
        threads = request.option("threads")
        xnnpack = request.option("xnnpack")
        resolver = OpResolverType.AUTO if xnnpack else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        with _quiet_native_log():  # the delegate is made when the tensors are first allocated
            interpreter = Interpreter(
                model_path=str(tflite), num_threads=threads or None, experimental_op_resolver_type=resolver
            )
            interpreter.allocate_tensors()
            layout, call = _bind(interpreter, tflite, model)
        weights = weights_of(interpreter)
        info = SessionInfo(
            backend=self.name,
            backend_version=self.version(),
            device_requested=device,
            device="cpu",
            precision="f16" if weights == "f16" else "f32",
            providers=[
                "XNNPACK" if xnnpack else "builtin kernels",
                f"{threads or 'default'} thread(s)",
                f"{weights} weights",
            ],
            options=dict(request.options),
            model_precision=None if weights == "f32" else weights,
        )
        session = LiteRtSession(model.path, layout, info, call, request)
        session.weights = weights
        return session

    def _tflite(self, model: Model, options: Mapping[str, Any]) -> Path:
        converted = _converted_file(model, options)
        if converted is not None:
            return converted
        if not model.path.is_file():
            raise ModelNotFoundError(f"model '{model.path}' | does not exist or is not a file.", hint="check the path.")
        return model.path


@contextlib.contextmanager
def _quiet_native_log() -> Iterator[None]:
    """LiteRT's C++ logs "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." to the process's stderr
    on every interpreter; a load error still reaches Python as the exception's text."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def layout_for(model: Model, tflite: Path) -> LiteRtLayout:
    """How a session offers ``tflite`` (converted from ``model``, or ``model`` itself): names, shapes, layout."""
    from ai_edge_litert.interpreter import Interpreter

    with _quiet_native_log():
        layout, _ = _bind(Interpreter(model_path=str(tflite)), tflite, model)
    return layout


def weights_of(interpreter: Any) -> str:
    """``f16`` when the file stores float16 tensors, ``int8`` when it stores int8 ones, else ``f32``."""
    kinds = {np.dtype(detail["dtype"]) for detail in interpreter.get_tensor_details()}
    if np.dtype(np.float16) in kinds:
        return "f16"
    return "int8" if np.dtype(np.int8) in kinds else "f32"


def _bind(interpreter: Any, tflite: Path, model: Model) -> tuple[LiteRtLayout, Any]:
    """The layout a session offers and the call that runs the file: its first signature (onnx2tf writes
    ``serving_default`` with the ONNX names), mapped to the ONNX graph, the ``.json`` beside a native file,
    or the signature's own interface."""
    signatures = interpreter.get_signature_list()
    if signatures:
        signature = next(iter(signatures))
        runner = interpreter.get_signature_runner(signature)
    else:  # onnx2tf's dynamic-range file has none: its tensors, by name and graph order
        signature, runner = "", _TensorRunner(interpreter)
    ins = signature_ports(runner.get_input_details())
    outs = signature_ports(runner.get_output_details())
    subject = f"'{model.path.name}'"
    metadata_props: dict[str, str] = dict(model.metadata_props)
    if model.format == ".onnx":
        specs_in, ports_in = match(subject, "inputs", model.inputs, ins)
        specs_out, ports_out = match(subject, "outputs", model.outputs, outs)
    else:
        io = read_io(tflite)
        if io is None:
            ports_in, ports_out = list(ins.values()), list(outs.values())
            specs_in, specs_out = own_specs(ports_in), own_specs(ports_out)
        else:
            specs_in, ports_in = io_ports(io, "inputs")
            specs_out, ports_out = io_ports(io, "outputs")
            metadata_props = {str(k): str(v) for k, v in (io.get("metadata") or {}).items()}
            _check_recorded(subject, ports_in + ports_out, {**ins, **outs})
    layout = LiteRtLayout(tflite, signature, specs_in, specs_out, ports_in, ports_out, metadata_props)
    return layout, runner


class _TensorRunner:
    """A signature runner's calls on a file without a signature: the interpreter's input and output
    tensors, keyed by their names."""

    def __init__(self, interpreter: Any) -> None:
        self._interpreter = interpreter
        interpreter.allocate_tensors()
        self._inputs = {detail["name"]: detail for detail in interpreter.get_input_details()}
        self._outputs = {detail["name"]: detail for detail in interpreter.get_output_details()}

    def get_input_details(self) -> dict[str, Any]:
        return self._inputs

    def get_output_details(self) -> dict[str, Any]:
        return self._outputs

    def __call__(self, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        interpreter = self._interpreter
        for name, array in feeds.items():
            detail = self._inputs[name]
            if tuple(detail["shape"]) != array.shape:
                interpreter.resize_tensor_input(detail["index"], array.shape)
                interpreter.allocate_tensors()
                detail["shape"] = np.array(array.shape)
            interpreter.set_tensor(detail["index"], array)
        interpreter.invoke()
        return {name: interpreter.get_tensor(detail["index"]) for name, detail in self._outputs.items()}


def _check_recorded(subject: str, recorded: list[Any], found: Mapping[str, Any]) -> None:
    missing = [port.key for port in recorded if port.key not in found]
    if missing:
        raise UnsupportedModelError(
            f"backend 'litert' | {subject}: its .json names signature port(s) {', '.join(missing)} that the "
            f"file does not have (it has {', '.join(found)}).",
            hint="put the .json written with this .tflite next to it, or remove it to open the file's own signature.",
        )


class LiteRtSession(Session):
    """One interpreter; runs are serialised (a LiteRT interpreter is not safe to invoke from two threads)."""

    weights = "f32"

    def __init__(
        self, model_path: Path, layout: LiteRtLayout, info: SessionInfo, runner: Any, request: OpenRequest
    ) -> None:
        super().__init__(model_path, layout.specs_in, layout.specs_out, info, layout.metadata, request=request)
        self._layout = layout
        self._runner = runner
        self._lock = threading.Lock()

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        layout = self._layout
        sizes = {
            feeds[spec.name].shape[0] for spec, port in zip(layout.specs_in, layout.inputs, strict=True) if port.batched
        }
        converted = {port.shape[0] for port in layout.inputs if port.batched}
        batch = sizes.pop() if len(sizes) == 1 else None
        if batch is None or {batch} == converted:
            return self._run_once(feeds)
        unbatched = [spec.name for spec, port in zip(layout.specs_out, layout.outputs, strict=True) if not port.batched]
        if unbatched:
            raise InputError(
                f"batch {batch} | '{self.model_path.name}' was converted at batch {min(converted)}, so deploykit runs "
                f"other batches sample by sample, but output(s) {', '.join(unbatched)} have no batch axis to join on.",
                hint=f"feed batch {min(converted)}.",
            )
        batched = {spec.name for spec, port in zip(layout.specs_in, layout.inputs, strict=True) if port.batched}
        samples = [
            self._run_once(
                {name: array[index : index + 1] if name in batched else array for name, array in feeds.items()}
            )
            for index in range(batch)
        ]
        return {name: np.concatenate([sample[name] for sample in samples], axis=0) for name in self.outputs}

    def _run_once(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        layout = self._layout
        fed = {
            port.key: port.to_litert(feeds[spec.name])
            for spec, port in zip(layout.specs_in, layout.inputs, strict=True)
        }
        with self._lock:
            if self._runner is None:
                raise UsageError(f"session for '{self.model_path.name}' | is closed.", hint="open a new session.")
            produced = self._runner(**fed)
        return {
            spec.name: port.from_litert(np.asarray(produced[port.key]), spec.dtype)
            for spec, port in zip(layout.specs_out, layout.outputs, strict=True)
        }

    def _close(self) -> None:
        with self._lock:
            self._runner = None
