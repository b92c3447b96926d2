"""The conformance harness itself: what it calls a reason, a registered backend it cannot measure,
a crash costing one case, and the comparison of outputs (so the suite's green means something)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from deploykit.backends.registry import BUILTIN_BACKENDS, backend_names
from tests.conformance.cases import write_case
from tests.conformance.outcome import ERROR, NOT_RUN, Outcome, mismatch
from tests.conformance.sweep import sweep, worker_environment
from tests.conformance.test_conformance import reason_problem, require_raw_runner


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (
            "backend 'openvino' on CPU | failed to run 'model.onnx': Exception from src/inference/src/cpp/core.cpp:117:",
            "the reason is only a source location",
        ),
        ("backend 'onnxruntime' on cpu | failed to run 'model.onnx': ).", "no reason after the subject"),
        ("backend 'opencv' on cpu | failed to run 'model.onnx': ", "no reason after the subject"),
        ("backend 'x' | cannot load 'model.onnx': the shape is wrong (", "ends in a lone bracket"),
        ("backend 'opencv' | cannot import 'model.onnx': in function 'getLayerInstance' >.", "lone bracket"),
        ("failed to run model.onnx", "no 'subject | problem'"),
    ],
)
def test_a_message_without_the_runtime_s_reason_is_caught(message: str, problem: str) -> None:
    found = reason_problem(Outcome(ERROR, message, "BackendError"))
    assert found is not None and problem in found, found


def test_a_message_with_the_runtime_s_reason_passes() -> None:
    message = (
        "backend 'openvino' on CPU | failed to run 'model.onnx': Can't set the input tensor with index: 1, "
        "because the model input (shape=[]) and the tensor (shape=(1)) are incompatible."
    )
    assert reason_problem(Outcome(ERROR, message, "BackendError")) is None
    assert reason_problem(Outcome(ERROR, "x", "leaked builtins.KeyError")) == (
        "the runtime's exception leaked: leaked builtins.KeyError"
    )


def test_a_registered_backend_without_a_raw_runner_fails_the_suite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "raiser=tests.assets.crashing_backend:RaisingBackend")
    assert "raiser" in backend_names()  # a plug-in that declares no raw runner
    with pytest.raises(pytest.fail.Exception) as failed:
        require_raw_runner("raiser")
    assert str(failed.value) == (
        "backend 'raiser' is registered but declares no raw runner, so the conformance suite cannot measure it: "
        "set raw = RawRuntime('module:run_raiser', options={...}) on its Backend class "
        "(deploykit.backends.RawRuntime), naming a function run_raiser(model_path, inputs) -> outputs that calls "
        "its runtime the way the runtime's documentation shows, and the deploykit options that configure the "
        "backend alike."
    )
    for backend in BUILTIN_BACKENDS:  # every built-in backend declares one
        require_raw_runner(backend)


def test_outputs_are_judged_as_onnx_s_runner_judges_them() -> None:
    x = np.array([1.0, 2.0], np.float32)
    assert mismatch([x], [x.copy()], 1e-3, 1e-7) is None
    assert "incorrect shape" in str(mismatch([np.float32(1.0) * np.ones(())], [np.ones(1, np.float32)], 1e-3, 0))
    assert "dtype" in str(mismatch([x], [x.astype(np.float64)], 1e-3, 1e-7))
    assert mismatch([x], [x + 1e-5], 1e-3, 1e-7) is None and mismatch([x], [x + 1], 1e-3, 1e-7) is not None
    assert mismatch([[x]], [x], 1e-3, 1e-7) == "output 0 is an array float32(2,), expected a sequence"
    assert mismatch([None], [None], 1e-3, 1e-7) is None
    assert mismatch([None], [x], 1e-3, 1e-7) == "output 0 is an array float32(2,), expected None"
    assert mismatch([x], [None], 1e-3, 1e-7) == "output 0 is None, expected an array float32(2,)"


def _mod(tmp_path: Path, name: str, xs: list[float], ys: list[float]):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [len(xs)])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [len(xs)])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [len(xs)])
    graph = helper.make_graph([helper.make_node("Mod", ["x", "y"], ["z"], fmod=0)], "mod", [x, y], [z])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    a, b = np.array(xs, np.float32), np.array(ys, np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):  # the crashing case divides by zero on purpose
        expected = np.mod(a, b)
    return write_case(tmp_path, name, model, [([a, b], [expected])])


def test_a_crash_costs_one_case_and_names_its_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenCV 5.0 dies of SIGFPE on a zero divisor in Mod; the cases before and after still run."""
    from deploykit.backends.registry import get_backend

    if not get_backend("opencv").is_available():
        pytest.skip(str(get_backend("opencv").unavailable_reason()))
    for variable, value in worker_environment().items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setattr("tests.conformance.sweep.cpu_count", lambda: 1)  # one chunk: the crash is inside it
    cases = [
        _mod(tmp_path, "before", [5, 7], [3, 4]),
        _mod(tmp_path, "crash", [1, 1], [0, 2]),
        _mod(tmp_path, "after", [9, 8], [4, 3]),
    ]
    results = {r.name: r for r in sweep("opencv", cases, {})}
    assert results["crash"].raw.error_type == "crash" and "SIGFPE" in results["crash"].raw.detail
    assert results["crash"].deploykit.error_type == "crash" and "SIGFPE" in results["crash"].deploykit.detail
    for name in ("before", "after"):
        assert results[name].raw.error_type != "crash", results[name]
        assert results[name].deploykit.status == results[name].raw.status, results[name]


