"""MNN backend: Alibaba's edge runtime (ARM NEON/fp16 kernels, x86 AVX2/AVX-512), device ``cpu``.

An ``.onnx`` model is converted once with MNN's converter into the converted-model cache
(``mnn_convert``); a native ``.mnn`` file is opened as it is, with the interface from the ``.json`` that
``deploykit export mnn`` writes beside it when there is one, else from the file (input shapes and
types; output shapes are then known only when they are computed). Inputs and outputs keep the ONNX
names, types and NCHW layout: MNN's internal NC4HW4 outputs are converted back, and integer tensors
MNN holds as int32 are handed back in the ONNX graph's type. A dynamic batch stays dynamic.

Precisions are what MNN does on this machine, found by running a one-layer net, not by CPU flags:
``f32``, ``f16`` where MNN's low-precision mode stores activations in fp16 here (ARMv8.2 CPUs),
``bf16`` where its bf16 mode does (builds with bf16 kernels).

MNN prints with C's ``printf`` to stdout (a banner at import, a line per low-precision load), where
deploykit's ``--json`` output goes: while MNN loads, stdout points elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session, SessionInfo, refuse_unsupported_kinds
from deploykit.backends.converted import Carried, interface_file
from deploykit.backends.devices import DeviceNames
from deploykit.backends.mnn_convert import CONVERTER_VARIABLE
from deploykit.backends.options import OptionSpec, cpu_count
from deploykit.backends.traits import Conversion, LoadWording, RawRuntime, RuntimePackage
from deploykit.errors import InputError, ModelError, ModelNotFoundError, UnsupportedModelError, UsageError
from deploykit.model import Model
from deploykit.tensors import TensorSpec

IO_FORMAT = "deploykit-mnn-io"
"""The ``format`` field of the ``.json`` beside an exported ``.mnn`` file."""
_PRECISIONS = ("f32", "f16", "bf16")
_DEVICE_NAMES = DeviceNames(
    kinds=frozenset({"cpu"}), expected="cpu", problem="is not a device MNN's Python package runs on"
)
_MODES = {"f32": "Normal", "f16": "Low", "bf16": "Low_BF16"}
_LEVELS = ("low", "normal", "high")
# MNN's BackendConfig enums (MNN/MNNForwardType.h), which its runtime configuration takes as numbers
_PRECISION_NUMBERS = {"Normal": 0, "High": 1, "Low": 2, "Low_BF16": 3}
_LEVEL_NUMBERS = {"normal": 0, "high": 1, "low": 2}
_WINOGRAD_MEMORY_LEVEL = 3
"""MNN's ``Interpreter::HintMode::WINOGRAD_MEMORY_LEVEL``: 0 turns Winograd convolution off."""
# MNN's element types by the name its Python binding prints (``dtype.float``)
_NUMPY_TYPES = {
    "float": np.float32,
    "double": np.float64,
    "int": np.int32,
    "int64": np.int64,
    "int8": np.int8,
    "uint8": np.uint8,
}
_MNN_TYPES = {np.dtype(numpy_type).name: name for name, numpy_type in _NUMPY_TYPES.items()}
_STDOUT_LOCK = threading.RLock()


@contextlib.contextmanager
def captured_stdout() -> Iterator[list[str]]:
    """Point file descriptor 1 at a temporary file while MNN loads; the list holds what it printed
    once the block ends. C's stdio buffers are flushed before fd 1 is restored, so nothing MNN
    buffered reaches the real stdout later."""
    said: list[str] = []
    with _STDOUT_LOCK:
        try:
            sys.stdout.flush()
            saved = os.dup(1)
        except (OSError, ValueError, AttributeError):  # no stdout to protect
            yield said
            return
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 1)
            try:
                yield said
            finally:
                _flush_c_stdio()
                os.dup2(saved, 1)
                os.close(saved)
                sink.seek(0)
                said.append(sink.read().decode("utf-8", "replace"))


