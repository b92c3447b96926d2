"""OpenVINO's own reason reaches the user: a failed ONNX conversion names the operation and why."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import deploykit
from deploykit.errors import UnsupportedModelError


def test_a_failed_conversion_keeps_the_reason(tmp_path):
    weight = numpy_helper.from_array(np.ones((4, 5, 3, 3), np.float32), "w")  # 5 input channels, data has 3
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])],
        "bad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    with pytest.raises(UnsupportedModelError) as caught:
        deploykit.load(path, "openvino", precision="f32")
    message = str(caught.value)
    assert (
        "cannot read 'bad.onnx': conversion failed for Conv-17: Data batch channel count (3) does not match" in message
    )
    assert "Check '" not in message and "\n" not in message
