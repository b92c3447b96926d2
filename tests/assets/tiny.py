"""Tiny assets built in code for the hostile-input tests and the CLI fuzzer: fast to convert and run.

A classifier and a dynamic-batch ONNX model, a one-class YOLO Darknet cfg with random weights,
a PyTorch factory (this file is also ``tests/assets/tiny.py:tiny_cnn``), a labels file, images
and an .npz of inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

TINY_CFG = """[net]
width=32
height=32
channels=3

[convolutional]
batch_normalize=1
filters=4
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
filters=18
size=1
stride=1
pad=1
activation=linear

[yolo]
mask=0,1,2
anchors=4,6, 8,9, 12,14
classes=1
num=3
"""


def classifier_model() -> object:
    """images float32 (1, 3, 16, 16) → probabilities (1, 5): global average pool, MatMul, Softmax."""
    rng = np.random.default_rng(3)
    weight = numpy_helper.from_array(rng.normal(0, 1, (3, 5)).astype(np.float32), "w")
    nodes = [
        helper.make_node("GlobalAveragePool", ["images"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probabilities"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [1, 5])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in (("deploykit.task", "classify"), ("deploykit.labels", '["a", "b", "c", "d", "e"]')):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    return model


def dynamic_model() -> object:
    """x float32 (batch, 4) → y = relu(x) (batch, 4)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "tiny_dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def tiny_cnn() -> object:
    """The PyTorch factory: a conv + linear network on (1, 3, 8, 8) images."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
    )


def write_image(path: Path, size: tuple[int, int] = (24, 32)) -> Path:
    import cv2

    image = np.random.default_rng(0).integers(0, 256, (*size, 3), dtype=np.uint8)
    if not cv2.imwrite(str(path), image):
        raise RuntimeError(f"cannot write {path}")
    return path


def build_all(directory: Path) -> dict[str, Path]:
    """Write every tiny asset into ``directory``; name → path."""
    from deploykit.convert.darknet.convert import load_network
    from deploykit.convert.darknet.weights import write_random_weights

    paths = {
        "classifier": directory / "classifier.onnx",
        "dynamic": directory / "dynamic.onnx",
        "cfg": directory / "tiny.cfg",
        "weights": directory / "tiny.weights",
        "labels": directory / "tiny.names",
        "image": directory / "image.jpg",
        "png": directory / "image.png",
        "npz": directory / "inputs.npz",
        "factory": Path(__file__),
        "state_dict": directory / "tiny_cnn.pth",
    }
    save(classifier_model(), paths["classifier"])
    save(dynamic_model(), paths["dynamic"])
    paths["cfg"].write_text(TINY_CFG)
    write_random_weights(load_network(paths["cfg"]), paths["weights"], seed=1)
    paths["labels"].write_text("thing\n")
    write_image(paths["image"])
    write_image(paths["png"])
    np.savez(paths["npz"], x=np.ones((2, 4), np.float32))
    try:
        import torch

        torch.save(tiny_cnn().state_dict(), paths["state_dict"])  # type: ignore[attr-defined]
    except ImportError:
        del paths["state_dict"]
    return paths
