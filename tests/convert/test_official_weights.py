"""Real detectors: the official YOLOv4-tiny and YOLOv3-tiny (Darknet-trained COCO weights that ship in
registry packages), built by the recipes and checked against implementations that share no code with
deploykit: OpenCV 4.x's readNetFromDarknet with OpenCV's own decoding and NMS (the pytest-opencv4 pass),
and Darknet itself (Debian's libdarknet)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

import deploykit
from deploykit.backends.registry import BUILTIN_BACKENDS, get_backend
from deploykit.cli.main import app
from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
from deploykit.recipes import build
from deploykit.vision.nms import iou_one_to_many
from deploykit.vision.results import Detection
from tests.assets.paths import (
    darknet_image,
    missing_asset,
    official_darknet,
    require_opencv4,
    yolov4_detector_photo,
)

# What a person sees in the photos (Darknet's README shows dog.jpg; bus.jpg is Ultralytics' sample).
PHOTOS = {"dog.jpg": {"dog", "bicycle"}, "bus.jpg": {"bus", "person"}}
CONF, NMS_IOU = 0.25, 0.45
# the runtimes a user deploys on (the reference evaluator is an oracle, and far too slow for these models)
RUNTIMES = [name for name in BUILTIN_BACKENDS if get_backend(name).search.default_candidate]


def _photo(name: str) -> Path:
    return darknet_image(name) if name == "dog.jpg" else yolov4_detector_photo(name)


@pytest.fixture(scope="module")
def yolov4_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    official_darknet("yolov4-tiny")  # a missing package is named here, not as a build error
    model = tmp_path_factory.mktemp("official") / "yolov4-tiny.onnx"
    build("yolov4-tiny", model, verify_backends=[])
    return model


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return float(iou_one_to_many(np.array(a), np.array([b]))[0])


def _assert_same_objects(ours: list[Detection], theirs: list[tuple[str, tuple[float, ...]]], min_iou: float,
                         what: str) -> None:  # fmt: skip
    """One-to-one: every box of ``theirs`` has a box of ours with the same label at IoU >= min_iou."""
    assert len(ours) == len(theirs), f"{what}: {[d.label for d in ours]} vs {[label for label, _ in theirs]}"
    unused = list(ours)
    for label, box in theirs:
        candidates = [d for d in unused if d.label == label]
        best = max(candidates, key=lambda d: _iou(d.xyxy, box), default=None)
        assert best is not None and _iou(best.xyxy, box) >= min_iou, f"{what}: no {label} at {box} in {ours}"
        unused.remove(best)


@pytest.mark.slow
@pytest.mark.parametrize("photo", PHOTOS)
def test_yolov4_tiny_finds_the_same_objects_on_every_backend(yolov4_tiny, photo):
    image = cv2.imread(str(_photo(photo)))
    results = {}
    for name in RUNTIMES:
        backend = get_backend(name)
        if backend.unavailable_reason():
            missing_asset(f"the {name} backend's runtime", str(backend.unavailable_reason()))
        with deploykit.Detector(yolov4_tiny, name, **backend.precision_options("f32")) as detector:
            assert detector.labels[16] == "dog", "coco.names travels in the model's metadata"
            results[name] = detector(image)
    reference = results["onnxruntime"]
    assert PHOTOS[photo] <= {d.label for d in reference}, reference
    for name, detections in results.items():
        _assert_same_objects(detections, [(d.label, d.xyxy) for d in reference], 0.9, f"{name} on {photo}")


def _opencv4_detections(cv2_4, cfg: Path, weights: Path, names: list[str], image: np.ndarray):
    """OpenCV's own YOLO pipeline (as in its object_detection sample): stretch to 416x416, forward, keep
    class scores above CONF, class-aware NMS with NMSBoxesBatched, boxes in image pixels."""
    net = cv2_4.dnn.readNetFromDarknet(str(cfg), str(weights))
    net.setInput(cv2_4.dnn.blobFromImage(image, 1 / 255, (416, 416), swapRB=True, crop=False))
    rows = np.concatenate([o.reshape(-1, 85) for o in net.forward(net.getUnconnectedOutLayersNames())])
    class_ids = rows[:, 5:].argmax(axis=1)
    scores = rows[np.arange(len(rows)), 5 + class_ids]
    keep = scores > CONF
    rows, class_ids, scores = rows[keep], class_ids[keep], scores[keep]
    height, width = image.shape[:2]
    boxes = [
        [float((cx - w / 2) * width), float((cy - h / 2) * height), float(w * width), float(h * height)]
        for cx, cy, w, h in rows[:, :4]
    ]
    kept = cv2_4.dnn.NMSBoxesBatched(boxes, scores.tolist(), class_ids.tolist(), CONF, NMS_IOU)
    return [
        (names[class_ids[i]], (boxes[i][0], boxes[i][1], boxes[i][0] + boxes[i][2], boxes[i][1] + boxes[i][3]))
        for i in np.array(kept).reshape(-1)
    ]


@pytest.mark.slow
@pytest.mark.opencv4
@pytest.mark.parametrize("photo", PHOTOS)
def test_yolov4_tiny_detections_match_opencv4_darknet(yolov4_tiny, photo):
    """OpenCV reads the package's own cfg and weights; we run the recipe's ONNX with the same stretch resize."""
    cv2_4 = require_opencv4()
    cfg, weights, names_file = official_darknet("yolov4-tiny")
    names = [line.strip() for line in names_file.read_text().splitlines() if line.strip()]
    image = cv2.imread(str(_photo(photo)))
    theirs = _opencv4_detections(cv2_4, cfg, weights, names, image)
    assert PHOTOS[photo] <= {label for label, _ in theirs}, theirs
    with deploykit.Detector(
        yolov4_tiny, conf=CONF, iou=NMS_IOU, preprocess=deploykit.PreprocessOverrides(resize="stretch")
    ) as detector:
        ours = detector(image)
    _assert_same_objects(ours, theirs, 0.9, f"OpenCV {cv2_4.__version__} on {photo}")


@pytest.mark.slow
def test_yolov3_tiny_raw_outputs_match_libdarknet(tmp_path):
    """The package's cfg and weights, converted as a user would, against Darknet's own forward pass on a photo."""
    from deploykit.testing import darknet as reference

    cfg, weights, _ = official_darknet("yolov3-tiny")
    reason = reference.unavailable_reason()
    if reason:
        missing_asset("the Darknet reference (Debian's libdarknet)", reason)
    model = tmp_path / "yolov3-tiny-raw.onnx"
    convert_darknet(cfg, weights, model, verify_backends=[], export=DarknetExportSettings(head="raw"))
    net = load_network(cfg)
    photo = cv2.resize(cv2.imread(str(darknet_image("dog.jpg"))), (net.width, net.height))
    image = (photo[:, :, ::-1].transpose(2, 0, 1)[None] / 255).astype(np.float32)
    heads = net.heads()
    expected = reference.darknet_outputs(cfg, weights, image, [layer.index for layer in heads])
    for name in RUNTIMES:
        backend = get_backend(name)
        if backend.unavailable_reason():
            missing_asset(f"the {name} backend's runtime", str(backend.unavailable_reason()))
        with deploykit.load(model, name, **backend.precision_options("f32")) as session:
            ours = session.run({"images": image})
        for layer in heads:
            got, want = ours[f"yolo_{layer.index}"].ravel(), expected[layer.index]
            error = float(np.max(np.abs(got - want)))
            assert error <= 1e-4, (
                f"{name} yolo_{layer.index}: max abs error {error:.3g} (values up to {abs(want).max():.3g})"
            )
            objectness = want.reshape(3, 85, -1)[:, 4]
            assert objectness.max() > 0.5, "a trained network is confident about something in dog.jpg"


def test_predict_prints_class_names(yolov4_tiny, tmp_path):
    result = CliRunner().invoke(app, ["predict", str(yolov4_tiny), str(_photo("dog.jpg")), "-o",
                                      str(tmp_path / "dog.json")])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "dog" in result.stdout and "bicycle" in result.stdout and "class_16" not in result.stdout
    labels = {row["label"] for row in json.loads((tmp_path / "dog.json").read_text())["results"]}
    assert {"dog", "bicycle"} <= labels
