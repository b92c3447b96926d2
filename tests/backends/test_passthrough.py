"""Graphs a runtime may compile to a plain pass-through must still answer every call afresh.

OpenVINO compiles one-input Sum/Max/Min, inference Dropout, Einsum '->' and a graph whose output
is its input to nothing at all: the result is the parameter. An output buffer bound before the
call is then never written (the first call returned uninitialised memory, later calls an earlier
answer). Each graph runs twice with different inputs, and both calls must match the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deploykit
from deploykit.backends.registry import get_backend
from deploykit.errors import DeployKitError
from tests.assets.reference import run_reference

_F = TensorProto.FLOAT


def _graph(
    name: str, nodes: list[onnx.NodeProto], shape: list[int], outputs: list[str], opset: int = 13
) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("x", _F, shape)]
    values = [helper.make_tensor_value_info(output, _F, shape) for output in outputs]
    graph = helper.make_graph(nodes, name, inputs, values)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


PASS_THROUGH = {
    "sum_one_input": _graph("sum", [helper.make_node("Sum", ["x"], ["y"])], [3], ["y"]),
    "max_one_input": _graph("max", [helper.make_node("Max", ["x"], ["y"])], [3], ["y"]),
    "min_one_input": _graph("min", [helper.make_node("Min", ["x"], ["y"])], [3], ["y"]),
    "dropout_inference": _graph("dropout", [helper.make_node("Dropout", ["x"], ["y"])], [2, 3], ["y"]),
    "einsum_scalar": _graph("einsum", [helper.make_node("Einsum", ["x"], ["y"], equation="->")], [], ["y"], 12),
    "output_is_input": _graph("identity_graph", [], [3], ["x"]),
    "input_and_identity_out": _graph("both", [helper.make_node("Identity", ["x"], ["y"])], [3], ["y", "x"]),
}


@pytest.mark.parametrize("name", list(PASS_THROUGH))
def test_each_call_answers_its_own_input(backend_name: str, name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.onnx"
    onnx.save(PASS_THROUGH[name], path)
    shape = tuple(d.dim_value for d in PASS_THROUGH[name].graph.input[0].type.tensor_type.shape.dim)
    calls = [
        np.asarray(3.0 + np.arange(np.prod(shape), dtype=np.float32).reshape(shape)),  # 0-d stays an array
        np.full(shape, -20.0, np.float32),
    ]
    options = get_backend(backend_name).precision_options("f32")
    declared = get_backend(backend_name).raw
    assert declared is not None, f"backend '{backend_name}' declares no raw runner"
    try:
        raw = declared.runner()(path, [calls[0]])
    except Exception as exc:  # the runtime cannot run it at all (OpenCV 4 has no Einsum '->'): nor can deploykit
        with pytest.raises(DeployKitError):
            deploykit.load(path, backend_name, **options).run({"x": calls[0]})
        pytest.skip(f"the raw {backend_name} does not run {name}: {' '.join(str(exc).split())[:160]}")
    wrong = _wrong_answer(raw, list(run_reference(path, {"x": calls[0]}).values()))
    if wrong:  # the runtime computes something else (pnnx makes a one-input Max a reduction): deploykit
        try:  # must answer right or refuse, never hand the wrong answer on
            with deploykit.load(path, backend_name, **options) as session:
                answer = session.run({"x": calls[0]})
        except DeployKitError:
            pytest.skip(f"the raw {backend_name} answers {name} wrongly ({wrong}); deploykit refuses it")
        assert not _wrong_answer(list(answer.values()), list(run_reference(path, {"x": calls[0]}).values()))
    with deploykit.load(path, backend_name, **options) as session:
        answers = [session.run({"x": x}) for x in calls]
    for x, answer in zip(calls, answers, strict=True):
        expected = run_reference(path, {"x": x})
        assert list(answer) == list(expected)
        for output, array in answer.items():
            assert array.shape == expected[output].shape, output
            np.testing.assert_array_equal(array, expected[output], err_msg=f"{name} output {output}")


def _wrong_answer(produced: list[np.ndarray], expected: list[np.ndarray]) -> str | None:
    """How a runtime's outputs differ from the reference's (None when they do not); shapes are
    compared by size, as a raw runtime may give a 0-d output as (1,) and still mean it."""
    if len(produced) != len(expected):
        return f"{len(produced)} outputs, expected {len(expected)}"
    for index, (got, want) in enumerate(zip(produced, expected, strict=True)):
        if np.size(got) != np.size(want) or not np.array_equal(np.ravel(got), np.ravel(want)):
            return f"output {index} is {np.ravel(got)[:4]}, expected {np.ravel(want)[:4]}"
    return None
