"""Nothing is lost between the caller and the runtime: scalars, empty tensors, strings, bools,
every ONNX element type, sequences and optionals come back as the raw runtime hands them over
(same shape, 0-d included, same dtype, same values), and what a backend cannot run is refused
by name. The raw runtimes are the ones each backend declares for the conformance suite (``Backend.raw``)."""

from __future__ import annotations

import itertools
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deploykit
from deploykit.backends.registry import get_backend
from deploykit.errors import InputError, UnsupportedModelError
from deploykit.tensors import OPTIONAL, SEQUENCE, TensorSpec
from tests.conformance.cases import write_case
from tests.conformance.sweep import sweep, worker_environment
from tests.conformance.test_conformance import deploykit_options

ELEMENT_TYPES = {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "int8": TensorProto.INT8,
    "int16": TensorProto.INT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
    "bool": TensorProto.BOOL,
    "string": TensorProto.STRING,
    "float8_e4m3fn": TensorProto.FLOAT8E4M3FN,
    "float8_e5m2": TensorProto.FLOAT8E5M2,
    "int4": TensorProto.INT4,
    "uint4": TensorProto.UINT4,
}
SHAPES = {"scalar": (), "empty": (0,), "empty_2d": (2, 0), "matrix": (2, 3)}


def _save(tmp_path: Path, name: str, graph: onnx.GraphProto, opset: int = 21) -> Path:
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10), path)
    return path


def _values(element: str, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape))
    if element == "string":
        return np.array([f"s{i}" for i in range(count)], dtype=object).reshape(shape)
    if element == "bool":
        return (np.arange(count) % 2 == 0).reshape(shape)
    dtype = np.dtype(getattr(ml_dtypes, element)) if hasattr(ml_dtypes, element) else np.dtype(element)
    return (np.arange(count) % 5 + 1).astype(np.float32).astype(dtype).reshape(shape)