def _one_node(
    tmp_path: Path, name: str, op: str, inputs: list[tuple[str, int, np.ndarray]], output: tuple[int, np.ndarray]
):
    values = [helper.make_tensor_value_info(n, kind, list(value.shape)) for n, kind, value in inputs]
    y = helper.make_tensor_value_info("y", output[0], list(output[1].shape))
    graph = helper.make_graph([helper.make_node(op, [n for n, _, _ in inputs], ["y"])], name, values, [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return write_case(tmp_path, name, model, [([value for _, _, value in inputs], [output[1]])])


def test_ncnn_sweeps_its_domain_and_asks_deploykit_about_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside ncnn's domain both sides run; outside it the raw side is not run, and deploykit runs
    without pnnx: a refusal it makes up front is its outcome, a case it would convert is not run."""
    from deploykit.backends.registry import get_backend

    if not get_backend("ncnn").is_available():
        pytest.skip(str(get_backend("ncnn").unavailable_reason()))
    for variable, value in worker_environment().items():
        monkeypatch.setenv(variable, value)
    x = np.array([[-1.0, 2.0, -3.0]], np.float32)
    cases = [
        _one_node(tmp_path, "relu", "Relu", [("x", TensorProto.FLOAT, x)], (TensorProto.FLOAT, np.maximum(x, 0))),
        _one_node(tmp_path, "argmax", "ArgMax", [("x", TensorProto.FLOAT, x)], (TensorProto.INT64, np.array([[1]]))),
        _one_node(
            tmp_path,
            "gather",
            "Gather",
            [("x", TensorProto.FLOAT, x[0]), ("i", TensorProto.INT64, np.array([2, 0]))],
            (TensorProto.FLOAT, x[0][[2, 0]]),
        ),
    ]
    results = {r.name: r for r in sweep("ncnn", cases, {"precision": "f32", "threads": 1}, within_domain=True)}
    assert results["relu"].raw.passed and results["relu"].deploykit.passed, results["relu"]
    argmax = results["argmax"]
    assert argmax.raw.status == NOT_RUN and "output 'y' is int64, not float32" in argmax.raw.detail
    # deploykit converts a model with an int64 output too, so that its refusal lists every layer ncnn
    # lacks beside the output's type: without pnnx it gets as far as converting it
    assert argmax.deploykit.status == NOT_RUN, argmax.deploykit
    assert argmax.deploykit.detail == (
        "outside ncnn's tensor domain: output 'y' is int64, not float32; deploykit gets as far as converting it"
    )
    gather = results["gather"]
    assert gather.raw.status == gather.deploykit.status == NOT_RUN, gather
    assert gather.deploykit.detail == (
        "outside ncnn's tensor domain: input 'i' is int64, not float32; deploykit gets as far as converting it"
    )