def _flush_c_stdio() -> None:
    import ctypes

    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library to flush (not on Linux or macOS)
        pass


def _modules() -> tuple[Any, Any]:
    """MNN's ``expr`` and ``nn`` modules (imported quietly)."""
    with captured_stdout():
        import MNN.expr as expr
        import MNN.nn as nn
    return expr, nn


@cache
def applied_precisions() -> tuple[str, ...]:
    """The precisions MNN's CPU path really applies here: a value that f16 (or bf16) storage rounds
    comes back rounded only when MNN casts activations to that type on this CPU."""
    expr, _ = _modules()
    found = ["f32"]
    # 1 + 2**-12 is below half an ulp of 1.0 in both f16 (2**-10) and bf16 (2**-7)
    probe = np.full((1, 16, 4, 4), 1 + 2.0**-12, np.float32)
    with tempfile.TemporaryDirectory(prefix="deploykit-mnn-probe-") as scratch, captured_stdout():
        path = str(Path(scratch) / "probe.mnn")
        x = expr.placeholder(list(probe.shape), expr.NCHW)
        x.name = "x"
        y = expr.relu(x)
        y.name = "y"
        expr.save([y], path)
        for precision in ("f16", "bf16"):
            spec = TensorSpec("x", np.dtype(np.float32), probe.shape)
            module = _load(Path(path), [spec], [TensorSpec("y", spec.dtype, spec.shape)], precision, 1, False, {})
            out = module.forward([expr.const(probe, list(probe.shape), expr.NCHW)])[0]
            if np.all(np.asarray(_host(expr, out)) == 1.0):
                found.append(precision)
    return tuple(found)


def _host(expr: Any, variable: Any) -> np.ndarray:
    """A computed variable as a host array in NCHW order (MNN computes some in NC4HW4)."""
    if variable.data_format == expr.NC4HW4:
        variable = expr.convert(variable, expr.NCHW)
    return np.array(variable.read(), copy=True)


