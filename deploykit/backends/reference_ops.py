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
onnx's reference Conv computes a dilated convolution by building the dilated kernel (a 3x3 kernel
at dilation 36 becomes 73x73, zeros between the taps) and unrolling the input for it (im2col):
DeepLabV3's ASPP head (dilations 12/24/36) grew the evaluator past 22 GB. ``Conv`` here computes a
dilated convolution tap by tap (one matrix product per kernel element on a strided view of the
padded input), so it takes the input, the output and one tap's window; undilated convolutions go to
onnx's op unchanged.

This module must not import onnx at deploykit's import time: the backend imports it lazily.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx.reference.ops.op_conv import Conv as _OnnxConv
from onnx.reference.ops.op_max_pool import MaxPool as _OnnxMaxPool

from deploykit.model import walk_nodes


def _all_ones(values: Sequence[int] | None) -> bool:
    return values is None or all(int(v) == 1 for v in values)


def onnx_misreads_pads(
    x_ndim: int,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    auto_pad: str | None,
) -> bool:
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
        self,
        x: np.ndarray,
        auto_pad: Any = None,
        ceil_mode: Any = None,
        dilations: Any = None,
        kernel_shape: Any = None,
        pads: Any = None,
        storage_order: Any = None,
        strides: Any = None,
    ) -> Any:
        if len(self.output) == 1 and onnx_misreads_pads(x.ndim, pads, strides, dilations, auto_pad):
            spatial = x.ndim - 2
            widths = [(0, 0), (0, 0)] + [(int(pads[i]), int(pads[i + spatial])) for i in range(spatial)]
            x, pads = np.pad(x, widths, constant_values=np.nan), [0] * (2 * spatial)
        return super()._run(
            x,
            auto_pad=auto_pad,
            ceil_mode=ceil_mode,
            dilations=dilations,
            kernel_shape=kernel_shape,
            pads=pads,
            storage_order=storage_order,
            strides=strides,
        )


def _resolved_pads(
    sizes: Sequence[int], auto_pad: Any, pads: Any, strides: Sequence[int], extents: Sequence[int]
) -> list[int]:
    """Explicit pads ([begin..., end...]) as the spec computes them for ``auto_pad``, with each axis's
    kernel extent ``(k - 1) * dilation + 1``."""
    mode = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if mode == "VALID":
        return [0] * (2 * len(sizes))
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, stride, extent in zip(sizes, strides, extents, strict=True):
            needed = max(0, (-(-size // stride) - 1) * stride + extent - size)
            first = (needed + 1) // 2 if mode == "SAME_LOWER" else needed // 2
            begin.append(first)
            end.append(needed - first)
        return begin + end
    return [int(p) for p in pads] if pads is not None else [0] * (2 * len(sizes))


def dilated_conv(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    auto_pad: Any,
    dilations: Sequence[int],
    group: int,
    pads: Any,
    strides: Any,
) -> np.ndarray:
    """A grouped, strided, dilated N-d convolution, summed over kernel taps: no dilated kernel, no im2col."""
    spatial = x.ndim - 2
    kernel = tuple(int(k) for k in w.shape[2:])
    strides = [int(s) for s in strides] if strides is not None else [1] * spatial
    dilations = [int(d) for d in dilations]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    pads = _resolved_pads(x.shape[2:], auto_pad, pads, strides, extents)
    padded = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + spatial]) for i in range(spatial)])
    out_shape = [(padded.shape[2 + i] - extents[i]) // strides[i] + 1 for i in range(spatial)]
    batch, channels, outputs = x.shape[0], x.shape[1], w.shape[0]
    grouped = padded.reshape(batch, group, channels // group, *padded.shape[2:])
    weights = w.reshape(group, outputs // group, channels // group, *kernel)
    result = np.zeros((batch, group, outputs // group, int(np.prod(out_shape))), dtype=x.dtype)
    for tap in np.ndindex(*kernel):
        window = tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s)
            for t, d, o, s in zip(tap, dilations, out_shape, strides, strict=True)
        )
        taken = grouped[(slice(None), slice(None), slice(None), *window)].reshape(batch, group, channels // group, -1)
        result += weights[(slice(None), slice(None), slice(None), *tap)] @ taken
    result = result.reshape(batch, outputs, *out_shape)
    if b is not None:
        result += b.reshape(1, -1, *([1] * spatial)).astype(result.dtype)
    return result


class Conv(_OnnxConv):
    """onnx's Conv, with dilated convolutions computed tap by tap (``dilated_conv``)."""

    def _run(
        self,
        X: np.ndarray,
        W: np.ndarray,
        B: np.ndarray | None = None,
        auto_pad: Any = None,
        dilations: Any = None,
        group: Any = None,
        kernel_shape: Any = None,
        pads: Any = None,
        strides: Any = None,
    ) -> Any:
        if X.ndim < 3 or _all_ones(dilations) or (kernel_shape is not None and tuple(kernel_shape) != W.shape[2:]):
            return super()._run(
                X,
                W,
                B,
                auto_pad=auto_pad,
                dilations=dilations,
                group=group,
                kernel_shape=kernel_shape,
                pads=pads,
                strides=strides,
            )
        return (dilated_conv(X, W, B, auto_pad, dilations, int(group or 1), pads, strides).astype(X.dtype),)


REFERENCE_OPS: list[type] = [MaxPool, Conv]
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
