"""ncnn backend: Tencent's edge runtime (ARM NEON/fp16/bf16 kernels, Vulkan), devices ``cpu`` and ``vulkan[:N]``.

An ``.onnx`` model is converted once with pnnx into deploykit's cache (``ncnn_convert``) and its
interface checked (``ncnn_layout``); a native ``.param`` + ``.bin`` pair is opened as it is, with the
interface from the ``.json`` that ``deploykit export ncnn`` writes beside it when there is one.
Inputs and outputs keep the ONNX names: pnnx's ``in0``/``out0`` are mapped by order and every shape
is checked against the ONNX graph.

pnnx needs fixed input shapes: they come from the model, the ``shape`` option or deploykit's metadata,
else opening is an error naming the input. An ncnn ``Mat`` holds one sample, so a dynamic batch axis
is converted at batch 1 and a batch of N runs as N samples, one after the other.

Precisions are what ncnn does on this machine, found by running a one-layer net, not by CPU flags:
``f32`` (fp16/bf16 storage and arithmetic off, weights kept f32), ``f16`` where ncnn stores
activations in fp16 here (ARM CPUs with fp16 or VFPv4), ``bf16`` where its bf16 storage is built in.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.backends.base import Backend, OpenRequest, Session, SessionInfo
from deploykit.backends.devices import DeviceNames
from deploykit.backends.ncnn_layout import NcnnLayout, check_layers, native_layout, onnx_layout, weights_file
from deploykit.backends.options import OptionSpec
from deploykit.backends.traits import LoadWording, RawRuntime, RuntimePackage, device_error
from deploykit.errors import DeployKitError, InputError, ModelError, UnsupportedModelError, UsageError
from deploykit.model import Model

_PRECISIONS = ("f32", "f16", "bf16")
_DEVICE_NAMES = DeviceNames(
    kinds=frozenset({"cpu", "vulkan"}), expected="cpu, vulkan or vulkan:N", indexed=frozenset({"vulkan"})
)
_PROBE_PARAM = "7767517\n2 2\nInput in0 0 1 in0\nAbsVal abs 1 1 in0 out0\n"


def _quiet_gpu_count() -> int:
    """``ncnn.get_gpu_count()`` without the lines ncnn prints when no Vulkan loader is installed."""
    import os

    import ncnn

    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            return int(ncnn.get_gpu_count())
    finally:
        os.dup2(saved, 2)
        os.close(saved)


@cache
def gpu_count() -> int:
    return _quiet_gpu_count()


def _set_precision(opt: Any, precision: str) -> None:
    fp16, bf16 = precision == "f16", precision == "bf16"
    opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = fp16
    opt.use_bf16_storage = opt.use_bf16_packed = bf16


@cache
def applied_precisions() -> tuple[str, ...]:
    """The precisions ncnn's CPU path really applies here: a value that f16 (or bf16) storage rounds
    comes back rounded only when ncnn casts activations to that type on this CPU."""
    import ncnn

    found = ["f32"]
    for precision in ("f16", "bf16"):
        net = ncnn.Net()
        _set_precision(net.opt, precision)
        net.opt.num_threads = 1
        if net.load_param_mem(_PROBE_PARAM) != 0 or net.load_model(ncnn.DataReaderFromEmpty()) != 0:
            continue
        # 1 + 2**-12 is below half an ulp of 1.0 in both f16 (2**-10) and bf16 (2**-7)
        probe = np.full((4, 4, 16), 1 + 2.0**-12, np.float32)
        extractor = net.create_extractor()
        extractor.input("in0", ncnn.Mat(probe).clone())
        status, result = extractor.extract("out0")
        if status == 0 and np.all(np.array(result) == 1.0):
            found.append(precision)
    return tuple(found)


def _emulated_environment() -> dict[str, str]:
    """pnnx only converts the file (the same on every architecture); under emulation the worker
    runs the host's pnnx natively, since the target's pnnx executable cannot be started there
    without binfmt. ncnn itself, which computes, is the target's build."""
    from deploykit.backends.ncnn_convert import PNNX_VARIABLE, pnnx_executable

    try:
        return {PNNX_VARIABLE: str(pnnx_executable())}
    except DeployKitError:
        return {}


