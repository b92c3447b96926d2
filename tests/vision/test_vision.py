"""Pre/post-processing and the task pipelines, on real models and real photos."""

from __future__ import annotations

import json
import threading

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

import deploykit
from deploykit.backends.registry import get_backend
from deploykit.cli.main import app
from deploykit.errors import InputError, UsageError
from deploykit.vision.image import check_image, letterbox, load_image, stretch, to_tensor
from deploykit.vision.nms import iou_one_to_many, nms
from deploykit.vision.preprocess import PreprocessOverrides
from deploykit.vision.results import Detection
from tests.assets.paths import (
    REPO,
    darknet_image,
    mobilenet_v2_weights,
    nudenet_model,
    require_module,
    yolov4_detector_photo,
)


@pytest.mark.parametrize("size", [(416, 416), (320, 640), (640, 320)])
@pytest.mark.parametrize("shape", [(720, 1280), (480, 300), (100, 100)])
def test_letterbox_round_trip_within_one_pixel(shape, size):
    image = np.zeros((*shape, 3), np.uint8)
    box = np.array([shape[1] * 0.2, shape[0] * 0.3, shape[1] * 0.6, shape[0] * 0.9])
    x1, y1, x2, y2 = box.round().astype(int)
    image[y1:y2, x1:x2] = 255
    for transform in (lambda i: letterbox(i, size, pad_value=0), lambda i: stretch(i, size)):
        canvas, placement = transform(image)
        assert canvas.shape == (*size, 3)
        ys, xs = np.nonzero(canvas[..., 0] > 127)
        found = np.array([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1], np.float32)
        back = placement.to_original(found)[0]
        assert np.abs(back - [x1, y1, x2, y2]).max() <= 1.0 + 1 / placement.scale_x


def test_letterbox_pads_evenly_and_clips_boxes():
    canvas, placement = letterbox(np.full((100, 200, 3), 200, np.uint8), (416, 416), pad_value=114)
    assert placement.pad_y == 104 and placement.pad_x == 0
    assert (canvas[:104] == 114).all() and (canvas[-104:] == 114).all()
    np.testing.assert_allclose(placement.to_original([[-50, 0, 500, 416]]), [[0, 0, 200, 100]])


def test_to_tensor_bgr_to_rgb_and_normalise():
    image = np.zeros((2, 2, 3), np.uint8)
    image[..., 0], image[..., 2] = 255, 51  # blue, red
    tensor = to_tensor([image], channel_order="RGB", mean=(0.1, 0.0, 0.0), std=(0.5, 1, 1))
    assert tensor.shape == (1, 3, 2, 2) and tensor.dtype == np.float32
    np.testing.assert_allclose(tensor[0, :, 0, 0], [(0.2 - 0.1) / 0.5, 0.0, 1.0], rtol=1e-6)


def _brute_force_nms(boxes, scores, classes, iou):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    keep = []
    for i in order:
        if all(classes[i] != classes[k] or iou_one_to_many(boxes[k], boxes[i : i + 1])[0] <= iou for k in keep):
            keep.append(i)
    return keep


@pytest.mark.parametrize("seed", range(5))
def test_nms_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 300, (400, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(10, 80, (400, 2))], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, 400).astype(np.float32)
    classes = rng.integers(0, 3, 400)
    assert list(nms(boxes, scores, classes, iou=0.5, max_detections=1000)) == _brute_force_nms(
        boxes, scores, classes, 0.5
    )
    agnostic = _brute_force_nms(boxes, scores, np.zeros(400, int), 0.5)
    assert list(nms(boxes, scores, None, iou=0.5, max_detections=1000)) == agnostic
    assert list(nms(boxes, scores, None, iou=0.5, max_detections=5)) == agnostic[:5]


def test_every_nms_engine_gives_the_same_answer(monkeypatch):
    from deploykit.vision import nms as module

    rng = np.random.default_rng(7)
    xy = rng.uniform(0, 100, (300, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 40, (300, 2))], axis=1).astype(np.float32)
    scores = rng.uniform(0, 1, 300).astype(np.float32)
    classes = rng.integers(0, 4, 300)
    expected = _brute_force_nms(boxes, scores, classes, 0.45)
    assert list(nms(boxes, scores, classes, max_detections=1000)) == expected  # ONNX Runtime's kernel
    monkeypatch.setattr(module, "_onnxruntime_nms", lambda: None)
    assert list(nms(boxes, scores, classes, max_detections=1000)) == expected  # OpenCV
    monkeypatch.setitem(__import__("sys").modules, "cv2", None)
    assert list(nms(boxes, scores, classes, max_detections=1000)) == expected  # numpy


