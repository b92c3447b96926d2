"""deploykit's corrections to onnx's reference ops: the dilated Conv computed without a dilated kernel."""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from deploykit.backends.reference_ops import REFERENCE_OPS


def _conv(x_shape, w_shape, **attributes) -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attributes)
    graph = helper.make_graph(
        [node], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, w_shape),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [w_shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _feeds(x_shape, w_shape, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal(x_shape).astype(np.float32),
        "w": rng.standard_normal(w_shape).astype(np.float32),
        "b": rng.standard_normal(w_shape[0]).astype(np.float32),
    }


CASES = {
    "2-D explicit pads": ((2, 4, 9, 11), (8, 4, 3, 3), {"dilations": [2, 3], "pads": [2, 3, 2, 3]}),
    "asymmetric pads, strides": ((1, 4, 10, 9), (6, 4, 3, 2), {"dilations": [3, 2], "strides": [2, 1], "pads": [1, 0, 3, 2]}),
    "groups, SAME_UPPER": ((1, 4, 9, 11), (8, 2, 3, 3), {"dilations": [3, 2], "strides": [2, 1], "group": 2, "auto_pad": "SAME_UPPER"}),
    "depthwise, SAME_LOWER": ((2, 4, 8, 7), (4, 1, 3, 3), {"dilations": [2, 2], "strides": [1, 2], "group": 4, "auto_pad": "SAME_LOWER"}),
    "1-D VALID": ((1, 3, 20), (5, 3, 3), {"dilations": [4], "auto_pad": "VALID"}),
    "3-D": ((1, 2, 7, 8, 6), (3, 2, 3, 3, 2), {"dilations": [2, 2, 3], "pads": [1, 0, 2, 2, 1, 0]}),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_dilated_conv_equals_onnx_reference(case):
    x_shape, w_shape, attributes = CASES[case]
    model = _conv(x_shape, w_shape, **attributes)
    feeds = _feeds(x_shape, w_shape)
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    got = ReferenceEvaluator(model, new_ops=REFERENCE_OPS).run(None, feeds)[0]
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def _peak_bytes(evaluator: ReferenceEvaluator, feeds) -> int:
    tracemalloc.start()
    try:
        evaluator.run(None, feeds)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_dilated_conv_takes_no_dilated_kernel_and_no_unrolled_input():
    x_shape, w_shape = (1, 4, 32, 32), (4, 4, 3, 3)  # dilation 8: onnx builds a 17x17 kernel and unrolls 289 taps
    model = _conv(x_shape, w_shape, dilations=[8, 8], pads=[8, 8, 8, 8])
    feeds = _feeds(x_shape, w_shape)
    onnx_peak = _peak_bytes(ReferenceEvaluator(model), feeds)
    own_peak = _peak_bytes(ReferenceEvaluator(model, new_ops=REFERENCE_OPS), feeds)
    input_bytes = feeds["x"].nbytes
    assert onnx_peak > 100 * input_bytes  # the unrolled input: 4 channels x 289 taps x 1024 positions
    assert own_peak < 10 * input_bytes, (own_peak, onnx_peak)