def _graph(operator: str, element: str, shape: tuple[int, ...]) -> onnx.ModelProto:
    """``Identity`` (a pass-through) or ``Where(true, x, x)`` (a kernel) of x."""
    elem = ELEMENT_TYPES[element]
    if operator == "Identity":
        nodes = [helper.make_node("Identity", ["x"], ["y"])]
    else:
        true = helper.make_tensor("t", TensorProto.BOOL, [], [True])
        nodes = [helper.make_node("Constant", [], ["t"], value=true), helper.make_node("Where", ["t", "x", "x"], ["y"])]
    x = helper.make_tensor_value_info("x", elem, list(shape))
    y = helper.make_tensor_value_info("y", elem, list(shape))
    graph = helper.make_graph(nodes, operator.lower(), [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


@pytest.mark.slow
def test_every_element_type_and_shape_comes_back_as_the_raw_runtime_returns_it(
    backend_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Identity (a pass-through) and Where (a kernel) of each element type, as a scalar, empty and
    full: wherever the raw runtime returns x with its exact shape and dtype, so does deploykit;
    elsewhere deploykit raises a ``DeployKitError``. Run in the conformance suite's workers (OpenCV
    crashes on some of these)."""
    cases = []
    for operator, element, shape in itertools.product(("Identity", "Where"), ELEMENT_TYPES, SHAPES.values()):
        x = _values(element, shape)
        name = f"{operator}_{element}_{'x'.join(map(str, shape)) or 'scalar'}"
        cases.append(write_case(tmp_path, name, _graph(operator, element, shape), [([x], [x])], rtol=0.0, atol=0.0))
    for variable, value in worker_environment().items():
        monkeypatch.setenv(variable, value)
    results = sweep(backend_name, cases, deploykit_options(backend_name))
    lost = {r.name: r.deploykit.detail for r in results if r.raw.passed and not r.deploykit.passed}
    assert not lost
    for result in results:
        if not result.deploykit.passed and result.deploykit.error_type != "crash":
            assert result.deploykit.status == "fail" or not result.deploykit.error_type.startswith("leaked"), result
            assert result.deploykit.status == "fail" or " | " in result.deploykit.detail, result
    if not any(r.raw.passed or r.deploykit.passed for r in results):
        # ncnn: pnnx crashes on an Identity graph and leaves Where as torch.where, which ncnn lacks
        said = sorted({" ".join(r.raw.detail.split())[:70] for r in results})[:2]
        pytest.skip(f"the raw {backend_name} runs none of these graphs ({'; '.join(said)}), and deploykit refuses each")
    assert any(r.deploykit.passed for r in results), "nothing round-tripped: the test itself is broken"
    assert sum(r.deploykit.passed for r in results if "scalar" in r.name) >= 1


def test_a_reduction_to_a_scalar_is_0_d(backend_name: str, tmp_path: Path) -> None:
    """The bug this file began with: ``np.ascontiguousarray`` turned a 0-d output into shape (1,)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    node = helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0)
    path = _save(tmp_path, "reduce_sum", helper.make_graph([node], "reduce", [x], [y]), opset=13)
    with deploykit.load(path, backend_name, **get_backend(backend_name).precision_options("f32")) as session:
        result = session.run({"x": np.array([1, 2, 3, 4], np.float32)})["y"]
    assert result.shape == ()
    assert result == np.float32(10)


def _sequence_model(tmp_path: Path) -> Path:
    """in: sequence of float tensors, optional tensor; out: the sequence with x appended, and
    whether the optional held a value."""
    seq_in = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    maybe = helper.make_value_info(
        "maybe", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("SequenceInsert", ["seq", "x"], ["longer"]),
        helper.make_node("OptionalHasElement", ["maybe"], ["has"]),
    ]
    outputs = [
        helper.make_tensor_sequence_value_info("longer", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("has", TensorProto.BOOL, []),
    ]
    return _save(tmp_path, "sequences", helper.make_graph(nodes, "sequences", [seq_in, maybe, x], outputs), opset=18)


def test_sequences_and_optionals_are_described(tmp_path: Path) -> None:
    interface = deploykit.load(_sequence_model(tmp_path), "reference")
    with interface as session:
        assert session.inputs["seq"].kind == SEQUENCE
        assert session.inputs["maybe"].kind == OPTIONAL
        assert str(session.inputs["seq"]) == "seq: sequence<float32(unknown rank)>"
        assert str(session.inputs["maybe"]) == "maybe: optional<float32(2,)>"
        assert TensorSpec.from_dict(session.inputs["seq"].to_dict()) == session.inputs["seq"]
        assert "kind" not in session.inputs["x"].to_dict()  # a tensor's dict is what it always was


@pytest.mark.parametrize("backend", ["onnxruntime", "reference"])
def test_sequences_go_in_and_come_out_as_lists_and_none_is_an_empty_optional(backend: str, tmp_path: Path) -> None:
    if not get_backend(backend).is_available():
        pytest.skip(str(get_backend(backend).unavailable_reason()))
    path = _sequence_model(tmp_path)
    first, second, x = np.ones(3, np.float32), np.zeros((2, 2), np.float32), np.array([5, 6], np.float32)
    with deploykit.load(path, backend) as session:
        empty = session.run({"seq": [first, second], "maybe": None, "x": x})
        full = session.run({"seq": [], "maybe": np.array([1, 2], np.float32), "x": x})
    assert isinstance(empty["longer"], list) and len(empty["longer"]) == 3
    for got, want in zip(empty["longer"], [first, second, x], strict=True):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    assert empty["has"].shape == () and not empty["has"]
    assert [a.tolist() for a in full["longer"]] == [[5.0, 6.0]]
    assert full["has"]


def test_a_sequence_input_refuses_an_array_and_a_tensor_refuses_none(tmp_path: Path) -> None:
    with deploykit.load(_sequence_model(tmp_path), "reference") as session:
        x = np.zeros(2, np.float32)
        with pytest.raises(InputError) as as_array:
            session.run({"seq": np.ones((2, 3), np.float32), "maybe": None, "x": x})
        with pytest.raises(InputError) as as_none:
            session.run({"seq": [], "maybe": None, "x": None})
        with pytest.raises(InputError) as wrong_element:
            session.run({"seq": [np.ones(2, np.float16), np.ones(2, np.float64)], "maybe": None, "x": x})
    assert as_array.value.message == (
        "input 'seq' | got an array float32(2, 3), expected sequence<float32(unknown rank)>, a list of arrays."
    )
    assert as_array.value.hint == "pass a list ([array, ...]), even for a single tensor; [] is an empty sequence."
    assert as_none.value.message == "input 'x' | got None, expected float32(2,)."
    assert wrong_element.value.message.startswith("input 'seq[1]' | got dtype float64, expected float32")


@pytest.mark.parametrize("backend", ["openvino", "opencv"])
def test_a_backend_without_sequences_refuses_them_by_name(backend: str, tmp_path: Path) -> None:
    if not get_backend(backend).is_available():
        pytest.skip(str(get_backend(backend).unavailable_reason()))
    with pytest.raises(UnsupportedModelError) as refused:
        deploykit.load(_sequence_model(tmp_path), backend)
    subject = get_backend(backend).wording.subject_for(backend)
    assert refused.value.message == (
        f"{subject} | cannot run 'sequences.onnx': {backend} does not run sequence inputs "
        "(input 'seq' is sequence<float32(unknown rank)>); onnxruntime and reference do."
    )
    assert refused.value.hint == "load it with backend 'onnxruntime'."


def test_a_map_input_is_refused_with_its_type(tmp_path: Path) -> None:
    mapping = helper.make_value_info(
        "m", helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
    )
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    node = helper.make_node("Constant", [], ["y"], value=helper.make_tensor("c", TensorProto.FLOAT, [1], [1.0]))
    path = _save(tmp_path, "map", helper.make_graph([node], "map", [mapping], [y]))
    with pytest.raises(UnsupportedModelError) as refused:
        deploykit.load(path, "reference")
    assert refused.value.message == (
        "graph value 'm' | is a map; expected a tensor with an element type, a sequence of tensors, "
        "or an optional tensor or sequence."
    )