def test_nms_ties_keep_the_lower_index_on_every_engine(monkeypatch):
    """Equal scores: the box given first wins, whichever engine runs (the order callers rely on)."""
    from deploykit.vision import nms as module

    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60], [0, 0, 10, 10], [51, 51, 61, 61]], np.float32)
    scores = np.array([0.5, 0.5, 0.5, 0.9, 0.5], np.float32)
    classes = np.array([0, 0, 1, 1, 1])
    expected = [3, 0, 2]
    assert list(nms(boxes, scores, classes)) == expected  # ONNX Runtime's kernel
    monkeypatch.setattr(module, "_onnxruntime_nms", lambda: None)
    assert list(nms(boxes, scores, classes)) == expected  # OpenCV
    monkeypatch.setitem(__import__("sys").modules, "cv2", None)
    assert list(nms(boxes, scores, classes)) == expected  # numpy


@pytest.mark.parametrize("name", ["dog.jpg", "person.jpg", "scream.jpg"])
def test_prepare_equals_the_padded_canvas_path_bit_for_bit(name):
    """``Preprocess.prepare`` writes the resized pixels straight into the tensor; the tensor is the one that
    padding a canvas (OpenCV) and converting it whole (``blobFromImages``) gives, for every setting, and
    the same when the tensor is a reused one from a ring."""
    from deploykit.vision.image import Preprocess, TensorRing

    photo = load_image(darknet_image(name))
    frames = [photo, cv2.resize(photo, (1280, 720)), np.ascontiguousarray(photo.transpose(1, 0, 2))]
    settings = [
        Preprocess((416, 416)),
        Preprocess((320, 640), pad_value=0, channel_order="BGR", scale=1.0),
        Preprocess((224, 224), "stretch", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)),
    ]
    ring = TensorRing(2)  # reused across frames and settings: a slot's padding must follow its geometry
    for _ in range(2):
        for frame in frames:
            for preprocess in settings:
                canvas, placement = preprocess.place(frame)
                expected = preprocess.tensor([canvas])
                for tensor, prepared_placement in (preprocess.prepare(frame), preprocess.prepare(frame, ring)):
                    assert tensor.shape == (1, 3, *preprocess.size) and tensor.dtype == np.float32
                    assert np.array_equal(tensor, expected), (frame.shape, preprocess)
                    assert prepared_placement == placement