class NcnnBackend(Backend):
    """Tencent ncnn through its Python bindings, with pnnx converting ONNX models."""

    name = "ncnn"
    runtime = RuntimePackage(
        module="ncnn", pip_extra="ncnn", distributions=("ncnn", "pnnx"), emulated_environment=_emulated_environment
    )
    formats = (".onnx", ".param")
    options: ClassVar[Mapping[str, OptionSpec | str]] = {
        "precision": OptionSpec(
            "f32 (no fp16/bf16 storage, f32 weights) | f16 | bf16, where this machine runs it",
            "str",
            "f32",
            choices=_PRECISIONS,
        ),
        "threads": OptionSpec("ncnn threads (0 = ncnn's default: the big cores)", "int", 0, low=0, per_cpu=True),
        "light_mode": OptionSpec("free intermediate blobs as soon as they are used", "bool", True),
        "winograd": OptionSpec("Winograd convolution kernels", "bool", True),
        "sgemm": OptionSpec("im2col + sgemm convolution kernels", "bool", True),
        "shape": OptionSpec(
            "fixed shapes for dynamic inputs, NAME:SHAPE;NAME:SHAPE (pnnx converts at fixed shapes)", "str"
        ),
    }
    wording = LoadWording(hint="try another backend, or 'deploykit inspect' the model for ops ncnn lacks.")
    # pnnx converts every case (~0.25 s of CPU, on both sides): its tensor domain, every 10th case of it
    raw = RawRuntime(
        "deploykit.backends.raw:run_ncnn",
        {"threads": 1},
        outside="deploykit.backends.raw:ncnn_outside",
        sample_every=10,
        without_converter={"DEPLOYKIT_PNNX": "/nonexistent/deploykit-conformance/pnnx"},
    )

    def version(self) -> str:
        self.import_runtime()
        return f"ncnn {metadata.version('ncnn')}"

    def devices(self) -> list[str]:
        self.import_runtime()
        return ["cpu", *(f"vulkan:{index}" for index in range(gpu_count()))]

    def unavailable_devices(self) -> dict[str, str]:
        self.import_runtime()
        return {} if gpu_count() else {"vulkan": "ncnn finds no Vulkan device (no GPU, driver or libvulkan)"}

    def precisions(self, device: str | None = None) -> list[str]:
        """On the CPU: f32, and f16/bf16 where ncnn really stores activations so here (see
        ``applied_precisions``). On a Vulkan device f32 only: ncnn's Python binding does not say
        whether a device stores fp16, and ncnn would quietly keep f32 where it does not."""
        self.import_runtime()
        kind = _DEVICE_NAMES.parse(self.name, device or self.default_device).kind
        return list(applied_precisions()) if kind == "cpu" else ["f32"]

    def model_files(self, path: Path, options: Mapping[str, Any]) -> list[Path]:
        """A ``.param`` with its ``.bin`` (and the ``.json`` beside them, when there is one)."""
        files = super().model_files(path, options)
        return [files[0], weights_file(path), *files[1:]] if path.suffix.lower() == ".param" else files

    def _open(self, model: Model, request: OpenRequest) -> Session:
        import ncnn

        device, allow_fallback = request.device, request.allow_fallback
        model_path = model.path

        parsed = _DEVICE_NAMES.parse(self.name, device)
        kind, index = parsed.kind, parsed.number
        fallback_reason = None
        if kind == "vulkan" and index >= gpu_count():
            fallback_reason = (
                f"ncnn finds {gpu_count()} Vulkan device(s) here (no GPU, driver or libvulkan.so.1)"
                if gpu_count() == 0
                else f"ncnn finds only {gpu_count()} Vulkan device(s) (vulkan:0 to vulkan:{gpu_count() - 1})"
            )
            if not allow_fallback:
                raise device_error(
                    self.name,
                    device,
                    fallback_reason + ".",
                    hint="install the GPU's Vulkan driver and loader, use device 'cpu', or pass "
                    "allow_fallback=True (--allow-fallback) to run on the CPU and have it reported.",
                )
            kind = "cpu"
        asked = request.precision  # None when none was given: the default f32 is no request to report against
        offered = self.precisions(f"vulkan:{index}" if kind == "vulkan" else "cpu")
        ran = asked if asked in offered else "f32"
        if model.format == ".param":
            layout = native_layout(model_path)
        else:
            layout = onnx_layout(model, request.option("shape"), fp16_weights=ran == "f16")
        net = ncnn.Net()
        opt = net.opt
        _set_precision(opt, ran)
        if threads := request.option("threads"):
            opt.num_threads = threads
        opt.lightmode = request.option("light_mode")
        winograd = request.option("winograd")
        opt.use_winograd_convolution = winograd
        opt.use_winograd23_convolution = opt.use_winograd43_convolution = opt.use_winograd63_convolution = winograd
        opt.use_sgemm_convolution = request.option("sgemm")
        if kind == "vulkan":
            opt.use_vulkan_compute = True
            net.set_vulkan_device(index)
        if model.format == ".param":
            check_layers(layout.param, layout.subject)
        if net.load_param(str(layout.param)) != 0:
            raise UnsupportedModelError(
                f"backend 'ncnn' | cannot read {layout.subject}: ncnn refused its .param file {layout.param}.",
                hint=self.wording.hint,
            )
        if net.load_model(str(layout.bin)) != 0:
            raise ModelError(
                f"model '{layout.param.name}' | ncnn cannot read its weights {layout.bin.name}: the file is "
                "shorter than the layers in the .param need, so it belongs to another model.",
                hint="pass the .bin written together with this .param (deploykit export ncnn writes both).",
            )
        if kind == "vulkan" and not opt.use_vulkan_compute:
            raise device_error(
                self.name, device, "ncnn turned Vulkan compute off while loading.", hint="use device 'cpu'."
            )
        blobs = {"inputs": list(net.input_names()), "outputs": list(net.output_names())}
        for side, ports in (("inputs", layout.inputs), ("outputs", layout.outputs)):
            missing = [p.blob for p in ports if p.blob not in blobs[side]]
            if missing:
                raise UnsupportedModelError(
                    f"backend 'ncnn' | {layout.subject}: the ncnn graph has no {side[:-1]} blob(s) "
                    f"{', '.join(missing)}; it has {', '.join(blobs[side]) or 'none'}.",
                    hint="convert the model again (deploykit export ncnn), or try another backend.",
                )
        # a .bin with f16 weights computes in f32 on f16-rounded weights: an f16 model, as ORT reports one
        ran = "f16" if layout.weights == "f16" and ran == "f32" else ran
        precision_note = None if asked in (None, ran) else f"ncnn runs {ran} here, not {asked}"
        if precision_note and layout.weights == "f16":
            precision_note += f" ({layout.param.name}'s .bin holds f16 weights)"
        info = SessionInfo(
            backend=self.name,
            backend_version=self.version(),
            device_requested=device,
            device="cpu" if kind == "cpu" else f"vulkan:{index}",
            precision=ran,
            providers=[
                f"ncnn {'vulkan' if kind == 'vulkan' else 'cpu'}",
                f"{opt.num_threads} thread(s)",
                f"{layout.weights} weights",
            ],
            fallback=fallback_reason is not None or precision_note is not None,
            fallback_reason="; ".join(r for r in (fallback_reason, precision_note) if r) or None,
            options=dict(request.options),
        )
        return NcnnSession(model_path, layout, info, net, request)


