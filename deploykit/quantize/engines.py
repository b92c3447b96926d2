"""The quantization engines: ONNX Runtime static QDQ, OpenVINO NNCF, and float16 conversion.

Each takes a named float model on disk and writes the reduced-precision model to a given path;
the engine's own exceptions become ``QuantizationError``. NNCF and onnxconverter-common are
imported here only, when used: a missing one is a ``BackendUnavailableError`` naming the
``quantize`` extra.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from deploykit.errors import BackendUnavailableError, InputError, QuantizationError, exception_line
from deploykit.quantize.calibration import CalibrationData, ort_reader

if TYPE_CHECKING:
    from deploykit.model import Model

NOT_AVAILABLE = {
    "ncnn": "ncnn quantizes with its ncnn2table and ncnn2int8 tools, which the ncnn and pnnx wheels do not ship "
    "(deploykit does not imitate them); build them from ncnn's source (tools/quantize) and see docs/ncnn.md",
}
"""Engines users ask for that deploykit does not offer, and why (the message says so instead of a bare no)."""
METHODS = ("minmax", "entropy", "percentile")


def _import(module: str, what: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise BackendUnavailableError(
            f"quantize | {what} needs the '{module.split('.')[0]}' package, which is not installed "
            f"({exception_line(exc, last=True)}).",
            hint="pip install 'deploykit[quantize]'.",
        ) from exc


@contextlib.contextmanager
def _quiet() -> Any:
    """Engines print progress bars and info logs; the report says what happened."""
    logger = logging.getLogger("nncf")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _working_directory(path: str) -> Iterator[None]:
    # contextlib.chdir is Python 3.11+; the process-wide directory is restored whatever happens
    previous = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def ort_pre_process(source: Model, output: Path) -> str | None:
    """ONNX Runtime's recommended pre-processing (shape inference, basic graph optimisation), of the
    model read (a copy of its proto: ORT adds its metadata to what it is given), not its file again.

    Returns None on success, or why it was skipped (the model is then quantized as it is).
    """
    import tempfile

    from onnxruntime.quantization.shape_inference import quant_pre_process

    given = type(source.proto)()
    given.CopyFrom(source.proto)

    try:
        # ORT's symbolic shape inference, when it cannot finish, dumps sym_shape_infer_temp.onnx and its
        # external data into the current directory: run it from a scratch directory, never the user's
        with _quiet(), tempfile.TemporaryDirectory(prefix="deploykit-pre-") as scratch, _working_directory(scratch):
            quant_pre_process(given, str(output.resolve()), skip_symbolic_shape=False)
    except Exception as exc:
        return f"ONNX Runtime's quant_pre_process skipped ({type(exc).__name__}: {exception_line(exc, last=True)})"
    return None


# Less room than this where a quantizer writes its working models means a failure there was the disk's.
_LOW_SPACE_BYTES = 1 << 20


def raise_if_out_of_room(exc: BaseException, output: Path) -> None:
    """A quantizer that ran out of disk reports what it failed to read back next ("Failed to find proper
    ai.onnx domain" from a model saved half): when an ``ENOSPC``/``EDQUOT``/``EFBIG`` is in the chain, or the
    folder of ``output`` (or the temporary folder the quantizers also write to) is all but full, raise the
    ``OSError`` the disk gave, which ``io.scratch_dir`` names for the user's output.

    Raises:
        OSError: the disk (or a quota, or ``ulimit -f``) is out of room.
    """
    import errno
    import shutil
    import tempfile

    from deploykit.io import FULL_ERRNOS

    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno in FULL_ERRNOS:
            raise cause
        cause = cause.__cause__ or cause.__context__
    for folder in (output.parent, Path(tempfile.gettempdir())):
        try:
            free = shutil.disk_usage(folder).free
        except OSError:
            continue
        if free < _LOW_SPACE_BYTES:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder)) from exc


def quantize_ort(
    source: Path, output: Path, data: CalibrationData, *, method: str, per_channel: bool, exclude: Sequence[str]
) -> None:
    """Static INT8 quantization in QDQ format: symmetric int8 weights (per channel), uint8 activations."""
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    methods = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }
    try:
        with _quiet():
            quantize_static(
                str(source),
                str(output),
                ort_reader(data),
                quant_format=QuantFormat.QDQ,
                per_channel=per_channel,
                # u8 activations × s8 weights: the VNNI/AMX kernels' own format; OpenVINO runs s8
                # activations from ORT's QDQ far slower (or fails to compile them with bf16)
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=list(exclude),
                calibrate_method=methods[method],
                extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
            )
    except InputError:  # a calibration photo that only decoding showed broken: the user's data, named as such
        raise
    except Exception as exc:
        raise_if_out_of_room(exc, output)
        raise QuantizationError(
            f"engine 'ort' | quantize_static failed on '{source.name}': {exception_line(exc, last=True)}",
            hint="exclude the failing node with --exclude, or try --quantizer nncf.",
        ) from exc


def quantize_nncf(
    source: Path,
    output: Path,
    data: CalibrationData,
    *,
    exclude: Sequence[str],
    max_drop: float | None = None,
    validate: Callable[[Any], float] | None = None,
) -> None:
    """NNCF post-training quantization of the ONNX model; with ``max_drop``, accuracy-controlled
    (``quantize_with_accuracy_control``, absolute drop of ``validate``'s metric)."""
    nncf = _import("nncf", "--quantizer nncf")
    import onnx

    model = onnx.load(str(source))
    calibration = nncf.Dataset(data.calibration, data.feeds)
    ignored = nncf.IgnoredScope(names=list(exclude)) if exclude else None
    try:
        with _quiet():
            if max_drop is None:
                quantized = nncf.quantize(model, calibration, subset_size=len(data.calibration), ignored_scope=ignored)
            else:
                assert validate is not None
                validation = nncf.Dataset(data.held_out, data.feeds)
                quantized = nncf.quantize_with_accuracy_control(
                    model,
                    calibration,
                    validation,
                    lambda candidate, _items: validate(candidate),
                    max_drop=max_drop,
                    drop_type=nncf.DropType.ABSOLUTE,
                    subset_size=len(data.calibration),
                    ignored_scope=ignored,
                )
    except (BackendUnavailableError, InputError):
        raise
    except Exception as exc:
        raise_if_out_of_room(exc, output)
        raise QuantizationError(
            f"engine 'nncf' | quantization failed on '{source.name}': {exception_line(exc, last=True)}",
            hint="exclude the failing node with --exclude, or try --quantizer ort.",
        ) from exc
    onnx.save(quantized, str(output))


def save_ir(onnx_path: Path, xml_path: Path) -> None:
    """The quantized ONNX model as OpenVINO IR (``.xml`` + ``.bin`` beside it)."""
    import openvino as ov

    try:
        ov.save_model(ov.convert_model(str(onnx_path)), str(xml_path), compress_to_fp16=False)
    except Exception as exc:
        raise QuantizationError(
            f"--ir '{xml_path}' | OpenVINO could not convert the quantized model: {exception_line(exc, last=True)}",
            hint="use the ONNX output; OpenVINO reads it directly.",
        ) from exc


def convert_fp16(source: Path, output: Path, *, exclude: Sequence[str]) -> dict[str, int]:
    """float16 weights and activations, inputs and outputs kept float32 (``keep_io_types``).

    Returns:
        op type → number of nodes kept in float32 (the converter's block list, and ``exclude``).
    """
    float16 = _import("onnxconverter_common.float16", "--fp16")
    import onnx

    model = onnx.load(str(source))
    blocked = set(float16.DEFAULT_OP_BLOCK_LIST)
    excluded = set(exclude)
    kept: dict[str, int] = {}
    for node in model.graph.node:
        if node.op_type in blocked or node.name in excluded:
            kept[node.op_type] = kept.get(node.op_type, 0) + 1
    try:
        with _quiet():
            converted = float16.convert_float_to_float16(
                model, keep_io_types=True, op_block_list=sorted(blocked), node_block_list=sorted(excluded)
            )
        onnx.save(converted, str(output))
    except Exception as exc:
        raise_if_out_of_room(exc, output)
        raise QuantizationError(
            f"--fp16 | converting '{source.name}' failed: {exception_line(exc, last=True)}",
            hint="keep the failing node in f32 with --exclude.",
        ) from exc
    return dict(sorted(kept.items()))


@dataclass(frozen=True)
class EngineJob:
    """What an engine is given: the prepared float model, where to write, the data and the user's choices."""

    source: Path
    output: Path
    data: CalibrationData
    method: str
    per_channel: bool
    exclude: Sequence[str]
    max_drop: float | None = None
    validate: Callable[[Any], float] | None = None


class QuantizeEngine:
    """One way to reduce a float model. Subclasses set the class attributes and write ``reduce``.

    Attributes:
        name: the ``--engine`` spelling (``fp16`` is chosen by ``--fp16``).
        title: the engine as messages name it.
        precision: what the result computes in: ``int8`` (QDQ) or ``f16``.
        methods: the calibration methods ``--method`` may name (empty: the engine chooses its ranges).
        per_channel: whether per-channel weight scales apply (and need opset 13).
        calibrates: whether the engine needs calibration data.
        accuracy_control: whether ``--max-drop`` steers the engine (else it only refuses a result over budget).
        module: the optional package the engine needs (None: a core dependency).
    """

    name: ClassVar[str]
    title: ClassVar[str]
    precision: ClassVar[str] = "int8"
    methods: ClassVar[tuple[str, ...]] = ()
    per_channel: ClassVar[bool] = True
    calibrates: ClassVar[bool] = True
    accuracy_control: ClassVar[bool] = False
    module: ClassVar[str | None] = None

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why the engine cannot run here (its package, an optional extra, is missing), or None."""
        import importlib.util

        if cls.module is None or importlib.util.find_spec(cls.module) is not None:
            return None
        return f"{cls.title} is not installed (pip install 'deploykit[quantize]')"

    def prepare(self, float_model: Model, scratch: Path, notes: list[str]) -> Path:
        """The model the engine quantizes (default: the float model's file as it is)."""
        return float_model.path

    def reduce(self, job: EngineJob) -> dict[str, int]:
        """Write the reduced model to ``job.output``; return op type → nodes kept in float."""
        raise NotImplementedError


class OrtEngine(QuantizeEngine):
    """ONNX Runtime's static QDQ quantization (``quantize_static``), after its pre-processing."""

    name = "ort"
    title = "ONNX Runtime"
    methods = METHODS

    def prepare(self, float_model: Model, scratch: Path, notes: list[str]) -> Path:
        pre_path = scratch / "pre.onnx"
        skipped = ort_pre_process(float_model, pre_path)
        notes += [skipped] if skipped else []
        return float_model.path if skipped else pre_path

    def reduce(self, job: EngineJob) -> dict[str, int]:
        quantize_ort(
            job.source, job.output, job.data, method=job.method, per_channel=job.per_channel, exclude=job.exclude
        )
        return {}


class NncfEngine(QuantizeEngine):
    """OpenVINO NNCF post-training quantization, accuracy-controlled under ``--max-drop``."""

    name = "nncf"
    title = "NNCF"
    accuracy_control = True
    module = "nncf"

    def reduce(self, job: EngineJob) -> dict[str, int]:
        quantize_nncf(
            job.source, job.output, job.data, exclude=job.exclude, max_drop=job.max_drop, validate=job.validate
        )
        return {}


class Fp16Engine(QuantizeEngine):
    """float16 conversion (onnxconverter-common), inputs and outputs kept float32."""

    name = "fp16"
    title = "float16 conversion"
    precision = "f16"
    per_channel = False
    calibrates = False
    module = "onnxconverter_common"

    def reduce(self, job: EngineJob) -> dict[str, int]:
        return convert_fp16(job.source, job.output, exclude=job.exclude)


QUANTIZE_ENGINES: dict[str, type[QuantizeEngine]] = {e.name: e for e in (OrtEngine, NncfEngine, Fp16Engine)}
"""Every engine by name: adding one is a class above and its name here."""
ENGINES = tuple(name for name, engine in QUANTIZE_ENGINES.items() if engine.calibrates)
"""The ``--engine`` names (float16 needs no calibration and is asked for with ``--fp16``)."""
DEFAULT_ENGINE = OrtEngine.name
