"""An oracle known to be wrong on a construct does not judge it (issue 21): onnx's reference evaluator runs a
``Loop`` without its condition input zero times, where the spec (and ONNX Runtime) runs it M times."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import deploykit


def _counting_loop(path, with_condition: bool):
    """y = x + M: a Loop adding 1 on each of its M iterations, with or without the optional cond input."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])],
    )  # fmt: skip
    nodes = [helper.make_node("Loop", ["M", "cond" if with_condition else "", "x"], ["y"], body=body, name="counter")]
    initializers = [helper.make_tensor("cond", TensorProto.BOOL, [], [True])] if with_condition else []
    graph = helper.make_graph(
        nodes, "loop",
        [helper.make_tensor_value_info("M", TensorProto.INT64, []), helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], initializers,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


FEEDS = {"M": np.array(3, dtype=np.int64), "x": np.array([0.5], dtype=np.float32)}


def test_a_loop_without_condition_is_unverified_not_failed(tmp_path):
    model = _counting_loop(tmp_path / "loop.onnx", with_condition=False)
    # the blind spot is real: onnx runs the loop zero times, the spec's answer is x + M
    assert ReferenceEvaluator(str(model)).run(None, FEEDS)[0].tolist() == [0.5]
    report = deploykit.compare(model, ["onnxruntime"], inputs=FEEDS)
    (verdict,) = report.verdicts
    assert verdict.status == "unverified", verdict
    assert not report.oracle.independent
    assert "onnx's reference evaluator runs a Loop without a condition input zero times (node 'counter')" in (
        report.oracle.detail
    )


def test_the_same_loop_with_its_condition_is_judged_by_the_reference(tmp_path):
    model = _counting_loop(tmp_path / "loop.onnx", with_condition=True)
    assert ReferenceEvaluator(str(model)).run(None, FEEDS)[0].tolist() == [3.5]  # x + M, as the spec says
    report = deploykit.compare(model, ["onnxruntime"], inputs=FEEDS)
    assert [v.status for v in report.verdicts] == ["pass"] and report.oracle.independent


def test_an_unsorted_topk_is_unverified_not_failed(tmp_path):
    """Sweep 21b: TopK sorted=0 leaves the order of its results to the runtime; ONNX Runtime was marked FAIL
    (max abs error 29 on the indices) for an order the spec allows."""
    k = helper.make_tensor("k", TensorProto.INT64, [1], [5])
    graph = helper.make_graph([helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=0, name="top")], "topk",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 20])],
                              [helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 5]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [1, 5])], [k])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "topk.onnx"))
    report = deploykit.compare(tmp_path / "topk.onnx", ["onnxruntime", "openvino"])
    # no backend is compared with another either (sweep 21c: openvino "disagreed" with onnxruntime)
    assert [v.status for v in report.verdicts] == ["unverified", "unverified"] and not report.oracle.independent
    assert all(v.agreement is None and not v.blocking and "not compared: TopK" in v.reason for v in report.verdicts)
    assert "TopK with sorted=0 (node 'top') returns its k results in an order the ONNX spec leaves" in (
        report.oracle.detail
    )
