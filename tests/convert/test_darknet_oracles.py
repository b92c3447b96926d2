"""Darknet → ONNX against independent implementations: Darknet itself (Debian's libdarknet through a
small C program) and OpenCV 4.x's readNetFromDarknet (in the CI pass that puts OpenCV 4.14 first)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

import deploykit
from deploykit.convert.darknet.convert import convert_darknet, load_network
from deploykit.convert.darknet.weights import write_random_weights
from deploykit.errors import ConversionError
from deploykit.vision.yolo import decode_heads
from tests.assets.paths import DARKNET_CFG, REPO, missing_asset, require_opencv4

MODELS = REPO / "models" / "darknet"
RAW_ATOL = 1e-4


@pytest.fixture(scope="session")
def darknet_reference():
    """Darknet's own library through deploykit's C helper (compiled on first use)."""
    from deploykit.convert.darknet import reference

    reason = reference.unavailable_reason()
    if reason:
        missing_asset("the Darknet reference", reason)
    reference.helper_binary()
    return reference


def _resized_cfg(source: Path, directory: Path, size: tuple[int, int] | None) -> Path:
    """A copy of ``source`` with the [net] input size (width, height) replaced."""
    text = source.read_text()
    if size:
        text = re.sub(r"(?m)^\s*width\s*=.*$", f"width={size[0]}", text)
        text = re.sub(r"(?m)^\s*height\s*=.*$", f"height={size[1]}", text)
    cfg = directory / source.name
    cfg.write_text(text)
    return cfg


DARKNET_CASES = [
    (DARKNET_CFG / "yolov2-tiny.cfg", None),
    (DARKNET_CFG / "yolov2.cfg", 256),  # reorg + region
    (DARKNET_CFG / "yolov3-tiny.cfg", None),
    (DARKNET_CFG / "yolov3.cfg", 224),
    (DARKNET_CFG / "yolov3-spp.cfg", 192),  # SPP maxpools
    (DARKNET_CFG / "tiny.cfg", None),  # classifier: avgpool + softmax
    (DARKNET_CFG / "alexnet.cfg", None),  # connected + dropout
    (DARKNET_CFG / "resnet18.cfg", 128),  # strided shortcuts
    (MODELS / "yolov2-tiny.cfg", None),
    (MODELS / "yolov3-tiny.cfg", None),
    (MODELS / "yolov3.cfg", 160),
]


@pytest.mark.slow
@pytest.mark.parametrize(("source", "size"), DARKNET_CASES, ids=[f"{c.parent.name}/{c.name}" for c, _ in DARKNET_CASES])
def test_raw_outputs_match_darknet(darknet_reference, tmp_path, source, size):
    if not source.is_file():
        missing_asset(f"{source}", "apt-get install darknet")
    cfg = _resized_cfg(source, tmp_path, (size, size) if size else None)
    net = load_network(cfg)
    weights = tmp_path / "random.weights"
    write_random_weights(net, weights, seed=11)
    onnx_path = tmp_path / "model.onnx"
    convert_darknet(cfg, weights, onnx_path, head="raw", verify_backends=[])
    finals = net.heads() or [net.layers[-1]]
    image = np.random.default_rng(0).uniform(0, 1, (1, net.channels, net.height, net.width)).astype(np.float32)
    expected = darknet_reference.darknet_outputs(cfg, weights, image, [layer.index for layer in finals])
    with deploykit.load(onnx_path) as session:
        ours = session.run({"images": image})
    for layer in finals:
        got = ours[f"{layer.type}_{layer.index}"].ravel()
        want = expected[layer.index]
        assert got.shape == want.shape
        error = float(np.max(np.abs(got - want)))
        assert error <= RAW_ATOL, (
            f"{layer.type}_{layer.index}: max abs error {error:.3g} (values up to {np.abs(want).max():.3g})"
        )
        assert np.std(want) > 0.05 * np.abs(want).mean(), "the test weights must produce outputs that vary"


# --- OpenCV 4.x: the importer OpenCV 5 removed ------------------------------------------------------------------

OPENCV_CASES = [
    (name, None) for name in ("yolov2-tiny", "yolov3-tiny", "yolov3", "yolov4-tiny", "yolov4", "yolov7-tiny")
]
OPENCV_CASES.append(("yolov4-tiny", (320, 192)))  # non-square


def _assert_heads_match_opencv4(cv2, cfg: Path, opencv_cfg: Path, weights: Path, directory: Path,
                                input_size: tuple[int, int] | None = None) -> None:  # fmt: skip
    """Our raw and decoded heads against OpenCV 4.x's Darknet importer reading ``opencv_cfg``."""
    raw_path, decoded_path = directory / "raw.onnx", directory / "decoded.onnx"
    convert_darknet(cfg, weights, raw_path, head="raw", input_size=input_size, verify_backends=[])
    convert_darknet(cfg, weights, decoded_path, head="decoded", input_size=input_size, verify_backends=[])
    net = load_network(opencv_cfg)
    image = np.random.default_rng(1).uniform(0, 1, (1, 3, net.height, net.width)).astype(np.float32)
    reader = cv2.dnn.readNetFromDarknet(str(opencv_cfg), str(weights))
    reader.setInput(image)
    names = list(reader.getUnconnectedOutLayersNames())
    expected = np.concatenate([o.reshape(1, -1, 85) for o in reader.forward(names)], axis=1)
    heads = json.loads({p.key: p.value for p in onnx.load(str(raw_path)).metadata_props}["deploykit.darknet.heads"])
    with deploykit.load(raw_path) as raw_session, deploykit.load(decoded_path) as decoded_session:
        from_raw = decode_heads(raw_session.run({"images": image}), heads)
        decoded = decoded_session.run({"images": image})["detections"]
    np.testing.assert_allclose(decoded, from_raw, rtol=1e-5, atol=1e-5)
    # OpenCV zeroes class scores at or below a threshold: 0.2 for [yolo], the cfg's thresh= for [region]
    threshold = max(head["opencv_threshold"] for head in heads)
    zeroed = expected[..., 5:] == 0
    assert not np.any(zeroed & (decoded[..., 5:] > threshold + 1e-4))
    ours = decoded.copy()
    ours[..., 5:][zeroed] = 0
    np.testing.assert_allclose(ours, expected, rtol=1e-3, atol=1e-4)