def _recorded_interface(path: Path) -> tuple[list[TensorSpec], list[TensorSpec], dict[str, str]] | None:
    """The ONNX inputs, outputs and metadata the ``.json`` beside a ``.mnn`` records; None without one.

    Raises:
        ModelError: the ``.json`` is there but cannot be read as deploykit's MNN interface file.
    """
    io_path = interface_file(path)
    if not io_path.is_file():
        return None
    try:
        io = json.loads(io_path.read_text())
        if io.get("format") != IO_FORMAT:
            raise ValueError(f"format is {io.get('format')!r}")
        specs_in = [TensorSpec.from_dict(s) for s in io["inputs"]]
        specs_out = [TensorSpec.from_dict(s) for s in io["outputs"]]
        return specs_in, specs_out, {str(k): str(v) for k, v in io.get("metadata", {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelError(
            f"model '{path.name}' | its interface file {io_path.name} cannot be read ({exc}).",
            hint=f"write it again with deploykit export mnn, or remove {io_path.name} to open the file alone.",
        ) from exc


def _converted_file(model: Model, options: Mapping[str, Any]) -> Path | None:
    """The cached ``.mnn`` of an ``.onnx`` model (None for a ``.mnn`` file)."""
    if model.format != ".onnx":
        return None
    from deploykit.backends.mnn_convert import MODEL_NAME, convert

    refuse_unsupported_kinds(MnnBackend(), model.path, model.inputs, model.outputs)
    return convert(model).path(MODEL_NAME)


def _carry(model: Model, options: Mapping[str, Any], folder: Path, stem: str) -> Carried | None:
    """``stem.mnn`` and ``stem.json`` (the ONNX inputs, outputs and metadata, the converter's version and
    the source's SHA-256): what ``deploykit export mnn`` writes."""
    import shutil

    from deploykit.backends.mnn_convert import converter_version

    cached = _converted_file(model, options)
    if cached is None:
        return None
    target = folder / f"{stem}.mnn"
    shutil.copyfile(cached, target)
    document = {
        "format": IO_FORMAT,
        "source": model.path.name,
        "source_sha256": model.sha256,
        "converter": converter_version(),
        "inputs": [spec.to_dict() for spec in model.inputs],
        "outputs": [spec.to_dict() for spec in model.outputs],
        "metadata": dict(model.metadata_props),
    }
    io = interface_file(target)
    io.write_text(json.dumps(document, indent=1) + "\n")
    return Carried(target, (target, io))


def _emulated_environment() -> dict[str, str]:
    """The converter only writes a file (the same on every architecture); under emulation the
    worker runs it with the host's interpreter, since the target's cannot be started as a child
    without the kernel's binfmt set up. MNN itself, which computes, is the target's build."""
    return {CONVERTER_VARIABLE: sys.executable}


class MnnBackend(Backend):
    """Alibaba MNN through its Python binding, with MNN's converter (its binding, in a child process)
    converting ONNX models."""

    name = "mnn"
    runtime = RuntimePackage(
        module="MNN", pip_extra="mnn", distributions=("mnn",), emulated_environment=_emulated_environment
    )
    formats = (".onnx", ".mnn")
    options: ClassVar[Mapping[str, OptionSpec | str]] = {
        "precision": OptionSpec(
            "f32 | f16 (MNN's low precision) | bf16 (its low bf16 mode), where this machine runs it",
            "str",
            "f32",
            choices=_PRECISIONS,
        ),
        "threads": OptionSpec("MNN threads (0 = one per CPU this process may use)", "int", 0, low=0, per_cpu=True),
        "memory": OptionSpec(
            "MNN's memory mode: low saves memory, high trades it for speed", "str", "normal", choices=_LEVELS
        ),
        "power": OptionSpec(
            "MNN's power mode (how its threads wait and bind on big.LITTLE CPUs)", "str", "normal", choices=_LEVELS
        ),
        "winograd": OptionSpec(
            "Winograd 3x3 convolution kernels: faster, but they move f32 results by ~1e-4 relative, more than an "
            "element-wise f32 verdict allows",
            "bool",
            False,
        ),
    }
    conversion = Conversion(converted_file=_converted_file, carry=_carry, recorded_interface=_recorded_interface)
    wording = LoadWording(hint="try another backend, or 'deploykit inspect' the model for ops MNN lacks.")
    raw = RawRuntime(
        "deploykit.backends.raw:run_mnn",
        {"threads": 1, "winograd": False},
        sample_every=10,
        without_converter={"DEPLOYKIT_MNN_CONVERTER": "off"},
    )

    def import_runtime(self) -> Any:
        if self.runtime.module in sys.modules:
            return sys.modules[self.runtime.module]
        with captured_stdout():
            return super().import_runtime()

    def version(self) -> str:
        self.import_runtime()
        return f"mnn {metadata.version('mnn')}"

    def devices(self) -> list[str]:
        self.import_runtime()
        return ["cpu"]

    def precisions(self, device: str | None = None) -> list[str]:
        """f32, and f16/bf16 where MNN really stores activations so here (see ``applied_precisions``)."""
        self.import_runtime()
        _DEVICE_NAMES.parse(self.name, device or self.default_device)
        return list(applied_precisions())

    def _open(self, model: Model, request: OpenRequest) -> Session:
        device, options = request.device, request.options
        _DEVICE_NAMES.parse(self.name, device)
        asked = request.precision  # None when none was given: the default f32 is no request to report against
        offered = self.precisions("cpu")
        ran = asked if asked in offered else "f32"
        if model.format == ".mnn":
            path, specs_in, specs_out, metadata_props, typed = _native_interface(model.path)
        else:
            path = _converted_file(model, options) or model.path
            specs_in, specs_out, typed = list(model.inputs), list(model.outputs), True
            metadata_props = dict(model.metadata_props)
        threads = request.option("threads") or cpu_count()
        winograd = request.option("winograd")
        with captured_stdout() as said:
            try:
                module = _load(path, specs_in, specs_out, ran, threads, winograd, options)
            except Exception as exc:
                module, failure = None, exc
        if module is None:
            reason = " ".join(line.strip() for line in "".join(said).splitlines() if "device supports" not in line)
            raise UnsupportedModelError(
                f"backend 'mnn' | cannot load '{model.path.name}': {reason or failure}.", hint=self.wording.hint
            )
        feed_types = _feed_types(module, specs_in, model.path.name)
        precision_note = None if asked in (None, ran) else f"MNN runs {ran} here, not {asked}"
        info = SessionInfo(
            backend=self.name,
            backend_version=self.version(),
            device_requested=device,
            device="cpu",
            precision=ran,
            providers=[
                "mnn cpu",
                f"{threads} thread(s)",
                f"precision mode {_MODES[ran].lower()}",
                f"winograd {'on' if winograd else 'off'}",
            ],
            fallback=precision_note is not None,
            fallback_reason=precision_note,
            options=dict(options),
        )
        return MnnSession(model.path, specs_in, specs_out, info, metadata_props, module, feed_types, typed, request)


def _load(
    path: Path,
    specs_in: list[TensorSpec],
    specs_out: list[TensorSpec],
    precision: str,
    threads: int,
    winograd: bool,
    options: Mapping[str, Any],
) -> Any:
    """An MNN ``Module`` for the file, on a runtime of its own configured by the session's options."""
    _, nn = _modules()
    config = {
        "backend": "CPU",
        "precision": _PRECISION_NUMBERS[_MODES[precision]],
        "numThread": threads,
        "memory": _LEVEL_NUMBERS[MnnBackend.option_value(options, "memory")],
        "power": _LEVEL_NUMBERS[MnnBackend.option_value(options, "power")],
    }
    runtime = nn.create_runtime_manager((config,))
    if not winograd:
        runtime.set_hint(_WINOGRAD_MEMORY_LEVEL, 0)
    return nn.load_module_from_file(
        str(path), [s.name for s in specs_in], [s.name for s in specs_out], runtime_manager=runtime
    )


def _feed_types(module: Any, specs_in: list[TensorSpec], name: str) -> list[tuple[np.dtype[Any], Any]]:
    """Per input, the numpy type MNN takes it in and the layout it declares."""
    info = module.get_info()
    variables = info.get("inputs") or []
    if len(variables) != len(specs_in):
        raise UnsupportedModelError(
            f"backend 'mnn' | '{name}' as MNN loaded it has {len(variables)} input(s), the model {len(specs_in)}.",
            hint="convert the model again (deploykit export mnn), or try another backend.",
        )
    found = []
    for spec, variable in zip(specs_in, variables, strict=True):
        kind = str(variable.dtype).rpartition(".")[2]
        if kind not in _NUMPY_TYPES:
            raise UnsupportedModelError(
                f"input '{spec.name}' | MNN holds it as {kind}, which deploykit cannot feed.",
                hint="cast the input to float32 in the model, or use another backend.",
            )
        found.append((np.dtype(_NUMPY_TYPES[kind]), variable.data_format))
    return found


def _native_interface(path: Path) -> tuple[Path, list[TensorSpec], list[TensorSpec], dict[str, str], bool]:
    """A ``.mnn`` file's interface: from the ``.json`` beside it when there is one (the ONNX names, types
    and shapes), else from the file (output types and shapes unknown until computed)."""
    if not path.is_file():
        raise ModelNotFoundError(f"model '{path}' | does not exist or is not a file.", hint="check the path.")
    recorded = _recorded_interface(path)
    if recorded is not None:
        return path, *recorded, True
    _, nn = _modules()
    with captured_stdout() as said:
        try:
            names = nn.load_module_from_file(str(path), [], []).get_info()
            declared = nn.load_module_from_file(str(path), names["inputNames"], names["outputNames"]).get_info()
        except Exception as exc:
            declared, failure = None, exc
    if declared is None:
        reason = " ".join(line.strip() for line in "".join(said).splitlines() if "device supports" not in line)
        raise UnsupportedModelError(
            f"backend 'mnn' | cannot read '{path.name}': it is not an MNN model ({reason or failure}).",
            hint="pass a .mnn file written by MNN's converter or deploykit export mnn.",
        )
    specs_in = []
    for name, variable in zip(declared["inputNames"], declared["inputs"], strict=True):
        kind = str(variable.dtype).rpartition(".")[2]
        shape = tuple(int(d) if int(d) >= 0 else None for d in variable.shape)
        specs_in.append(TensorSpec(name, np.dtype(_NUMPY_TYPES.get(kind, np.float32)), shape))
    specs_out = [TensorSpec(name, np.dtype(np.float32), None) for name in declared["outputNames"]]
    return path, specs_in, specs_out, {}, False


class MnnSession(Session):
    """One MNN ``Module``; runs are serialised (a module keeps its intermediate tensors between calls)."""

    def __init__(
        self,
        model_path: Path,
        specs_in: list[TensorSpec],
        specs_out: list[TensorSpec],
        info: SessionInfo,
        metadata_props: Mapping[str, str],
        module: Any,
        feed_types: list[tuple[np.dtype[Any], Any]],
        typed: bool,
        request: OpenRequest,
    ) -> None:
        super().__init__(model_path, specs_in, specs_out, info, metadata_props, request=request)
        self._module = module
        self._feed_types = feed_types
        self._typed = typed
        self._lock = threading.Lock()
        self._expr, _ = _modules()

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        expr = self._expr
        with self._lock:
            if self._module is None:
                raise UsageError(f"session for '{self.model_path.name}' | is closed.", hint="open a new session.")
            variables = [
                _variable(expr, spec.name, feeds[spec.name], dtype, layout)
                for spec, (dtype, layout) in zip(self.inputs.values(), self._feed_types, strict=True)
            ]
            produced = self._module.forward(variables)
            arrays = [_host(expr, variable) for variable in produced]
        if len(arrays) != len(self.outputs):
            raise UnsupportedModelError(
                f"backend 'mnn' | running '{self.model_path.name}' gave {len(arrays)} output(s), the model has "
                f"{len(self.outputs)}.",
                hint="try another backend.",
            )
        return {
            spec.name: _as_spec(spec, array) if self._typed else array
            for spec, array in zip(self.outputs.values(), arrays, strict=True)
        }

    def _close(self) -> None:
        with self._lock:
            self._module = None


def _variable(expr: Any, name: str, array: np.ndarray, dtype: np.dtype[Any], layout: Any) -> Any:
    """One feed as an MNN constant of the type and layout the module's input declares."""
    if array.dtype != dtype:
        if dtype.kind in "iu" and array.size and array.dtype.kind in "iu":
            info = np.iinfo(dtype)
            if array.min() < info.min or array.max() > info.max:
                raise InputError(
                    f"input '{name}' | holds values outside {dtype.name}, which is what MNN holds it as.",
                    hint=f"feed values in the {dtype.name} range.",
                )
        array = array.astype(dtype)
    array = np.ascontiguousarray(array)
    kind = getattr(expr, _MNN_TYPES[dtype.name])
    if layout == expr.NC4HW4:
        return expr.convert(expr.const(array, list(array.shape), expr.NCHW, kind), expr.NC4HW4)
    return expr.const(array, list(array.shape), layout, kind)


def _as_spec(spec: TensorSpec, array: np.ndarray) -> np.ndarray:
    """An output in the ONNX graph's type (MNN holds int64 and bool as int32) and, for a 0-d or
    otherwise fixed output MNN flattened, the graph's shape."""
    if array.dtype != spec.dtype:
        array = array.astype(spec.dtype)
    if spec.is_static and spec.shape is not None and array.shape != spec.shape:
        shape = tuple(int(d) for d in spec.shape if isinstance(d, int))
        if array.size == int(np.prod(shape)):
            array = array.reshape(shape)
    return array
