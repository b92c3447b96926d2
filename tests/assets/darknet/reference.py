"""Darknet's CPU kernels transcribed loop for loop from its C sources (blas.c, maxpool_layer.c,
activations.c), as an independent check of the ONNX forms. Slow on purpose: no vectorised tricks."""

from __future__ import annotations

import math

import numpy as np


def maxpool(x: np.ndarray, size: int, stride: int, padding: int) -> np.ndarray:
    c, h, w = x.shape
    out_h = (h + padding - size) // stride + 1
    out_w = (w + padding - size) // stride + 1
    offset = -(padding // 2)
    out = np.empty((c, out_h, out_w), np.float32)
    for k in range(c):
        for i in range(out_h):
            for j in range(out_w):
                best = -math.inf
                for n in range(size):
                    for m in range(size):
                        cur_h, cur_w = offset + i * stride + n, offset + j * stride + m
                        if 0 <= cur_h < h and 0 <= cur_w < w:
                            best = max(best, x[k, cur_h, cur_w])
                out[k, i, j] = best
    return out


def reorg_cpu(x: np.ndarray, w: int, h: int, c: int, stride: int, forward: int) -> np.ndarray:
    """blas.c reorg_cpu for batch 1, on flat buffers."""
    flat = x.ravel()
    out = np.empty_like(flat)
    out_c = c // (stride * stride)
    for k in range(c):
        for j in range(h):
            for i in range(w):
                in_index = i + w * (j + h * k)
                c2 = k % out_c
                offset = k // out_c
                w2 = i * stride + offset % stride
                h2 = j * stride + offset // stride
                out_index = w2 + w * stride * (h2 + h * stride * c2)
                if forward:
                    out[out_index] = flat[in_index]
                else:
                    out[in_index] = flat[out_index]
    return out


def shortcut(out: np.ndarray, add: np.ndarray, s1: float = 1.0, s2: float = 1.0) -> np.ndarray:
    """blas.c shortcut_cpu: out (c2, h2, w2) += add (c1, h1, w1), strided and channel-clipped."""
    c1, h1, w1 = add.shape
    c2, h2, w2 = out.shape
    stride, sample = max(w1 // w2, 1), max(w2 // w1, 1)
    result = out.copy()
    for k in range(min(c1, c2)):
        for j in range(min(h1, h2)):
            for i in range(min(w1, w2)):
                result[k, j * sample, i * sample] = (
                    s1 * out[k, j * sample, i * sample] + s2 * add[k, j * stride, i * stride]
                )
    return result


def upsample(x: np.ndarray, stride: int, scale: float) -> np.ndarray:
    c, h, w = x.shape
    out = np.empty((c, h * stride, w * stride), np.float32)
    for k in range(c):
        for j in range(h * stride):
            for i in range(w * stride):
                out[k, j, i] = scale * x[k, j // stride, i // stride]
    return out


def activate(x: float, name: str) -> float:
    """activations.h, one value at a time."""
    if name == "linear":
        return x
    if name == "logistic":
        return 1.0 / (1.0 + math.exp(-x))
    if name == "leaky":
        return x if x > 0 else 0.1 * x
    if name == "relu":
        return x * (x > 0)
    if name == "relu6":
        return min(max(x, 0.0), 6.0)
    if name == "relie":
        return x if x > 0 else 0.01 * x
    if name == "ramp":
        return x * (x > 0) + 0.1 * x
    if name == "loggy":
        return 2.0 / (1.0 + math.exp(-x)) - 1
    if name == "tanh":
        return (math.exp(2 * x) - 1) / (math.exp(2 * x) + 1)
    if name == "hardtan":
        return -1.0 if x < -1 else 1.0 if x > 1 else x
    if name == "elu":
        return (x >= 0) * x + (x < 0) * (math.exp(x) - 1)
    if name == "selu":
        return (x >= 0) * 1.0507 * x + (x < 0) * 1.0507 * 1.6732 * (math.exp(x) - 1)
    if name == "gelu":
        return 0.5 * x * (1 + math.tanh(0.797885 * x + 0.035677 * x**3))
    if name == "swish":
        return x / (1.0 + math.exp(-x))
    if name == "mish":
        softplus = x if x > 20 else (math.exp(x) if x < -20 else math.log1p(math.exp(x)))
        return x * math.tanh(softplus)
    if name == "hard_mish":
        return x if x > 0 else (x * x / 2 + x if x > -2 else 0.0)
    if name in ("hardswish", "hard_swish"):
        return x * min(max(x + 3, 0.0), 6.0) / 6
    raise ValueError(name)