@pytest.mark.slow
@pytest.mark.opencv4
@pytest.mark.parametrize(("name", "size"), OPENCV_CASES, ids=[f"{n}-{s}" for n, s in OPENCV_CASES])
def test_heads_match_opencv4_darknet(tmp_path, name, size):
    cv2 = require_opencv4()
    cfg = _resized_cfg(MODELS / f"{name}.cfg", tmp_path, size)
    weights = tmp_path / f"{name}.weights"
    write_random_weights(load_network(cfg), weights, seed=7)
    _assert_heads_match_opencv4(cv2, cfg, cfg, weights, tmp_path)


def _squeeze_excitation_cfg(directory: Path) -> Path:
    """A small YOLO whose every stage ends in a squeeze-excitation block (global [avgpool], two 1x1
    convolutions, [scale_channels]), as in EfficientNet-based YOLOs; native size 416."""
    stages = []
    for filters in (16, 32, 64, 128, 256):
        stages.append(
            f"[convolutional]\nbatch_normalize=1\nfilters={filters}\nsize=3\nstride=2\npad=1\nactivation=leaky\n\n"
            f"[avgpool]\n\n[convolutional]\nfilters={filters // 4}\nsize=1\nstride=1\nactivation=leaky\n\n"
            f"[convolutional]\nfilters={filters}\nsize=1\nstride=1\nactivation=logistic\n\n"
            "[scale_channels]\nfrom=-4\n"
        )
    head = (
        "[convolutional]\nfilters=255\nsize=1\nstride=1\npad=1\nactivation=linear\n\n"
        "[yolo]\nmask=0,1,2\nanchors=10,14, 23,27, 37,58\nclasses=80\nnum=3\n"
    )
    cfg = directory / "se-yolo.cfg"
    cfg.write_text("[net]\nwidth=416\nheight=416\nchannels=3\n\n" + "\n".join(stages) + "\n" + head)
    return cfg


def test_global_avgpool_is_not_a_stride(tmp_path):
    cfg = _squeeze_excitation_cfg(tmp_path)
    assert load_network(cfg).stride() == 32
    assert load_network(cfg, (320, 256)).layers[-1].out_shape == (255, 8, 10)
    with pytest.raises(ConversionError) as caught:
        load_network(cfg, (330, 320))
    assert "input size 330x320 | is not a multiple of the network stride 32." in str(caught.value)


@pytest.mark.slow
@pytest.mark.opencv4
@pytest.mark.parametrize("size", [(320, 320), (320, 256)], ids=["320x320", "320x256"])
def test_squeeze_excitation_at_other_sizes_matches_opencv4(tmp_path, size):
    cv2 = require_opencv4()
    cfg = _squeeze_excitation_cfg(tmp_path)
    weights = tmp_path / "se.weights"
    write_random_weights(load_network(cfg), weights, seed=5)
    (tmp_path / "opencv").mkdir()
    resized = _resized_cfg(cfg, tmp_path / "opencv", size)
    _assert_heads_match_opencv4(cv2, cfg, resized, weights, tmp_path, input_size=size)


@pytest.mark.slow
@pytest.mark.opencv4
def test_opencv_threshold_option_matches_opencv_rows_exactly(tmp_path):
    cv2 = require_opencv4()
    cfg = MODELS / "yolov4-tiny.cfg"
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=3)
    out = tmp_path / "m.onnx"
    report = convert_darknet(cfg, weights, out, head="decoded", opencv_threshold=0.2, verify_backends=["onnxruntime"])
    assert report.passed and re.match(r"oracle: opencv(-darknet)? 4\.", report.notes[0], re.IGNORECASE), report.notes
    image = np.random.default_rng(2).uniform(0, 1, (1, 3, 416, 416)).astype(np.float32)
    reader = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
    reader.setInput(image)
    expected = np.concatenate(
        [o.reshape(1, -1, 85) for o in reader.forward(reader.getUnconnectedOutLayersNames())], axis=1
    )
    with deploykit.load(out) as session:
        ours = session.run({"images": image})["detections"]
    clear = np.abs(ours[..., 5:] - 0.2) > 1e-4  # scores within float noise of the threshold may fall either way
    assert np.array_equal((ours[..., 5:] > 0)[clear], (expected[..., 5:] > 0)[clear])
    np.testing.assert_allclose(ours[..., 5:][clear], expected[..., 5:][clear], atol=1e-4)
    np.testing.assert_allclose(ours[..., :5], expected[..., :5], rtol=1e-3, atol=1e-4)


def test_converted_model_runs_on_every_backend(tmp_path):
    cfg = MODELS / "yolov4-tiny.cfg"
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=4)
    report = convert_darknet(
        cfg, weights, tmp_path / "m.onnx", head="decoded", verify_backends=["onnxruntime", "openvino", "opencv"]
    )
    assert report.passed, [v.describe() for v in report.verdicts]
    assert [v.candidate for v in report.verdicts] == ["onnxruntime", "openvino", "opencv"]
