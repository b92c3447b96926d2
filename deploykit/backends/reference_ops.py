"""What deploykit knows of ``onnx.reference``'s mistakes: corrections to its ops, passed to every
``ReferenceEvaluator`` deploykit builds, and the constructs it computes wrongly and cannot be corrected
here (``blind_spot``: the verification then says ``unverified`` instead of trusting it).

onnx's reference MaxPool (1.23.2, and onnx's main branch at commit 043be319) takes a separate path
for stride-1 pools (``CommonPool._run`` in ``onnx/reference/ops/_op_common_pool.py``) that misreads
explicit pads: four pads as [top, bottom, left, right] instead of the spec's [top, left, bottom,
right] (``x1_begin, x2_begin, x1_end, x2_end``), and two or six pads (1-D, 3-D) not at all (wrong
shapes or an IndexError). Darknet's [maxpool] size=2 stride=1 (YOLOv3-tiny) is such a pool:
pads [0, 0, 1, 1] come out 12x14 instead of 13x13, and the head's Reshape fails ("cannot reshape
array of size 42840"). ONNX Runtime, OpenVINO and onnx's own shape inference follow the spec.
AveragePool uses another module (``op_pool_common.py``) and pads as the spec says.

The fix pads the input itself, in the spec's order, and hands onnx a pool with no pads, only where
onnx would misread them; everything else (strided or dilated pools, ``auto_pad``, symmetric 2-D
pads, the Indices output) goes to onnx's op unchanged. No version guard: the padding here is the
spec's, so the result stays right once onnx is fixed (a strict xfail in the tests says when it is).
This module must not import onnx at deploykit's import time: the backend imports it lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx.reference.ops.op_max_pool import MaxPool as _OnnxMaxPool

from deploykit.model import walk_nodes


def _all_ones(values: Sequence[int] | None) -> bool:
    return values is None or all(int(v) == 1 for v in values)


def onnx_misreads_pads(x_ndim: int, pads: Sequence[int] | None, strides: Sequence[int] | None,
                       dilations: Sequence[int] | None, auto_pad: str | None) -> bool:  # fmt: skip
    """Whether onnx's reference MaxPool would pad this pool differently from the spec."""
    if not pads or not any(pads) or auto_pad not in (None, "NOTSET", b"NOTSET"):
        return False
    if not (_all_ones(strides) and _all_ones(dilations)):
        return False  # strided and dilated pools take onnx's other, correct path
    spatial = x_ndim - 2
    # 2-D: onnx reads [top, left, bottom, right] as [top, bottom, left, right]: same only if left == bottom.
    return spatial != 2 or int(pads[1]) != int(pads[2])


class MaxPool(_OnnxMaxPool):
    """onnx's MaxPool, with a stride-1 pool's explicit pads applied in the spec's order.

    The padding is NaN, which onnx's max pooling skips as it skips its own padding.
    """

    # onnx's own MaxPool narrows CommonPool._run's signature the same way: the evaluator calls it so.
    def _run(  # type: ignore[override]
        self, x: np.ndarray, auto_pad: Any = None, ceil_mode: Any = None, dilations: Any = None,
        kernel_shape: Any = None, pads: Any = None, storage_order: Any = None, strides: Any = None,
    ) -> Any:  # fmt: skip
        if len(self.output) == 1 and onnx_misreads_pads(x.ndim, pads, strides, dilations, auto_pad):
            spatial = x.ndim - 2
            widths = [(0, 0), (0, 0)] + [(int(pads[i]), int(pads[i + spatial])) for i in range(spatial)]
            x, pads = np.pad(x, widths, constant_values=np.nan), [0] * (2 * spatial)
        return super()._run(x, auto_pad=auto_pad, ceil_mode=ceil_mode, dilations=dilations, kernel_shape=kernel_shape,
                            pads=pads, storage_order=storage_order, strides=strides)  # fmt: skip


REFERENCE_OPS: list[type] = [MaxPool]
"""The ops to pass as ``ReferenceEvaluator(model, new_ops=REFERENCE_OPS)``."""


def blind_spot(model: Any) -> str | None:
    """The first construct of ``model`` (a ModelProto, subgraphs included) that onnx's reference evaluator
    is known to compute wrongly, said as a reason; None when there is none.

    - A ``Loop`` without its ``cond`` input: the spec runs it ``M`` times (or until the body's condition
      output is false); onnx's ``Loop._run`` tests ``while cond and ...`` and so runs it zero times.
    """
    for node in walk_nodes(model.graph):
        if node.op_type == "Loop" and node.domain in ("", "ai.onnx") and (len(node.input) < 2 or not node.input[1]):
            return (
                f"onnx's reference evaluator runs a Loop without a condition input zero times (node "
                f"'{node.name or node.output[0]}'); the ONNX spec runs it M times"
            )
    return None
