"""Small models built in code, with seeded weights, for tests and benchmarks.

Nothing here downloads anything; every model is made from ``onnx.helper``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

OPSET = 17
IR_VERSION = 8  # readable by every runtime deploykit supports, OpenCV 4.8 included


def _tensor(name: str, array: np.ndarray) -> Any:
    from onnx import numpy_helper

    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def tiny_classifier(seed: int = 0, size: int = 32, classes: int = 10) -> Any:
    """A conv → BN → ReLU → pool → conv → GAP → Gemm → Softmax classifier, dynamic batch.

    Input ``images`` float32 ``(batch, 3, size, size)``; output ``probabilities``
    float32 ``(batch, classes)``.
    """
    from onnx import TensorProto, helper

    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:
        fan_in = int(np.prod(shape[1:])) or 1
        return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    initializers = [
        _tensor("conv1_w", weights(8, 3, 3, 3)),
        _tensor("conv1_b", rng.uniform(-0.1, 0.1, 8).astype(np.float32)),
        _tensor("bn_scale", rng.uniform(0.5, 1.5, 8).astype(np.float32)),
        _tensor("bn_bias", rng.uniform(-0.1, 0.1, 8).astype(np.float32)),
        _tensor("bn_mean", rng.uniform(-0.1, 0.1, 8).astype(np.float32)),
        _tensor("bn_var", rng.uniform(0.5, 1.5, 8).astype(np.float32)),
        _tensor("conv2_w", weights(16, 8, 3, 3)),
        _tensor("conv2_b", rng.uniform(-0.1, 0.1, 16).astype(np.float32)),
        _tensor("fc_w", weights(16, classes).T.copy()),
        _tensor("fc_b", rng.uniform(-0.1, 0.1, classes).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["images", "conv1_w", "conv1_b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["b1"]),
        helper.make_node("Relu", ["b1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, size, size])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", classes])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="deploykit.samples")
    model.ir_version = IR_VERSION
    return model


def mobilenet_v2_encoder(classifier: Path, output: Path) -> Path:
    """The MobileNetV2 recipe's ``classifier`` without its Gemm head: (batch, 1280) pooled features,
    its metadata kept but for the labels, and task ``embed`` (a real encoder for the embed task)."""
    import onnx
    import onnx.utils

    model = onnx.load(str(classifier))
    head = next(n for n in model.graph.node if n.op_type == "Gemm")
    onnx.utils.extract_model(str(classifier), str(output), [model.graph.input[0].name], [head.input[0]])
    encoder = onnx.load(str(output))
    for prop in model.metadata_props:
        if prop.key not in ("deploykit.labels", "deploykit.task"):
            encoder.metadata_props.add(key=prop.key, value=prop.value)
    encoder.metadata_props.add(key="deploykit.task", value="embed")
    onnx.save(encoder, str(output))
    return output