def test_image_checks(tmp_path):
    gray = check_image(np.full((4, 5), 9, np.uint8))
    assert gray.shape == (4, 5, 3)
    assert check_image(np.zeros((4, 5, 4), np.uint8)).shape == (4, 5, 3)
    with pytest.raises(InputError, match=r"is 1x1 pixels; at least 2x2 is needed"):
        check_image(np.zeros((1, 1, 3), np.uint8))
    with pytest.raises(InputError, match=r"has shape \(0,\)"):
        check_image(np.zeros((0,), np.uint8))
    with pytest.raises(InputError, match=r"has dtype float32, expected uint8"):
        check_image(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(InputError, match=r"has 2 channels; expected 1 \(gray\), 3 \(BGR\) or 4 \(BGRA\)"):
        check_image(np.zeros((4, 4, 2), np.uint8))
    (tmp_path / "notes.jpg").write_text("not an image")
    with pytest.raises(InputError, match=r"image '.*notes.jpg' \| is not an image OpenCV can read"):
        load_image(tmp_path / "notes.jpg")
    with pytest.raises(InputError, match=r"no such file"):
        load_image(tmp_path / "missing.png")


@pytest.fixture(scope="module")
def detector_path():
    return nudenet_model()


def _nudenet_canvas(path) -> np.ndarray:
    """The photo padded bottom/right to a square with black, as nudenet's own pipeline does first."""
    image = load_image(path)
    side = max(image.shape[:2])
    return cv2.copyMakeBorder(image, 0, side - image.shape[0], 0, side - image.shape[1], cv2.BORDER_CONSTANT)


# nudenet feeds the model BGR (it swaps channels twice), keeps scores >= 0.25 and suppresses across classes at 0.45
NUDENET_SETTINGS = {"conf": 0.25, "iou": 0.45, "agnostic": True, "preprocess": PreprocessOverrides(channel_order="BGR")}


def _nudenets_own_detections(canvas: np.ndarray) -> list[dict]:
    """What nudenet's NudeDetector (its own ONNX Runtime session, decoding and OpenCV NMS) finds in a square image."""
    nudenet = require_module("nudenet", "pip install --no-deps nudenet", "nudenet's own pipeline")
    return nudenet.NudeDetector().detect(canvas)


def _assert_same_as_nudenet(ours: list[Detection], expected: list[dict], where: str) -> None:
    """The same labels in the same order, boxes at IoU >= 0.9 and scores within 1e-3 of nudenet's."""
    assert expected, f"nudenet finds something in {where}"  # else agreeing with it proves nothing
    assert [d.label for d in ours] == [e["class"] for e in expected], where
    for detection, oracle in zip(ours, expected, strict=True):
        x, y, w, h = oracle["box"]  # nudenet truncates to whole pixels
        assert iou_one_to_many(np.array(detection.xyxy), np.array([[x, y, x + w, y + h]]))[0] >= 0.9, where
        assert detection.score == pytest.approx(oracle["score"], abs=1e-3), where


@pytest.mark.slow
@pytest.mark.parametrize("photo", ["person.jpg", "bus.jpg"])
def test_real_detector_matches_nudenets_own_pipeline_on_every_backend(detector_path, photo):
    """The oracle is nudenet's NudeDetector (its own ONNX Runtime session, decoding and OpenCV NMS). It feeds
    the model BGR (it swaps channels twice), pads to a square, keeps scores >= 0.25 and suppresses across classes
    at IoU 0.45: our Detector is set up the same way, so what differs is only our decoding, NMS and box mapping."""
    path = darknet_image(photo) if photo == "person.jpg" else yolov4_detector_photo(photo)
    canvas = _nudenet_canvas(path)
    expected = _nudenets_own_detections(canvas)
    for backend in ("onnxruntime", "openvino", "opencv"):
        options = get_backend(backend).precision_options("f32")
        with deploykit.Detector(detector_path, backend, **NUDENET_SETTINGS, **options) as detector:
            assert detector.layout == "ultralytics" and detector.size == (320, 320)
            ours = detector(canvas)
        _assert_same_as_nudenet(ours, expected, f"{photo} on {backend}")


def test_detector_is_thread_safe_and_batches(detector_path):
    image = _nudenet_canvas(darknet_image("person.jpg"))
    mirrored = cv2.flip(image, 1)  # still square: nudenet sees exactly these pixels too
    options = get_backend("onnxruntime").precision_options("f32")
    with deploykit.Detector(detector_path, **NUDENET_SETTINGS, **options) as detector:
        expected = detector(image)
        assert detector.last_timing.infer_ms > 0 and detector.last_timing.total_ms >= detector.last_timing.infer_ms
        results, errors = [None] * 8, []

        def work(index):
            try:
                results[index] = detector(image)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and all(r == expected for r in results)
        batched = detector.batch([image, mirrored, image])
        assert batched[0] == expected and batched[2] == expected
    _assert_same_as_nudenet(expected, _nudenets_own_detections(image), "person.jpg")
    _assert_same_as_nudenet(batched[1], _nudenets_own_detections(mirrored), "person.jpg mirrored, in a batch")


def test_detector_from_darknet_conversion_matches_decoded_graph(tmp_path):
    from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
    from deploykit.convert.darknet.weights import write_random_weights

    cfg = REPO / "models" / "darknet" / "yolov4-tiny.cfg"
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=9)
    raw, decoded = tmp_path / "raw.onnx", tmp_path / "decoded.onnx"
    labels = REPO / "models" / "labels" / "coco.names"
    convert_darknet(cfg, weights, raw, labels=labels, verify_backends=[], export=DarknetExportSettings(head="raw"))
    convert_darknet(
        cfg, weights, decoded, labels=labels, verify_backends=[], export=DarknetExportSettings(head="decoded")
    )
    image = load_image(darknet_image("dog.jpg"))
    with deploykit.Detector(raw, conf=0.3) as a, deploykit.Detector(decoded, conf=0.3) as b:
        assert (a.layout, b.layout) == ("darknet-raw", "darknet-decoded")
        assert a.labels[16] == "dog" and a.preprocess.pad_value == 128
        first, second = a(image), b(image)
    assert first and [d.class_id for d in first] == [d.class_id for d in second]
    for x, y in zip(first, second, strict=True):
        np.testing.assert_allclose(x.xyxy, y.xyxy, atol=0.05)


