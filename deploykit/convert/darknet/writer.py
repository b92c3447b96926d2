"""Streaming an ONNX model to disk: the graph first, then each weight initializer computed,
serialized and written one at a time, so peak memory stays near one layer's weights.

Protobuf allows a message's repeated fields in any order and split across the stream, so the
graph's ``initializer`` entries can follow its other fields; only the graph's total length
must be known up front, and it is computed from the shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from onnx import TensorProto

from deploykit.convert.darknet.graph import LazyTensor

_GRAPH_FIELD = 7  # ModelProto.graph
_INITIALIZER_FIELD = 5  # GraphProto.initializer
_RAW_DATA_FIELD = 9  # TensorProto.raw_data
_LENGTH_DELIMITED = 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _tag(field: int) -> bytes:
    return _varint((field << 3) | _LENGTH_DELIMITED)


def _tensor_header(tensor: LazyTensor) -> TensorProto:
    proto = TensorProto()
    proto.name = tensor.name
    proto.data_type = TensorProto.FLOAT
    proto.dims.extend(tensor.dims)
    return proto


def _tensor_size(tensor: LazyTensor) -> int:
    data_bytes = 4 * int(np.prod(tensor.dims, dtype=np.int64))
    return _tensor_header(tensor).ByteSize() + len(_tag(_RAW_DATA_FIELD)) + len(_varint(data_bytes)) + data_bytes


def write_streaming(model: Any, lazy: Sequence[LazyTensor], path: Path) -> int:
    """Write ``model`` (whose graph has no weight initializers yet) plus ``lazy`` to ``path``.

    Returns:
        the number of bytes written.
    """
    graph_bytes = model.graph.SerializeToString()
    head = type(model)()
    head.CopyFrom(model)
    head.ClearField("graph")
    sizes = [_tensor_size(t) for t in lazy]
    graph_length = len(graph_bytes) + sum(len(_tag(_INITIALIZER_FIELD)) + len(_varint(s)) + s for s in sizes)
    written = 0
    with open(path, "wb") as handle:
        written += _write(handle, head.SerializeToString())
        written += _write(handle, _tag(_GRAPH_FIELD) + _varint(graph_length) + graph_bytes)
        for tensor, size in zip(lazy, sizes, strict=True):
            values = np.ascontiguousarray(tensor.values(), dtype="<f4")
            if values.shape != tuple(tensor.dims):
                raise AssertionError(f"{tensor.name}: computed {values.shape}, declared {tensor.dims}")
            header = _tensor_header(tensor).SerializeToString()
            data = values.data.cast("B")  # the array's own buffer, no copy
            prefix = _tag(_INITIALIZER_FIELD) + _varint(size) + header + _tag(_RAW_DATA_FIELD) + _varint(len(data))
            written += _write(handle, prefix)
            written += _write(handle, data)
    return written


def _write(handle: BinaryIO, data: bytes | memoryview) -> int:
    handle.write(data)
    return len(data)