class NcnnSession(Session):
    """One ``ncnn.Net``; each run makes its own ``Extractor`` (ncnn runs extractors of one net in parallel)."""

    def __init__(self, model_path: Path, layout: NcnnLayout, info: SessionInfo, net: Any, request: OpenRequest) -> None:
        super().__init__(model_path, layout.specs_in, layout.specs_out, info, layout.metadata, request=request)
        self._layout = layout
        self._net = net
        self._lock = threading.Lock()

    def _run(self, feeds: dict[str, np.ndarray]) -> Mapping[str, np.ndarray]:
        layout = self._layout
        batches = {
            feeds[name].shape[axis] for name, axis in layout.batch_axes.items() if name in feeds and axis is not None
        }
        batch = batches.pop() if batches else 1
        if batch != 1:
            unbatched = [s.name for s in layout.specs_out if layout.batch_axes.get(s.name) is None]
            if unbatched:
                raise InputError(
                    f"batch {batch} | an ncnn Mat holds one sample, so deploykit runs a batch sample by sample, "
                    f"but output(s) {', '.join(unbatched)} of {layout.subject} have no batch axis to join them on.",
                    hint="feed one sample at a time.",
                )
        samples = [self._run_one(feeds, index if batch != 1 else None) for index in range(batch)]
        if batch == 1:
            return samples[0]
        return {
            name: np.concatenate([sample[name] for sample in samples], axis=layout.batch_axes[name] or 0)
            for name in self.outputs
        }

    def _run_one(self, feeds: dict[str, np.ndarray], index: int | None) -> dict[str, np.ndarray]:
        import ncnn

        layout = self._layout
        with self._lock:
            if self._net is None:
                raise UsageError(f"session for '{self.model_path.name}' | is closed.", hint="open a new session.")
            extractor = self._net.create_extractor()
        try:
            for spec, port in zip(layout.specs_in, layout.inputs, strict=True):
                array = feeds[spec.name]
                axis = layout.batch_axes.get(spec.name)
                if index is not None and axis is not None:
                    array = np.take(array, [index], axis=axis)
                if array.dtype.kind in "iub":
                    array = _as_int32(spec.name, array)
                elif array.dtype != np.float32:
                    array = array.astype(np.float32)
                # a Mat made from an array only points at its memory: keep the array alive until cloned.
                # pnnx's batch axis goes to the Mat's own batch (n), as pnnx's model_ncnn.py feeds it:
                # dropped at size 1, n samples otherwise
                contiguous = np.ascontiguousarray(array)
                extractor.input(port.blob, ncnn.Mat(contiguous, batch_index=port.batch_index).clone())
            produced = {}
            for spec, port in zip(layout.specs_out, layout.outputs, strict=True):
                status, mat = extractor.extract(port.blob)
                copied = (
                    np.array(mat.numpy(batch_index=port.batch_index), dtype=np.float32, copy=True)
                    if status == 0
                    else None
                )
                del mat
                if copied is None:
                    raise UnsupportedModelError(
                        f"backend 'ncnn' | running {layout.subject} failed at output '{spec.name}' ({port.blob}) "
                        f"with status {status}.",
                        hint="try another backend.",
                    )
                if port.shape or spec.shape == ():  # a 0-d output is one value, which ncnn gives as (1,)
                    if copied.size != int(np.prod(port.shape)):
                        raise UnsupportedModelError(
                            f"output '{spec.name}' | ncnn gave {copied.size} values as {port.blob}, the converted "
                            f"graph declares {port.shape}.",
                            hint="try another backend.",
                        )
                    copied = copied.reshape(port.shape)
                produced[spec.name] = copied
            return produced
        finally:
            # an extractor's blobs come from the net's allocator: freed now, not when an error's
            # traceback lets go of it after the session closed ("pool allocator destroyed too early")
            extractor.clear()

    def _close(self) -> None:
        with self._lock:
            net, self._net = self._net, None
        if net is not None:
            net.clear()


def _as_int32(name: str, array: np.ndarray) -> np.ndarray:
    """ncnn reads integer inputs (indices) as int32 bits, as pnnx's own test script feeds them."""
    info = np.iinfo(np.int32)
    if array.size and (array.min() < info.min or array.max() > info.max):
        raise InputError(
            f"input '{name}' | holds values outside int32, which is what ncnn reads integer inputs as.",
            hint="feed values in the int32 range.",
        )
    return array.astype(np.int32)
