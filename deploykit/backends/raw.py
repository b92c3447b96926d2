"""The raw runtimes, called the way their own documentation shows: the built-in backends' raw runners
(``Backend.raw``, a ``RawRuntime`` naming these functions), which the conformance suite measures deploykit
against.

Each runner takes a model file and the case's inputs in graph-input order and returns the outputs in
graph-output order, exactly as the runtime hands them back (no conversion: that is what deploykit is
measured against). The runtimes compute in f32, as deploykit is asked to (``Backend.precision_options("f32")``),
on one thread (two workers share the CPUs), and ``RawRuntime.options`` gives deploykit the same.

This module must stay raw: it calls the runtimes' APIs and imports no deploykit module but the converter
environments (where onnx2tf is installed), never the backends' or sessions' code it is compared with
(tests/test_architecture.py checks it).
"""

from __future__ import annotations

import re
import signal
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any


def _run_tool(name: str, command: list[str], cwd: Path, timeout_s: float, env: dict[str, str] | None = None) -> Any:
    """A converter's command line run to its end in ``cwd``, its output and errors captured together."""
    try:
        return subprocess.run(
            command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{name} did not finish in {timeout_s} s") from exc


def _how(done: Any) -> str:
    code = done.returncode
    return f"exit status {code}" if code >= 0 else f"signal {signal.Signals(-code).name}"


def _last_lines(done: Any) -> str:
    """The tool's last two lines of output, without terminal colours."""
    return " / ".join(_ANSI.sub("", done.stdout.decode("utf-8", "replace")).strip().splitlines()[-2:])


def _graph_names(model_path: Path) -> tuple[list[str], list[str]]:
    import onnx

    graph = onnx.load(str(model_path)).graph
    initializers = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in initializers], [o.name for o in graph.output]


def run_onnxruntime(model_path: Path, inputs: list[Any]) -> list[Any]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return list(session.run(None, dict(zip(names, inputs, strict=True))))


@cache
def _openvino_core() -> Any:
    import openvino

    return openvino.Core()


