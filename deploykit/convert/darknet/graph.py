"""Darknet layers → ONNX nodes, with Darknet's exact formulas.

Weights stay lazy: an initializer is a name, a shape and a function that computes its values
(batch norm folded into the convolution) from views of the memory-mapped ``.weights`` file, so
the writer can stream them to disk one at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from deploykit.convert.darknet.layers import Layer, Network
from deploykit.convert.darknet.weights import DarknetWeights

# pjreddie's Darknet normalises with (x - mean) / (sqrt(var) + .000001f)
BN_EPSILON = 1e-6
INPUT_NAME = "images"
DETECTIONS_NAME = "detections"


@dataclass
class LazyTensor:
    """A float32 initializer whose values are computed only when it is written."""

    name: str
    dims: tuple[int, ...]
    values: Callable[[], np.ndarray]


@dataclass
class GraphParts:
    nodes: list[Any] = field(default_factory=list)
    constants: list[Any] = field(default_factory=list)
    lazy: list[LazyTensor] = field(default_factory=list)
    outputs: list[Any] = field(default_factory=list)
    heads: list[dict[str, Any]] = field(default_factory=list)
    _count: int = 0

    def fresh(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def node(self, op: str, inputs: list[str], hint: str, **attributes: Any) -> str:
        output = self.fresh(hint)
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def const(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.constants.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def scalar(self, value: float, hint: str = "c") -> str:
        return self.const(np.array(value, dtype=np.float32), hint)

    def ints(self, values: list[int], hint: str = "shape") -> str:
        return self.const(np.array(values, dtype=np.int64), hint)


def _activation(parts: GraphParts, x: str, name: str, hint: str) -> str:
    node = parts.node
    if name == "linear":
        return x
    if name == "leaky":
        return node("LeakyRelu", [x], hint, alpha=0.1)
    if name == "relie":
        return node("LeakyRelu", [x], hint, alpha=0.01)
    if name == "relu":
        return node("Relu", [x], hint)
    if name == "relu6":
        return node("Clip", [x, parts.scalar(0.0), parts.scalar(6.0)], hint)
    if name == "hardtan":
        return node("Clip", [x, parts.scalar(-1.0), parts.scalar(1.0)], hint)
    if name == "logistic":
        return node("Sigmoid", [x], hint)
    if name == "loggy":
        doubled = node("Mul", [node("Sigmoid", [x], hint), parts.scalar(2.0)], hint)
        return node("Sub", [doubled, parts.scalar(1.0)], hint)
    if name == "tanh":
        return node("Tanh", [x], hint)
    if name == "ramp":
        return node("Add", [node("Relu", [x], hint), node("Mul", [x, parts.scalar(0.1)], hint)], hint)
    if name == "mish":
        return node("Mul", [x, node("Tanh", [node("Softplus", [x], hint)], hint)], hint)
    if name == "swish":
        return node("Mul", [x, node("Sigmoid", [x], hint)], hint)
    if name in ("hardswish", "hard_swish"):
        clipped = node("Clip", [node("Add", [x, parts.scalar(3.0)], hint), parts.scalar(0.0), parts.scalar(6.0)], hint)
        return node("Mul", [x, node("Div", [clipped, parts.scalar(6.0)], hint)], hint)
    if name == "hard_mish":  # x > 0: x; x > -2: x²/2 + x; else 0
        quadratic = node("Add", [node("Mul", [node("Mul", [x, x], hint), parts.scalar(0.5)], hint), x], hint)
        inner = node("Where", [node("Greater", [x, parts.scalar(-2.0)], hint), quadratic, parts.scalar(0.0)], hint)
        return node("Where", [node("Greater", [x, parts.scalar(0.0)], hint), x, inner], hint)
    if name == "elu":
        return node("Elu", [x], hint, alpha=1.0)
    if name == "selu":
        return node("Selu", [x], hint, alpha=1.6732, gamma=1.0507)
    if name == "gelu":  # Darknet: 0.5·x·(1 + tanh(0.797885·x + 0.035677·x³))
        cube = node("Mul", [node("Mul", [x, x], hint), x], hint)
        inner = node(
            "Add",
            [node("Mul", [x, parts.scalar(0.797885)], hint), node("Mul", [cube, parts.scalar(0.035677)], hint)],
            hint,
        )
        one_plus = node("Add", [node("Tanh", [inner], hint), parts.scalar(1.0)], hint)
        return node("Mul", [node("Mul", [x, parts.scalar(0.5)], hint), one_plus], hint)
    raise AssertionError(f"activation {name} passed validation but has no ONNX form")


def _bn_scale(scales: np.ndarray, variance: np.ndarray) -> np.ndarray:
    return scales.astype(np.float64) / (np.sqrt(variance.astype(np.float64)) + BN_EPSILON)


def _folded(
    blocks: dict[str, np.ndarray], batch_normalize: bool, shaped: Callable[[], np.ndarray]
) -> tuple[Callable[[], np.ndarray], Callable[[], np.ndarray]]:
    """Weight and bias producers with Darknet's batch norm folded in:
    y = scale·(W·x − mean)/(√var + ε) + bias, biases being added after the normalisation."""

    def weight() -> np.ndarray:
        w = shaped()
        if not batch_normalize:
            return np.ascontiguousarray(w, dtype=np.float32)
        scale = _bn_scale(blocks["scales"], blocks["rolling_variance"])
        return (w * scale.reshape(-1, *([1] * (w.ndim - 1)))).astype(np.float32)

    def bias() -> np.ndarray:
        if not batch_normalize:
            return np.asarray(blocks["biases"], dtype=np.float32)
        scale = _bn_scale(blocks["scales"], blocks["rolling_variance"])
        return (blocks["biases"] - blocks["rolling_mean"] * scale).astype(np.float32)

    return weight, bias


def _convolutional(parts: GraphParts, layer: Layer, x: str, weights: DarknetWeights) -> str:
    p = layer.params
    blocks = weights.blocks(layer)
    filters, size, groups = p["filters"], p["size"], p["groups"]
    kernel_dims = (filters, layer.in_shape[0] // groups, size, size)
    hint = f"l{layer.index}_conv"

    kernel, bias = _folded(blocks, p["batch_normalize"], lambda: blocks["weights"].reshape(kernel_dims))
    w_name, b_name = f"{hint}.weight", f"{hint}.bias"
    parts.lazy += [LazyTensor(w_name, kernel_dims, kernel), LazyTensor(b_name, (filters,), bias)]
    pad = p["padding"]
    y = parts.node(
        "Conv",
        [x, w_name, b_name],
        hint,
        kernel_shape=[size, size],
        strides=list(p["stride"]),
        pads=[pad, pad, pad, pad],
        dilations=[p["dilation"]] * 2,
        group=groups,
    )
    return _activation(parts, y, p["activation"], hint)


def _connected(parts: GraphParts, layer: Layer, x: str, weights: DarknetWeights) -> str:
    p = layer.params
    blocks = weights.blocks(layer)
    outputs = p["outputs"]
    inputs = layer.in_shape[0] * layer.in_shape[1] * layer.in_shape[2]
    transpose = weights.header.transpose
    hint = f"l{layer.index}_fc"

    def shaped() -> np.ndarray:
        if transpose:
            return blocks["weights"].reshape((inputs, outputs)).T
        return blocks["weights"].reshape((outputs, inputs))

    matrix, bias = _folded(blocks, p["batch_normalize"], shaped)
    w_name, b_name = f"{hint}.weight", f"{hint}.bias"
    parts.lazy += [LazyTensor(w_name, (outputs, inputs), matrix), LazyTensor(b_name, (outputs,), bias)]
    flat = parts.node("Flatten", [x], hint, axis=1)
    y = _activation(parts, parts.node("Gemm", [flat, w_name, b_name], hint, transB=1), p["activation"], hint)
    return parts.node("Reshape", [y, parts.ints([0, outputs, 1, 1])], hint)


def _batchnorm(parts: GraphParts, layer: Layer, x: str, weights: DarknetWeights) -> str:
    blocks = weights.blocks(layer)
    c = layer.in_shape[0]
    hint = f"l{layer.index}_bn"
    scale_name, shift_name = f"{hint}.scale", f"{hint}.shift"
    parts.lazy += [
        LazyTensor(
            scale_name,
            (c, 1, 1),
            lambda: _bn_scale(blocks["scales"], blocks["rolling_variance"]).astype(np.float32).reshape(c, 1, 1),
        ),
        LazyTensor(
            shift_name,
            (c, 1, 1),
            lambda: (
                (-blocks["rolling_mean"] * _bn_scale(blocks["scales"], blocks["rolling_variance"]))
                .astype(np.float32)
                .reshape(c, 1, 1)
            ),
        ),
    ]
    return parts.node("Add", [parts.node("Mul", [x, scale_name], hint), shift_name], hint)


def _maxpool(parts: GraphParts, layer: Layer, x: str) -> str:
    p = layer.params
    size, padding = p["size"], p["padding"]
    if size == 1 and p["stride"] == (1, 1) and padding == 0:
        return x
    before, after = padding // 2, padding - padding // 2  # Darknet pads ⌊P/2⌋ first, the rest after
    return parts.node(
        "MaxPool",
        [x],
        f"l{layer.index}_maxpool",
        kernel_shape=[size, size],
        strides=list(p["stride"]),
        pads=[before, before, after, after],
    )


def _route(parts: GraphParts, layer: Layer, tensors: dict[int, str], net: Network) -> str:
    p = layer.params
    hint = f"l{layer.index}_route"
    pieces = []
    for source in layer.inputs:
        tensor = tensors[source]
        if p["groups"] > 1:
            channels = net.layers[source].out_shape[0] // p["groups"]
            start = channels * p["group_id"]
            tensor = parts.node(
                "Slice", [tensor, parts.ints([start]), parts.ints([start + channels]), parts.ints([1])], hint
            )
        pieces.append(tensor)
    return pieces[0] if len(pieces) == 1 else parts.node("Concat", pieces, hint, axis=1)


def _channel_slice(parts: GraphParts, x: str, start: int, end: int, hint: str) -> str:
    return parts.node("Slice", [x, parts.ints([start]), parts.ints([end]), parts.ints([1])], hint)


def _shortcut(parts: GraphParts, layer: Layer, tensors: dict[int, str], net: Network) -> str:
    p = layer.params
    hint = f"l{layer.index}_shortcut"
    previous, source = layer.inputs
    out, add = tensors[previous], tensors[source]
    c_out, c_add = net.layers[previous].out_shape[0], net.layers[source].out_shape[0]
    if p["stride"] > 1:  # Darknet adds every stride-th element of a larger source
        _, h_add, w_add = net.layers[source].out_shape
        add = parts.node(
            "Slice",
            [
                add,
                parts.ints([0, 0]),
                parts.ints([h_add, w_add]),
                parts.ints([2, 3]),
                parts.ints([p["stride"], p["stride"]]),
            ],
            hint,
        )
    common = min(c_out, c_add)
    head = _channel_slice(parts, out, 0, common, hint) if c_out > common else out
    extra = _channel_slice(parts, add, 0, common, hint) if c_add > common else add
    if p["alpha"] != 1.0:
        head = parts.node("Mul", [head, parts.scalar(p["alpha"])], hint)
    if p["beta"] != 1.0:
        extra = parts.node("Mul", [extra, parts.scalar(p["beta"])], hint)
    summed = parts.node("Add", [head, extra], hint)
    if c_out > common:  # Darknet leaves the channels the other layer lacks as they were
        summed = parts.node("Concat", [summed, _channel_slice(parts, out, common, c_out, hint)], hint, axis=1)
    return _activation(parts, summed, p["activation"], hint)


def _upsample(parts: GraphParts, layer: Layer, x: str) -> str:
    p = layer.params
    hint = f"l{layer.index}_upsample"
    scales = parts.const(np.array([1, 1, p["stride"], p["stride"]], dtype=np.float32), "scales")
    y = parts.node(
        "Resize",
        [x, "", scales],
        hint,
        mode="nearest",
        coordinate_transformation_mode="asymmetric",
        nearest_mode="floor",
    )
    return parts.node("Mul", [y, parts.scalar(p["scale"])], hint) if p["scale"] != 1.0 else y


def _reorg(parts: GraphParts, layer: Layer, x: str) -> str:
    """Darknet's two reorgs as reshape → transpose → reshape.

    [reorg] (YOLOv2, ``reorg_cpu(..., forward=0)`` on the input dims) reads the C×H×W input as if
    it were (C/s²)×(H·s)×(W·s); [reorg3d] is the plain space-to-depth with channel order (dy, dx, c).
    """
    s = layer.params["stride"]
    c, h, w = layer.in_shape
    hint = f"l{layer.index}_reorg"
    if layer.type == "reorg":
        first = [0, c // (s * s), h, s, w, s]
    else:
        first = [0, c, h // s, s, w // s, s]
    y = parts.node("Reshape", [x, parts.ints(first)], hint)
    y = parts.node("Transpose", [y], hint, perm=[0, 3, 5, 1, 2, 4])
    return parts.node("Reshape", [y, parts.ints([0, *layer.out_shape])], hint)


def _softmax(parts: GraphParts, layer: Layer, x: str) -> str:
    p = layer.params
    hint = f"l{layer.index}_softmax"
    if p["temperature"] != 1.0:
        x = parts.node("Div", [x, parts.scalar(p["temperature"])], hint)
    c, h, w = layer.in_shape
    grouped = parts.node("Reshape", [x, parts.ints([0, p["groups"], c * h * w // p["groups"]])], hint)
    y = parts.node("Softmax", [grouped], hint, axis=-1)
    return parts.node("Reshape", [y, parts.ints([0, c, h, w])], hint)


def _head_layout(parts: GraphParts, layer: Layer, x: str, hint: str) -> tuple[str, int, int]:
    anchors = len(layer.params["anchors"])
    classes = layer.params["classes"]
    _, h, w = layer.in_shape
    return parts.node("Reshape", [x, parts.ints([0, anchors, 5 + classes, h, w])], hint), anchors, classes


def _split(parts: GraphParts, x: str, sizes: list[int], hint: str) -> list[str]:
    outputs = [parts.fresh(hint) for _ in sizes]
    parts.nodes.append(
        helper.make_node("Split", [x, parts.ints(sizes, "split")], outputs, name=outputs[0] + "_split", axis=2)
    )
    return outputs


def _head_raw(parts: GraphParts, layer: Layer, x: str) -> str:
    """The head's output exactly as Darknet's layer leaves it (activations applied in place)."""
    p = layer.params
    hint = f"l{layer.index}_{layer.type}"
    grid, anchors, classes = _head_layout(parts, layer, x, hint)
    xy, wh, obj, cls = _split(parts, grid, [2, 2, 1, classes], hint)
    if layer.type == "yolo":
        if not p["new_coords"]:
            xy = parts.node("Sigmoid", [xy], hint)
            obj = parts.node("Sigmoid", [obj], hint)
            cls = parts.node("Sigmoid", [cls], hint)
        s = p["scale_x_y"]
        if s != 1.0:
            xy = parts.node("Sub", [parts.node("Mul", [xy, parts.scalar(s)], hint), parts.scalar(0.5 * (s - 1))], hint)
    else:  # region: logistic x, y, objectness; softmax over the classes
        xy = parts.node("Sigmoid", [xy], hint)
        obj = parts.node("Sigmoid", [obj], hint)
        cls = parts.node("Softmax", [cls], hint, axis=2)
    joined = parts.node("Concat", [xy, wh, obj, cls], hint, axis=2)
    return parts.node("Reshape", [joined, parts.ints([0, anchors * (5 + classes), *layer.in_shape[1:]])], hint)


def _head_decoded(parts: GraphParts, layer: Layer, raw: str, net: Network, opencv_threshold: float | None) -> str:
    """Rows of cx, cy, w, h (relative to the input), objectness, objectness × class probability."""
    p = layer.params
    hint = f"l{layer.index}_decode"
    grid, anchors, classes = _head_layout(parts, layer, raw, hint)
    xy, wh, obj, cls = _split(parts, grid, [2, 2, 1, classes], hint)
    _, h, w = layer.in_shape
    cells = np.stack(np.meshgrid(np.arange(w), np.arange(h)), axis=0).astype(np.float32)  # (2, H, W): col, row
    xy = parts.node("Add", [xy, parts.const(cells[None, None], "grid")], hint)
    xy = parts.node("Div", [xy, parts.const(np.array([w, h], np.float32).reshape(1, 1, 2, 1, 1), "cells")], hint)
    anchor = np.array(p["anchors"], dtype=np.float32).reshape(1, anchors, 2, 1, 1)
    if layer.type == "yolo":
        anchor = anchor / np.array([net.width, net.height], np.float32).reshape(1, 1, 2, 1, 1)
        if p["new_coords"]:
            size = parts.node("Mul", [parts.node("Mul", [wh, wh], hint), parts.scalar(4.0)], hint)
        else:
            size = parts.node("Exp", [wh], hint)
    else:  # region anchors are in grid cells
        anchor = anchor / np.array([w, h], np.float32).reshape(1, 1, 2, 1, 1)
        size = parts.node("Exp", [wh], hint)
    wh = parts.node("Mul", [size, parts.const(anchor, "anchors")], hint)
    scores = parts.node("Mul", [cls, obj], hint)
    if opencv_threshold is not None:
        keep = parts.node(
            "Cast", [parts.node("Greater", [scores, parts.scalar(opencv_threshold)], hint)], hint, to=TensorProto.FLOAT
        )
        scores = parts.node("Mul", [scores, keep], hint)
    joined = parts.node("Concat", [xy, wh, obj, scores], hint, axis=2)
    rows = parts.node("Transpose", [joined], hint, perm=[0, 3, 4, 1, 2])  # (y, x, anchor) order, as OpenCV
    return parts.node("Reshape", [rows, parts.ints([0, h * w * anchors, 5 + classes])], hint)


def head_metadata(layer: Layer, net: Network, output: str) -> dict[str, Any]:
    _, h, w = layer.in_shape
    return {
        "output": output,
        "type": layer.type,
        "layer": layer.index,
        "classes": layer.params["classes"],
        "anchors": [list(a) for a in layer.params["anchors"]],
        "grid": [h, w],
        "scale_x_y": layer.params.get("scale_x_y", 1.0),
        "new_coords": layer.params.get("new_coords", False),
        "anchor_units": "pixels" if layer.type == "yolo" else "cells",
        "input_size": [net.height, net.width],
        "opencv_threshold": layer.params.get("opencv_threshold", 0.2),
    }


def build_graph(
    net: Network,
    weights: DarknetWeights,
    *,
    head: str,
    batch: int | None,
    opencv_threshold: float | None = None,
) -> tuple[Any, list[LazyTensor], list[dict[str, Any]]]:
    """The ONNX graph (without its weight initializers), the lazy weights to stream into it,
    and a description of each detection head (for decoders)."""
    parts = GraphParts()
    tensors: dict[int, str] = {-1: INPUT_NAME}
    for layer in net.layers:
        x = tensors[layer.inputs[0]]
        if layer.type == "convolutional":
            y = _convolutional(parts, layer, x, weights)
        elif layer.type == "connected":
            y = _connected(parts, layer, x, weights)
        elif layer.type == "batchnorm":
            y = _batchnorm(parts, layer, x, weights)
        elif layer.type == "maxpool":
            y = _maxpool(parts, layer, x)
        elif layer.type == "avgpool":
            y = parts.node("GlobalAveragePool", [x], f"l{layer.index}_avgpool")
        elif layer.type == "route":
            y = _route(parts, layer, tensors, net)
        elif layer.type == "shortcut":
            y = _shortcut(parts, layer, tensors, net)
        elif layer.type == "upsample":
            y = _upsample(parts, layer, x)
        elif layer.type in ("reorg", "reorg3d"):
            y = _reorg(parts, layer, x)
        elif layer.type == "softmax":
            y = _softmax(parts, layer, x)
        elif layer.type == "dropout":
            y = x
        elif layer.type == "sam":
            y = _activation(
                parts,
                parts.node("Mul", [x, tensors[layer.inputs[1]]], f"l{layer.index}_sam"),
                layer.params["activation"],
                f"l{layer.index}_sam",
            )
        elif layer.type == "scale_channels":
            y = _activation(
                parts,
                parts.node("Mul", [tensors[layer.inputs[1]], x], f"l{layer.index}_scale"),
                layer.params["activation"],
                f"l{layer.index}_scale",
            )
        elif layer.type in ("yolo", "region"):
            y = _head_raw(parts, layer, x)
        else:  # pragma: no cover - resolve() rejects unknown sections
            raise AssertionError(layer.type)
        tensors[layer.index] = y

    batch_dim: int | str = "batch" if batch is None else batch
    outputs = []
    heads = net.heads()
    if heads and head == "decoded":
        rows = [_head_decoded(parts, layer, tensors[layer.index], net, opencv_threshold) for layer in heads]
        final = parts.node("Concat", rows, "detections", axis=1) if len(rows) > 1 else rows[0]
        parts.nodes.append(helper.make_node("Identity", [final], [DETECTIONS_NAME], name=DETECTIONS_NAME))
        total = sum(layer.in_shape[1] * layer.in_shape[2] * len(layer.params["anchors"]) for layer in heads)
        classes = heads[0].params["classes"]
        outputs.append(
            helper.make_tensor_value_info(DETECTIONS_NAME, TensorProto.FLOAT, [batch_dim, total, 5 + classes])
        )
        parts.heads = [head_metadata(layer, net, DETECTIONS_NAME) for layer in heads]
    else:
        finals = heads or [net.layers[-1]]
        for layer in finals:
            name = f"{layer.type}_{layer.index}"
            parts.nodes.append(helper.make_node("Identity", [tensors[layer.index]], [name], name=name))
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch_dim, *layer.out_shape]))
        parts.heads = [head_metadata(layer, net, f"{layer.type}_{layer.index}") for layer in heads]
    inputs = [
        helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, [batch_dim, net.channels, net.height, net.width])
    ]
    graph = helper.make_graph(parts.nodes, "darknet", inputs, outputs, parts.constants)
    return graph, parts.lazy, parts.heads
