"""Models and photos for the quantization tests: small graphs built in code, the MobileNetV2 recipe
with its real ImageNet weights, nudenet's YOLOv8n, and real photos that ship with Debian's darknet
and scikit-image."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.assets.paths import darknet_image, mobilenet_v2_weights, package_file

DARKNET_PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "kite.jpg", "person.jpg", "scream.jpg")
SKIMAGE_PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png")


def skimage_photo(name: str) -> Path:
    return package_file("skimage", f"data/{name}", f"scikit-image's sample photo {name}", "scikit-image")


@pytest.fixture(scope="session")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 real photos in one folder."""
    folder = tmp_path_factory.mktemp("photos")
    for source in [darknet_image(n) for n in DARKNET_PHOTOS] + [skimage_photo(n) for n in SKIMAGE_PHOTOS]:
        shutil.copy(source, folder / source.name)
    return folder


@pytest.fixture(scope="session")
def mobilenet_v2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MobileNetV2 recipe built from torchvision's ImageNet weights (metadata: mean/std, labels)."""
    from deploykit.recipes import build

    mobilenet_v2_weights()
    path = tmp_path_factory.mktemp("mobilenet") / "mobilenet_v2.onnx"
    build("mobilenet_v2", path, verify_backends=("onnxruntime",))
    return path


def conv_classifier(channels: int = 3, size: int = 32, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """Conv → Relu → Conv → Relu → GlobalAveragePool → Flatten → Gemm: a small image classifier
    with random weights, stretched 32×32 RGB input in [0, 1] (metadata as a converter writes it)."""
    rng = np.random.default_rng(seed)
    weights = {
        "w1": rng.normal(0, 0.5, (8, channels, 3, 3)), "b1": rng.normal(0, 0.1, 8),
        "w2": rng.normal(0, 0.3, (16, 8, 3, 3)), "b2": rng.normal(0, 0.1, 16),
        "w3": rng.normal(0, 0.5, (classes, 16)), "b3": rng.normal(0, 0.1, classes),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["images", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["pool"], name="pool"),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "w3", "b3"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "conv_classifier",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, channels, size, size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.metadata_props.add(key="deploykit.input", value=json.dumps({"size": [size, size], "resize": "stretch"}))
    return model


@pytest.fixture(scope="session")
def classifier_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "classifier.onnx"
    onnx.save(conv_classifier(), path)
    return path


@pytest.fixture(scope="session")
def classifier_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 samples of images in [0, 1] for the tiny classifier."""
    path = tmp_path_factory.mktemp("arrays") / "calibration.npz"
    np.savez(path, images=np.random.default_rng(1).uniform(0, 1, (12, 3, 32, 32)).astype(np.float32))
    return path