def run_openvino(model_path: Path, inputs: list[Any]) -> list[Any]:
    core = _openvino_core()
    compiled = core.compile_model(
        core.read_model(str(model_path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}
    )
    request = compiled.create_infer_request()
    results = request.infer(inputs)
    return [results[port] for port in compiled.outputs]


def run_opencv(model_path: Path, inputs: list[Any]) -> list[Any]:
    import cv2

    input_names, output_names = _graph_names(model_path)
    net = cv2.dnn.readNet(str(model_path))
    for name, value in zip(input_names, inputs, strict=True):
        net.setInput(value, name)
    return list(net.forward(output_names))


def run_reference(model_path: Path, inputs: list[Any]) -> list[Any]:
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(str(model_path))
    return list(evaluator.run(None, dict(zip(evaluator.input_names, inputs, strict=True))))


def litert_outside(model_path: Path) -> str | None:
    """Why a model is outside LiteRT's domain in this suite: onnx2tf converts float32 tensors of fixed,
    non-empty shapes (rank 1 to 5 here); ncnn's domain with rank 5 too."""
    reason = ncnn_outside(model_path)
    if reason is None or not reason.endswith("not 1 to 4"):
        return reason
    return None if reason.split("rank ")[1].startswith("5,") else reason.replace("1 to 4", "1 to 5")


def run_litert(model_path: Path, inputs: list[Any]) -> list[Any]:
    """onnx2tf converts the ONNX file in the ``litert`` converter environment, as its README shows
    (``onnx2tf -i model.onnx -osd -coion``: a signature with the ONNX names, the calibration sample it
    reads placed in its working folder, offline), and the LiteRT interpreter runs the f32 file on one
    thread, fed in the layout the file declares (channel-last where onnx2tf made it so) and read back."""
    import numpy as np
    import onnx
    from ai_edge_litert.interpreter import Interpreter

    from deploykit.converters import get_environment

    environment = get_environment("litert")
    graph = onnx.load(str(model_path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    names = [i.name for i in graph.input if i.name not in initializers]
    output_shapes = [tuple(d.dim_value for d in o.type.tensor_type.shape.dim) for o in graph.output]
    with tempfile.TemporaryDirectory(prefix="raw-litert-") as scratch:
        out = Path(scratch)
        sample = np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32)
        np.save(out / "calibration_image_sample_data_20x128x128x3_float32.npy", sample)
        command = [str(environment.bin / "onnx2tf"), "-i", str(model_path), "-o", str(out / "saved"), "-osd", "-coion"]
        done = _run_tool("onnx2tf", command, out, LITERT_TIMEOUT_S, environment.worker_environment())
        written = out / "saved" / f"{model_path.stem}_float32.tflite"
        if not written.is_file():
            raise RuntimeError(f"onnx2tf failed ({_how(done)}): {_last_lines(done) or 'no output'}")
        runner = Interpreter(model_path=str(written), num_threads=1).get_signature_runner()
        details = runner.get_input_details()
        feeds = {}
        for name, value in zip(names, inputs, strict=True):
            array = np.asarray(value)
            shape = tuple(details[name]["shape"])
            if shape != array.shape and array.ndim >= 3:
                array = np.moveaxis(array, 1, -1)  # NCHW → NHWC, as onnx2tf converted the input
            feeds[name] = np.ascontiguousarray(array)
        produced = runner(**feeds)
        outputs = []
        for output, shape in zip(graph.output, output_shapes, strict=True):
            array = np.asarray(produced[output.name])
            if array.shape != shape and array.ndim >= 3:
                array = np.moveaxis(array, -1, 1)
            outputs.append(array)
        return outputs


LITERT_TIMEOUT_S = 300
PNNX_TIMEOUT_S = 120
_PNNX_TYPES = {"float32": "f32", "float16": "f16", "float64": "f64", "int64": "i64", "int32": "i32", "int8": "i8"}
_FED = re.compile(r'ex\.input\("(in\d+)", ncnn\.Mat\(in\d+\.numpy\(\), batch_index=(\d+)\)')
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_READ = re.compile(r"torch\.from_numpy\((out\d+)\.numpy\(batch_index=(\d+)\)\)")


def ncnn_outside(model_path: Path) -> str | None:
    """Why a model is outside ncnn's tensor domain in this suite (None inside): every graph input
    and output a float32 tensor of static shape and rank 1 to 4 (an ncnn Mat has 1 to 4 axes)."""
    import onnx
    from onnx import TensorProto

    graph = onnx.load(str(model_path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    values = [("input", v) for v in graph.input if v.name not in initializers]
    for direction, value in [*values, *(("output", v) for v in graph.output)]:
        if not value.type.HasField("tensor_type"):
            return f"{direction} '{value.name}' is a {value.type.WhichOneof('value')}, not a tensor"
        tensor = value.type.tensor_type
        if tensor.elem_type != TensorProto.FLOAT:
            return f"{direction} '{value.name}' is {TensorProto.DataType.Name(tensor.elem_type).lower()}, not float32"
        if not tensor.HasField("shape") or any(not d.HasField("dim_value") for d in tensor.shape.dim):
            return f"{direction} '{value.name}' has a dynamic shape"
        dims = [d.dim_value for d in tensor.shape.dim]
        if not 1 <= len(dims) <= 4:
            return f"{direction} '{value.name}' has rank {len(dims)}, not 1 to 4"
        if 0 in dims:
            return f"{direction} '{value.name}' is empty {tuple(dims)}"
    return None


def run_ncnn(model_path: Path, inputs: list[Any]) -> list[Any]:
    """pnnx converts the ONNX file at the inputs' shapes (f32 weights), and ncnn runs the result as
    pnnx's generated ``model_ncnn.py`` does: ``in0``.. fed and ``out0``.. extracted by order, each
    with the ``batch_index`` pnnx chose (a leading batch axis of 1 dropped, and put back)."""
    import ncnn
    import numpy as np
    import pnnx

    with tempfile.TemporaryDirectory(prefix="raw-ncnn-") as scratch:
        out = Path(scratch)
        source = out / "model.onnx"  # pnnx writes its files beside its input
        source.symlink_to(model_path.resolve())
        untyped = [np.asarray(x).dtype.name for x in inputs if np.asarray(x).dtype.name not in _PNNX_TYPES]
        if untyped:
            raise RuntimeError(f"pnnx's inputshape takes {', '.join(_PNNX_TYPES)}, not {', '.join(untyped)}")
        shapes = ",".join(
            f"[{','.join(str(d) for d in np.shape(x))}]{_PNNX_TYPES[np.asarray(x).dtype.name]}" for x in inputs
        )
        command = [pnnx.EXEC_PATH, str(source), f"inputshape={shapes}", "fp16=0", "device=cpu"]
        done = _run_tool("pnnx", command, out, PNNX_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"pnnx failed ({_how(done)}): {_last_lines(done) or 'it printed nothing'}")
        script = (out / "model_ncnn.py").read_text()
        fed, read = _FED.findall(script), _READ.findall(script)
        if [blob for blob, _ in fed] != [f"in{i}" for i in range(len(inputs))]:
            raise RuntimeError(f"pnnx's model_ncnn.py feeds {[blob for blob, _ in fed]}, given {len(inputs)} inputs")
        with ncnn.Net() as net:
            opt = net.opt
            opt.num_threads = 1
            opt.use_fp16_storage = opt.use_fp16_packed = opt.use_fp16_arithmetic = False
            opt.use_bf16_storage = opt.use_bf16_packed = False
            if net.load_param(str(out / "model.ncnn.param")) != 0 or net.load_model(str(out / "model.ncnn.bin")) != 0:
                raise RuntimeError("ncnn cannot load pnnx's model.ncnn.param / model.ncnn.bin")
            with net.create_extractor() as extractor:
                for (blob, batch_index), value in zip(fed, inputs, strict=True):
                    array = np.ascontiguousarray(value)
                    extractor.input(blob, ncnn.Mat(array, batch_index=int(batch_index)).clone())
                outputs = [_extracted(extractor, blob, int(batch_index)) for blob, batch_index in read]
        return outputs


def _extracted(extractor: Any, blob: str, batch_index: int) -> Any:
    """One output as an array of its own: the Mat is freed here, before its net (ncnn aborts when a
    Mat outlives the allocator it came from)."""
    import numpy as np

    status, mat = extractor.extract(blob)
    if status != 0:
        raise RuntimeError(f"ncnn extract('{blob}') returned {status}")
    array = np.array(mat.numpy(batch_index=batch_index), copy=True)
    del mat
    return array


MNN_CONVERT_TIMEOUT_S = 120
# MNN's converter through its compiled binding in a child process: the ``mnnconvert`` entry point
# (MNN.tools) installs a package and sends telemetry, and the child keeps MNN's printing off our stdout
_MNN_CONVERTER = "import sys, _tools; _tools.mnnconvert(['mnnconvert', *sys.argv[1:]])"


def run_mnn(model_path: Path, inputs: list[Any]) -> list[Any]:
    """MNN's converter writes a .mnn, and MNN's ``Module`` API runs it as MNN's Python guide shows:
    inputs as NCHW constants of the type MNN declares for them, outputs converted from MNN's internal
    NC4HW4 layout to NCHW and read; f32 (normal precision) on one thread, Winograd convolution off."""
    import sys

    import MNN.expr as expr
    import MNN.nn as nn
    import numpy as np

    input_names, output_names = _graph_names(model_path)
    with tempfile.TemporaryDirectory(prefix="raw-mnn-") as scratch:
        target = Path(scratch) / "model.mnn"
        arguments = ["-f", "ONNX", "--modelFile", str(model_path), "--MNNModel", str(target), "--bizCode", "raw"]
        command = [sys.executable, "-c", _MNN_CONVERTER, *arguments]
        done = _run_tool("MNN's converter", command, Path(scratch), MNN_CONVERT_TIMEOUT_S)
        if not target.is_file():
            raise RuntimeError(f"MNN's converter wrote no model ({_how(done)}): {_last_lines(done) or 'no output'}")
        runtime = nn.create_runtime_manager(({"backend": "CPU", "precision": 0, "numThread": 1},))
        runtime.set_hint(3, 0)  # WINOGRAD_MEMORY_LEVEL 0: no Winograd
        module = nn.load_module_from_file(str(target), input_names, output_names, runtime_manager=runtime)
        declared = module.get_info()["inputs"]
        types = {
            "float": np.float32,
            "int": np.int32,
            "int64": np.int64,
            "uint8": np.uint8,
            "int8": np.int8,
            "double": np.float64,
        }
        fed = []
        for value, variable in zip(inputs, declared, strict=True):
            kind = str(variable.dtype).rpartition(".")[2]
            array = np.ascontiguousarray(np.asarray(value).astype(types[kind]))
            fed.append(expr.const(array, list(array.shape), expr.NCHW, getattr(expr, kind)))
        results = []
        for variable in module.forward(fed):
            if variable.data_format == expr.NC4HW4:
                variable = expr.convert(variable, expr.NCHW)
            results.append(np.array(variable.read(), copy=True))
        return results
