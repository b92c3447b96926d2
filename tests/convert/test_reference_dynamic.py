"""onnx's reference evaluator on stride-1 pools, and on a dynamic-batch YOLOv3-tiny conversion.

YOLOv3-tiny's [maxpool] size=2 stride=1 keeps 13x13 by padding one row below and one column to
the right: MaxPool pads=[0, 0, 1, 1], which the ONNX spec reads as [top, left, bottom, right]
(``x1_begin, x2_begin, x1_end, x2_end``), as ONNX Runtime, OpenVINO and onnx's own shape
inference do. onnx's reference evaluator (1.23.2, and onnx's main branch at commit 043be319) reads
four pads of a stride-1 pool as [top, bottom, left, right] (``CommonPool._run`` in
``onnx/reference/ops/_op_common_pool.py``; strided pools take another, correct path), pads 0
rows and 2 columns, and returns 12x14; the head's Reshape then fails with "cannot reshape array
of size 42840" (85680 at batch 2). 1-D and 3-D stride-1 pools with pads fail there too. The graph
is valid ONNX; the evaluator is wrong. ``deploykit.backends.reference_ops.MaxPool`` pads as the
spec says, and every evaluator deploykit builds uses it: these tests hold it to ONNX Runtime and
to a pool written out here, and show that YOLOv3-tiny is then verified against onnx-reference.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import deploykit
from deploykit.backends.reference_ops import REFERENCE_OPS
from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
from deploykit.convert.darknet.weights import write_random_weights
from tests.assets.paths import REPO
from tests.assets.reference import run_reference


def _stride_one_pool(pads: list[int]) -> onnx.ModelProto:
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[1, 1], pads=pads)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _spec_max_pool(x: np.ndarray, pads: list[int]) -> np.ndarray:
    """A 2x2 stride-1 max pool with pads [top, left, bottom, right], written out: the spec's reading."""
    top, left, bottom, right = pads
    padded = np.pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)], constant_values=-np.inf)
    return np.maximum.reduce([padded[..., i : i + padded.shape[2] - 1, j : j + padded.shape[3] - 1]
                              for i in (0, 1) for j in (0, 1)])  # fmt: skip


@pytest.mark.parametrize("pads", [[0, 0, 1, 1], [0, 1, 0, 1]])
def test_the_spec_padded_max_pool_is_the_specs_and_onnx_runtimes(pads):
    import onnxruntime as ort

    model = _stride_one_pool(pads)
    x = np.random.default_rng(1).normal(size=(1, 1, 4, 5)).astype(np.float32)
    expected = _spec_max_pool(x, pads)
    fixed = ReferenceEvaluator(model, new_ops=REFERENCE_OPS).run(None, {"x": x})[0]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(fixed, expected)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], expected)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True).graph.output[0]
    assert [d.dim_value for d in inferred.type.tensor_type.shape.dim] == list(expected.shape)


def _pool(
    op: str, shape: list[int], kernel: list[int], pads: list[int] | None, **attributes: object
) -> onnx.ModelProto:
    if pads is not None:
        attributes["pads"] = pads
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=kernel, **attributes)
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9)


POOLS = [
    # (op, input shape, kernel, pads, attributes): stride 1 unless said
    ("MaxPool", [1, 2, 4, 5], [2, 2], [0, 0, 1, 1], {}),  # YOLOv3-tiny's pool
    ("MaxPool", [1, 2, 4, 5], [2, 2], [1, 0, 0, 1], {}),  # left == bottom: onnx's reading is the spec's
    ("MaxPool", [1, 2, 4, 5], [3, 3], [1, 1, 1, 1], {}),  # symmetric: onnx's own op runs it
    ("MaxPool", [1, 2, 4, 5], [2, 2], [0, 0, 1, 1], {"ceil_mode": 1}),
    ("MaxPool", [1, 2, 6], [2], [0, 1], {}),  # 1-D: onnx pads nothing
    ("MaxPool", [1, 2, 6], [3], [1, 1], {}),  # 1-D symmetric: onnx raises IndexError
    ("MaxPool", [1, 1, 3, 4, 5], [2, 2, 2], [1, 0, 0, 0, 1, 1], {}),  # 3-D
    ("MaxPool", [1, 2, 5, 7], [2, 2], [0, 0, 1, 1], {"strides": [2, 2]}),  # strided: onnx's other path
    ("MaxPool", [1, 2, 7], [2], [0, 1], {"dilations": [2]}),
    ("MaxPool", [1, 2, 4, 5], [2, 2], None, {"auto_pad": "SAME_UPPER"}),
    # AveragePool is onnx's op_pool_common.py, which pads as the spec says: no correction needed
    ("AveragePool", [1, 2, 4, 5], [2, 2], [0, 0, 1, 1], {}),
    ("AveragePool", [1, 2, 4, 5], [2, 2], [0, 1, 0, 1], {"count_include_pad": 1}),
    ("AveragePool", [1, 2, 6], [2], [0, 1], {}),
    ("AveragePool", [1, 1, 3, 4, 5], [2, 2, 2], [1, 0, 0, 0, 1, 1], {"count_include_pad": 1}),
]