@pytest.mark.slow
def test_real_classifier_on_a_real_photo(tmp_path):
    from deploykit.convert.torch import TorchExportSettings, convert_torch

    out = tmp_path / "mobilenet_v2.onnx"
    convert_torch(
        f"{REPO / 'models' / 'torch' / 'mobilenet_v2.py'}:build",
        output=out,
        weights=mobilenet_v2_weights(),
        inputs=["images:1x3x224x224"],
        export=TorchExportSettings(dynamic={"images": {0: "batch"}}),
    )
    labels = REPO / "models" / "labels" / "imagenet.txt"
    imagenet = PreprocessOverrides(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    with deploykit.Classifier(out, "openvino", labels=labels, preprocess=imagenet, precision="f32") as classifier:
        top = classifier(darknet_image("eagle.jpg"), top_k=3)
        assert top[0].label == "bald eagle" and top[0].score > 0.5
        assert sum(c.score for c in classifier(darknet_image("eagle.jpg"), top_k=1000)) == pytest.approx(1.0, abs=1e-4)
        dog = classifier(darknet_image("dog.jpg"))[0]
        assert 151 <= dog.class_id <= 268, f"dog.jpg gave {dog.label}"  # ImageNet's dog breeds


def test_preprocess_overrides_are_one_value_and_the_old_keywords_still_work_with_a_warning(detector_path, tmp_path):
    import onnx

    from tests.assets.tiny import classifier_model

    image = _nudenet_canvas(darknet_image("person.jpg"))
    bgr = PreprocessOverrides(channel_order="BGR")
    with deploykit.Detector(detector_path, preprocess=bgr) as new:
        assert new.preprocess.channel_order == "BGR" and new.preprocess.resize == "letterbox"
        expected = new(image)
    with pytest.warns(DeprecationWarning, match=r"Detector\(channel_order=\) is deprecated.*preprocess="):
        old = deploykit.Detector(detector_path, channel_order="BGR")
    with old:
        assert old.preprocess == new.preprocess and old(image) == expected
    with pytest.raises(UsageError, match=r"Detector \| got both preprocess= and resize="):
        deploykit.Detector(detector_path, preprocess=bgr, resize="stretch")
    onnx.save(classifier_model(), tmp_path / "classifier.onnx")
    imagenet = PreprocessOverrides(resize="stretch", mean=[0.485, 0.456, 0.406], std=(0.229, 0.224, 0.225))
    # the to_dict form is what travels to Ray workers (PredictSettings.pipeline_options)
    with deploykit.Classifier(tmp_path / "classifier.onnx", preprocess=imagenet.to_dict()) as classifier:
        assert (classifier.preprocess.resize, classifier.preprocess.channel_order) == ("stretch", "RGB")
        assert classifier.preprocess.mean == (0.485, 0.456, 0.406) and classifier.preprocess.std[0] == 0.229
    with pytest.raises(UsageError, match=r"PreprocessOverrides \| has no setting 'size'"):
        deploykit.Classifier(tmp_path / "classifier.onnx", preprocess={"size": (8, 8)})


def test_unknown_layout_and_bad_labels(catalog_paths, detector_path, tmp_path):
    with pytest.raises(UsageError, match=r"has 2 inputs; image pipelines take one image input"):
        deploykit.Detector(catalog_paths["multi_io"])
    with pytest.raises(
        UsageError, match=r"outputs y \(1, 4, 8, 8\) are not a detection layout deploykit knows.*ultralytics"
    ):
        deploykit.Detector(catalog_paths["conv_bn_act"])
    wrong = tmp_path / "names.txt"
    wrong.write_text("cat\ndog\n")
    with pytest.raises(UsageError, match=r"has 2 names, the model has 18 classes"):
        deploykit.Detector(detector_path, labels=wrong)


def test_predict_cli(detector_path, tmp_path):
    canvas = _nudenet_canvas(darknet_image("person.jpg"))
    # predict feeds the model RGB and nudenet feeds it BGR: give predict the file whose RGB is nudenet's BGR
    photo = tmp_path / "person-swapped.png"
    assert cv2.imwrite(str(photo), np.ascontiguousarray(canvas[..., ::-1]))
    result = CliRunner().invoke(app, ["predict", str(detector_path), str(photo), "--conf", "0.25", "--iou", "0.45",
                                      "--agnostic", "--draw", str(tmp_path / "out.jpg"),
                                      "--json", str(tmp_path / "out.json")])  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out.json").read_text())
    assert data["task"] == "detect"
    found = [Detection(**{**row, "xyxy": tuple(row["xyxy"])}) for row in data["results"]]
    _assert_same_as_nudenet(found, _nudenets_own_detections(canvas), "person.jpg through predict")
    assert cv2.imread(str(tmp_path / "out.jpg")).shape == canvas.shape
    result = CliRunner().invoke(app, ["predict", str(detector_path), str(tmp_path / "out.json")])
    assert result.exit_code == 1 and "is not an image OpenCV can read" in result.stderr


def test_pipeline_bench_times_every_stage(detector_path, tmp_path):
    import shutil

    from deploykit.bench.pipeline import benchmark_pipeline

    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("person.jpg", "dog.jpg"):
        shutil.copy(darknet_image(name), folder / name)
    result = benchmark_pipeline(detector_path, "detect", folder, ["onnxruntime", "opencv"], iterations=4, warmup=1)
    schema = json.loads((REPO / "docs" / "report-schema.json").read_text())
    import jsonschema

    jsonschema.validate(result.to_dict(), schema)
    for row in result.rows:
        assert row.status == "ok" and row.verdict.agreement is True
        assert row.verdict.status == "unverified"  # backends agree; no independent oracle for a pipeline
        stages = row.stages
        assert stages["infer_p50_ms"] > 0 and stages["pre_p50_ms"] > 0 and stages["post_p50_ms"] > 0
        assert row.latency.p50_ms >= stages["infer_p50_ms"]
    result = CliRunner().invoke(
        app, ["bench", str(detector_path), "--pipeline", "detect", "--images", str(tmp_path / "none")]
    )
    assert result.exit_code == 2 and "is not a directory" in result.stderr


def test_real_images_as_bench_and_compare_inputs(tmp_path):
    import shutil

    from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
    from deploykit.convert.darknet.weights import write_random_weights
    from deploykit.vision.image import image_feeds

    cfg = REPO / "models" / "darknet" / "yolov3-tiny.cfg"
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=1)
    model = tmp_path / "y.onnx"
    convert_darknet(
        cfg, weights, model, verify_backends=[], export=DarknetExportSettings(head="decoded", batch="dynamic")
    )
    feeds = image_feeds(model, darknet_image("dog.jpg"))
    tensor = feeds["images"]
    assert tensor.shape == (1, 3, 416, 416) and tensor.dtype == np.float32
    np.testing.assert_allclose(tensor[0, :, 0, 0], 128 / 255, atol=1e-6)  # Darknet's gray letterbox border
    report = deploykit.compare(model, ["ort", "openvino", "opencv"], inputs=darknet_image("dog.jpg"))
    # onnx's reference evaluator runs it (with deploykit's spec-padded MaxPool): an independent check
    assert report.exit_code() == 0 and report.inputs == {"images": [1, 3, 416, 416]}
    assert report.oracle.name == "onnx-reference" and report.oracle.independent
    assert [v.status for v in report.verdicts] == ["pass"] * 3, [v.describe() for v in report.verdicts]
    assert report.input_source == "images (1 images)"
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("dog.jpg", "person.jpg"):
        shutil.copy(darknet_image(name), folder / name)
    bench = deploykit.benchmark(
        model, deploykit.BenchPlan(backends=["ort"], batch=[1, 3], iterations=2, warmup=0, isolate=False), inputs=folder
    )
    assert bench.settings.inputs == "images" and [r.config.batch for r in bench.rows] == [1, 3]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match=r"inputs '.*empty' \| the folder holds no images"):
        image_feeds(model, empty)
