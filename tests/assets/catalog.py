"""The contract catalog: small ONNX models built in code, each with the feeds to run it on.

Every backend runs every model here and is compared with onnx.reference.ReferenceEvaluator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


def _model(nodes: list[Any], name: str, inputs: list[Any], outputs: list[Any], inits: list[Any]):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    return model


def _init(name: str, array: np.ndarray) -> Any:
    return numpy_helper.from_array(np.ascontiguousarray(array), name)


def conv_bn_act() -> Any:
    rng = np.random.default_rng(1)
    inits = [
        _init("w1", rng.normal(0, 0.3, (6, 3, 3, 3)).astype(np.float32)),
        _init("b1", rng.normal(0, 0.1, 6).astype(np.float32)),
        _init("scale", rng.uniform(0.5, 1.5, 6).astype(np.float32)),
        _init("bias", rng.normal(0, 0.1, 6).astype(np.float32)),
        _init("mean", rng.normal(0, 0.1, 6).astype(np.float32)),
        _init("var", rng.uniform(0.5, 1.5, 6).astype(np.float32)),
        _init("w2", rng.normal(0, 0.3, (4, 6, 3, 3)).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "scale", "bias", "mean", "var"], ["bn"]),
        helper.make_node("LeakyRelu", ["bn"], ["act"], alpha=0.1),
        helper.make_node("Conv", ["act", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Sigmoid", ["c2"], ["y"]),
    ]
    return _model(
        nodes,
        "conv_bn_act",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        inits,
    )


def mlp_dynamic_batch() -> Any:
    rng = np.random.default_rng(2)
    inits = [
        _init("w1", rng.normal(0, 0.4, (8, 16)).astype(np.float32)),
        _init("b1", rng.normal(0, 0.1, 16).astype(np.float32)),
        _init("w2", rng.normal(0, 0.4, (16, 4)).astype(np.float32)),
        _init("b2", rng.normal(0, 0.1, 4).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["hr"]),
        helper.make_node("MatMul", ["hr", "w2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["y"]),
    ]
    return _model(
        nodes,
        "mlp_dynamic_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        inits,
    )


def multi_io() -> Any:
    """Two inputs, three outputs whose graph order is not alphabetical."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["z_sum"]),
        helper.make_node("Mul", ["a", "b"], ["a_prod"]),
        helper.make_node("Sub", ["a", "b"], ["m_diff"]),
    ]
    spec = [2, 3]
    return _model(
        nodes,
        "multi_io",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, spec),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, spec),
        ],
        [
            helper.make_tensor_value_info("z_sum", TensorProto.FLOAT, spec),
            helper.make_tensor_value_info("a_prod", TensorProto.FLOAT, spec),
            helper.make_tensor_value_info("m_diff", TensorProto.FLOAT, spec),
        ],
        [],
    )


def int64_embedding() -> Any:
    rng = np.random.default_rng(3)
    inits = [_init("table", rng.normal(0, 1, (10, 4)).astype(np.float32))]
    nodes = [helper.make_node("Gather", ["table", "indices"], ["embedded"], axis=0)]
    return _model(
        nodes,
        "int64_embedding",
        [helper.make_tensor_value_info("indices", TensorProto.INT64, [1, 5])],
        [helper.make_tensor_value_info("embedded", TensorProto.FLOAT, [1, 5, 4])],
        inits,
    )


def symbolic_sequence() -> Any:
    rng = np.random.default_rng(4)
    inits = [_init("w", rng.normal(0, 0.5, (4, 3)).astype(np.float32))]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Tanh", ["h"], ["y"]),
    ]
    return _model(
        nodes,
        "symbolic_sequence",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "seq", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq", 3])],
        inits,
    )


@dataclass(frozen=True)
class CatalogModel:
    """One contract model. ``refusal_names``: what a backend that cannot run the model must name in
    its ``UnsupportedModelError`` (the operator or the input) for the contract to accept the refusal;
    empty when every backend must run it."""

    name: str
    build: Callable[[], Any]
    feeds: Callable[[np.random.Generator], list[dict[str, np.ndarray]]]
    refusal_names: tuple[str, ...] = ()


def _floats(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.uniform(-1, 1, shape).astype(np.float32)


CATALOG: list[CatalogModel] = [
    CatalogModel("conv_bn_act", conv_bn_act, lambda r: [{"x": _floats(r, 1, 3, 16, 16)}]),
    CatalogModel(
        "mlp_dynamic_batch",
        mlp_dynamic_batch,
        lambda r: [{"x": _floats(r, 1, 8)}, {"x": _floats(r, 5, 8)}, {"x": _floats(r, 1, 8)}],
    ),
    CatalogModel("multi_io", multi_io, lambda r: [{"a": _floats(r, 2, 3), "b": _floats(r, 2, 3)}]),
    CatalogModel(
        "int64_embedding",
        int64_embedding,
        lambda r: [{"indices": r.integers(0, 10, (1, 5)).astype(np.int64)}],
        refusal_names=("Gather",),
    ),
    CatalogModel(
        "symbolic_sequence",
        symbolic_sequence,
        lambda r: [{"x": _floats(r, 1, 7, 4)}, {"x": _floats(r, 1, 2, 4)}],
        refusal_names=("input 'x'", "'seq'"),
    ),
]