@pytest.mark.parametrize(("op", "shape", "kernel", "pads", "attributes"), POOLS)
def test_deploykits_reference_pools_agree_with_onnx_runtime(op, shape, kernel, pads, attributes):
    import onnxruntime as ort

    model = _pool(op, shape, kernel, pads, **attributes)
    x = np.random.default_rng(3).normal(size=shape).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    got = ReferenceEvaluator(model, new_ops=REFERENCE_OPS).run(None, {"x": x})[0]
    assert got.shape == expected.shape
    # a max is exact; an average may round differently in the last bit
    np.testing.assert_allclose(got, expected, rtol=0 if op == "MaxPool" else 1e-6, atol=0 if op == "MaxPool" else 1e-7)


def test_the_reference_evaluator_deploykit_builds_uses_the_corrected_pool(tmp_path):
    pads = [0, 0, 1, 1]
    path = tmp_path / "pool.onnx"
    onnx.save(_stride_one_pool(pads), str(path))
    x = np.random.default_rng(2).normal(size=(1, 1, 4, 5)).astype(np.float32)
    with deploykit.load(path, "reference") as session:
        got = session.run({"x": x})["y"]
    np.testing.assert_array_equal(got, _spec_max_pool(x, pads))
    np.testing.assert_array_equal(run_reference(path, {"x": x})["y"], _spec_max_pool(x, pads))


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="onnx's reference evaluator reads a stride-1 pool's 2-D pads as [top, bottom, left, right]; when this "
    "passes, onnx has fixed it and deploykit.backends.reference_ops is no longer needed",
)
def test_onnx_reference_evaluator_pads_a_stride_one_pool_as_the_spec_says():
    pads = [0, 0, 1, 1]
    x = np.random.default_rng(1).normal(size=(1, 1, 4, 5)).astype(np.float32)
    got = ReferenceEvaluator(_stride_one_pool(pads)).run(None, {"x": x})[0]
    assert got.shape == (1, 1, 4, 5), f"got {got.shape}"
    np.testing.assert_array_equal(got, _spec_max_pool(x, pads))


@pytest.mark.slow
def test_dynamic_batch_yolov3_tiny_under_the_reference_evaluator_matches_onnx_runtime(tmp_path):
    import onnxruntime as ort

    cfg = REPO / "models" / "darknet" / "yolov3-tiny.cfg"
    weights = tmp_path / "random.weights"
    write_random_weights(load_network(cfg), weights, seed=4)
    model_path = tmp_path / "yolov3-tiny.onnx"
    convert_darknet(
        cfg,
        weights,
        model_path,
        verify_backends=[],
        export=DarknetExportSettings(batch="dynamic", input_size="160x160"),
    )
    model = onnx.load(str(model_path))
    pools = [{a.name: list(helper.get_attribute_value(a)) for a in n.attribute} for n in model.graph.node
             if n.op_type == "MaxPool"]  # fmt: skip
    assert [p["pads"] for p in pools if p["strides"] == [1, 1]] == [[0, 0, 1, 1]]  # the one pool onnx misreads
    name = model.graph.input[0].name
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param  # the batch is dynamic
    x = np.random.default_rng(5).random((2, 3, 160, 160), dtype=np.float32)
    with pytest.raises(ValueError, match=r"cannot reshape array of size"):  # onnx's MaxPool, as documented above
        ReferenceEvaluator(model).run(None, {name: x})
    reference = ReferenceEvaluator(model, new_ops=REFERENCE_OPS).run(None, {name: x})
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    ours = session.run(None, {name: x})
    assert [r.shape for r in reference] == [(2, 255, 5, 5), (2, 255, 10, 10)]
    for expected, got in zip(reference, ours, strict=True):
        assert float(np.std(expected)) > 0.1  # the heads carry signal: agreeing on them means something
        np.testing.assert_allclose(got, expected, atol=1e-4, rtol=1e-3)


def test_yolov3_tiny_is_verified_against_onnx_reference(tmp_path):
    cfg = REPO / "models" / "darknet" / "yolov3-tiny.cfg"
    weights = tmp_path / "random.weights"
    write_random_weights(load_network(cfg), weights, seed=4)
    model_path = tmp_path / "yolov3-tiny.onnx"
    convert_darknet(cfg, weights, model_path, verify_backends=[], export=DarknetExportSettings(input_size="160x160"))
    report = deploykit.compare(model_path, ["onnxruntime"])
    assert report.oracle.name == "onnx-reference" and report.oracle.independent, report.oracle
    assert [v.status for v in report.verdicts] == ["pass"], [v.describe() for v in report.verdicts]
