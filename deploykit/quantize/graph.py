"""Graph facts quantization needs: is it already quantized, node names, opset, the YOLO decode head.

Works on ``onnx.ModelProto`` only; never runs a model.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from deploykit.errors import ModelError, UsageError

QUANTIZED_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "ConvInteger",
        "MatMulInteger",
        "QLinearAdd",
        "QLinearMul",
        "QGemm",
    }
)
# Layers with learned weights: the decode head is what follows the last of them.
WEIGHTED_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
PER_CHANNEL_MIN_OPSET = 13  # QuantizeLinear's axis attribute: below it ORT falls back to per-tensor


def check_not_quantized(model: Any, name: str) -> None:
    """Refuse a model that already holds quantization ops.

    Raises:
        ModelError: naming the ops found.
    """
    found = sorted({node.op_type for node in model.graph.node if node.op_type in QUANTIZED_OPS})
    if found:
        raise ModelError(
            f"model '{name}' | is already quantized (it has {', '.join(found)} nodes); expected a float model.",
            hint="quantize the original f32 model instead.",
        )


def check_not_float16(model: Any, name: str) -> None:
    """Refuse an f16 conversion of a model whose weights already are float16."""
    from onnx import TensorProto

    if any(t.data_type == TensorProto.FLOAT16 for t in model.graph.initializer):
        raise ModelError(
            f"model '{name}' | already has float16 weights; expected an f32 model to convert.",
            hint="convert the original f32 model instead.",
        )


def name_nodes(model: Any) -> int:
    """Give every unnamed node a unique name (engines exclude and report nodes by name); returns how many."""
    taken = {node.name for node in model.graph.node if node.name}
    named = 0
    for index, node in enumerate(model.graph.node):
        if node.name:
            continue
        candidate = f"{node.op_type}_{index}"
        while candidate in taken:
            candidate += "_"
        node.name = candidate
        taken.add(candidate)
        named += 1
    return named


def default_opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def upgrade_opset(model: Any) -> tuple[Any, str | None]:
    """Raise the model to opset 13 when it is older, so per-channel weights stay per-channel."""
    opset = default_opset(model)
    if opset >= PER_CHANNEL_MIN_OPSET:
        return model, None
    from onnx import version_converter

    try:
        upgraded = version_converter.convert_version(model, PER_CHANNEL_MIN_OPSET)
    except Exception as exc:
        raise ModelError(
            f"model | has opset {opset}; per-channel quantization needs opset {PER_CHANNEL_MIN_OPSET} and the "
            f"conversion failed: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}.",
            hint="re-export the model with opset 13 or newer, or pass --per-tensor.",
        ) from exc
    return upgraded, f"opset {opset} raised to {PER_CHANNEL_MIN_OPSET} for per-channel weights"


def head_nodes(model: Any) -> list[str]:
    """The decode head of a detector: every node between the last weighted layers and the outputs.

    Walks back from the graph outputs and stops at convolutions and matrix products (the learned
    layers), so the sigmoid/exp, grid and anchor arithmetic and the final concatenations are kept.
    A convolution fed by a Softmax (YOLOv8's distribution-focal-loss integral, fixed weights
    0..15) is part of the decode and is kept too.
    """
    producer = {output: node for node in model.graph.node for output in node.output}
    kept: dict[str, Any] = {}
    pending = [producer[o.name] for o in model.graph.output if o.name in producer]
    while pending:
        node = pending.pop()
        if node.name in kept:
            continue
        if node.op_type in WEIGHTED_OPS:
            source = producer.get(node.input[0])
            if source is None or source.op_type != "Softmax":
                continue
        kept[node.name] = node
        pending += [producer[i] for i in node.input if i in producer]
    order = {node.name: i for i, node in enumerate(model.graph.node)}
    return sorted(kept, key=order.__getitem__)


def check_node_names(model: Any, names: Iterable[str], option: str = "--exclude") -> list[str]:
    """The names, checked to be nodes of the model.

    Raises:
        UsageError: a name that is not a node, with the closest names.
    """
    known = [node.name for node in model.graph.node]
    known_set = set(known)
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        if name not in known_set:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            raise UsageError(
                f"{option} '{name}' | is not a node of the model"
                + (f"; close names: {', '.join(close)}." if close else "."),
                hint="node names are listed by --debug-layers and by 'deploykit inspect'.",
            )
    return wanted


def count_ops(model: Any, op_types: Sequence[str]) -> int:
    return sum(1 for node in model.graph.node if node.op_type in op_types)


def float_outputs(model: Any) -> list[str]:
    """Remove the Q→DQ pair an engine put on a graph output, so the output keeps its float value.

    Rounding the final logits or boxes to 8 bits adds error after the last layer and can tie
    close classes; the producing layer still computes in int8. Returns the outputs changed.
    """
    nodes = list(model.graph.node)
    producer = {output: node for node in nodes for output in node.output}
    consumers: dict[str, int] = {}
    for node in nodes:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1
    changed = []
    for output in model.graph.output:
        dequantize = producer.get(output.name)
        if dequantize is None or dequantize.op_type != "DequantizeLinear":
            continue
        quantize = producer.get(dequantize.input[0])
        if quantize is None or quantize.op_type != "QuantizeLinear" or consumers.get(quantize.output[0]) != 1:
            continue
        source = producer.get(quantize.input[0])
        if source is None or consumers.get(quantize.input[0]) != 1:
            continue
        source.output[list(source.output).index(quantize.input[0])] = output.name
        model.graph.node.remove(quantize)
        model.graph.node.remove(dequantize)
        changed.append(output.name)
    return changed


def float_inputs_of(model: Any, nodes: Iterable[str]) -> int:
    """Remove the Q→DQ pairs that only feed nodes kept in float (a detector's head), so that the
    last int8 layers hand them unrounded values; returns how many pairs were removed.

    The decode head's exp() and grid arithmetic turn an 8-bit rounding of the raw box
    regression into pixels of box error; the convolutions before it still run in int8.
    """
    kept = set(nodes)
    graph_outputs = {o.name for o in model.graph.output}
    producer = {output: node for node in model.graph.node for output in node.output}
    users: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    removed = 0
    for dequantize in [n for n in model.graph.node if n.op_type == "DequantizeLinear"]:
        quantize = producer.get(dequantize.input[0])
        readers = users.get(dequantize.output[0], [])
        if (
            quantize is None
            or quantize.op_type != "QuantizeLinear"
            or quantize.input[0] not in producer  # a graph input or weight, not a layer's output
            or len(users.get(quantize.output[0], [])) != 1
            or not readers
            or dequantize.output[0] in graph_outputs
            or not all(reader.name in kept for reader in readers)
        ):
            continue
        for reader in readers:
            for position, name in enumerate(reader.input):
                if name == dequantize.output[0]:
                    reader.input[position] = quantize.input[0]
        model.graph.node.remove(dequantize)
        model.graph.node.remove(quantize)
        removed += 1
    return removed
