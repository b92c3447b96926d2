"""The ``segment`` task on a real segmentation network (``tests/assets/segmenter.py``, exported from PyTorch):
argmax masks judged by mIoU against the oracle's, and the app pipeline in ``predict``, Ray rows and
streams, its results as a class histogram and its drawing as a mask overlay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

import deploykit
from deploykit.cli.main import app
from deploykit.distributed.rows import Predictor
from deploykit.tasks.registry import pipeline_tasks, recognise
from deploykit.tasks.segment import MIN_MIOU, Segmenter, SegmentTask, mean_iou
from deploykit.vision.image import image_cases
from tests.assets.paths import darknet_image
from tests.assets.segmenter import LABELS, SIZE, segmenter_model, torch_scores

PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return segmenter_model(tmp_path_factory.mktemp("segmenter") / "segmenter.onnx")


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("segment-photos")
    for name in PHOTOS:
        shutil.copy(darknet_image(name), folder / name)
    return folder


def test_mean_iou_is_what_it_says():
    reference = np.array([[[0, 0, 1, 1]]])
    assert mean_iou(reference, reference)[0] == 1.0
    value, details = mean_iou(reference, np.array([[[0, 1, 1, 1]]]))
    assert value == pytest.approx((1 / 2 + 2 / 3) / 2) and details["pixel_agreement"] == 0.75
    assert mean_iou(reference, np.zeros((1, 1, 3), dtype=int))[0] == 0.0


def test_a_segmenter_is_recognised_only_by_its_metadata(model):
    interface = deploykit.model.read_interface(model)
    outputs = {spec.name: spec for spec in interface.outputs}
    task = recognise(outputs, interface.metadata_props)
    assert isinstance(task, SegmentTask) and task.output == "scores"
    unstated = {k: v for k, v in interface.metadata_props.items() if k != "deploykit.task"}
    assert recognise(outputs, unstated) is None
    assert "segment" in pipeline_tasks()


def test_the_pipeline_mask_is_pytorchs_argmax_on_the_image_and_its_histogram_counts_it(model):
    bgr = cv2.resize(cv2.imread(str(darknet_image("dog.jpg"))), (SIZE, SIZE), interpolation=cv2.INTER_AREA)
    batch = np.ascontiguousarray(bgr[..., ::-1].transpose(2, 0, 1)[None], dtype=np.float32) / 255
    expected = np.argmax(torch_scores(batch), axis=1)[0]
    with Segmenter(model) as segmenter:
        found = segmenter(bgr)
    assert found.mask.shape == (SIZE, SIZE) and np.mean(found.mask == expected) > 0.999
    assert len(found) >= 3 and sum(c.pixels for c in found) == SIZE * SIZE
    assert [c.pixels for c in found] == sorted((c.pixels for c in found), reverse=True)
    for entry in found:
        assert entry.label == LABELS[entry.class_id] and entry.pixels == int(np.sum(found.mask == entry.class_id))


def test_compare_judges_a_segmenter_by_miou_and_the_judge_can_fail(model, photos):
    result = CliRunner().invoke(app, ["compare", str(model), "-b", "onnxruntime", "--inputs", str(photos), "--json"])
    assert result.exit_code == 0, result.output
    (verdict,) = [deploykit.Verdict.from_dict(v) for v in json.loads(result.stdout)["verdicts"]]
    assert verdict.status == "pass" and verdict.task is not None, verdict.describe()
    assert verdict.task.kind == "segment" and verdict.task.metric == "mIoU"
    assert verdict.task.value >= verdict.task.threshold == MIN_MIOU["f32"]
    cases, _ = image_cases(model, photos)
    with deploykit.load(model, "onnxruntime") as session:
        found = [session.run(case) for case in cases]
    task = SegmentTask("scores")
    assert task.judge(cases, found, found, thresholds=None, precision="f32").value == 1.0
    shuffled = found[1:] + found[:1]  # another photo's mask
    assert not task.judge(cases, found, shuffled, thresholds=None, precision="f32").passed


def test_predict_prints_the_histogram_writes_it_as_json_and_draws_the_mask_overlay(model, tmp_path):
    image = darknet_image("dog.jpg")
    result = CliRunner().invoke(
        app, ["predict", str(model), str(image), "-o", str(tmp_path / "dog.json"), "--draw", str(tmp_path / "dog.png")]
    )
    assert result.exit_code == 0, result.output
    assert "classes in dog.jpg" in result.stdout and "fraction" in result.stdout
    document = json.loads((tmp_path / "dog.json").read_text())
    original = cv2.imread(str(image))
    assert document["task"] == "segment" and {r["label"] for r in document["results"]} <= set(LABELS)
    assert sum(r["pixels"] for r in document["results"]) == original.shape[0] * original.shape[1]
    assert sum(r["fraction"] for r in document["results"]) == pytest.approx(1.0)
    drawn = cv2.imread(str(tmp_path / "dog.png"))
    assert drawn.shape == original.shape and not np.array_equal(drawn, original)


def test_streams_and_ray_rows_carry_the_same_histogram(model, photos, tmp_path):
    lines = CliRunner().invoke(app, ["predict", str(model), str(photos), "--json"])
    assert lines.exit_code == 0, lines.output
    rows = [json.loads(line) for line in lines.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["name"] for r in rows) == sorted(PHOTOS)
    predictor = Predictor(model, "segment")
    try:
        row = predictor.row("dog.jpg", (photos / "dog.jpg").read_bytes())
    finally:
        predictor.close()
    assert row["status"] == "ok" and row["task"] == "segment", row
    streamed = next(r for r in rows if r["name"] == "dog.jpg")
    assert row["results"] == streamed["results"]


def test_serve_answers_an_image_with_the_histogram(model):
    import httpx

    from deploykit.serve import ServedModel, Server, ServerSettings

    photo = darknet_image("giraffe.jpg")
    with Segmenter(model) as segmenter:
        expected = [c.to_dict() for c in segmenter(photo)]
    settings = ServerSettings(http_port=0, grpc_port=None, metrics_port=None)
    with Server([ServedModel.from_path(model, name="segmenter")], settings=settings) as running:
        assert running.wait_ready(60)
        with httpx.Client(base_url=f"http://127.0.0.1:{running.http_port}", timeout=60) as client:
            response = client.post("/v2/models/segmenter/image", content=photo.read_bytes())
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["task"] == "segment" and body["classes"] == expected


def test_quantize_judges_a_segmenter_by_miou_even_without_labels(model, photos, tmp_path):
    """Without labels its (batch, 4, 64, 64) scores also open as a 16384-class classifier: the metadata's
    task decides which pipeline quantize reads, not the first that opens."""
    import onnx

    unlabelled = onnx.load(str(model))
    kept = [prop for prop in unlabelled.metadata_props if prop.key != "deploykit.labels"]
    del unlabelled.metadata_props[:]
    unlabelled.metadata_props.extend(kept)
    onnx.save(unlabelled, str(tmp_path / "unlabelled.onnx"))
    settings = deploykit.QuantizeSettings(held_out=0.5, measure_speed=False)
    report = deploykit.quantize(tmp_path / "unlabelled.onnx", tmp_path / "int8.onnx", settings, calibrate=photos)
    measured = report.accuracy.task
    assert report.task == "segment" and measured is not None, report.accuracy
    assert measured.kind == "segment" and measured.metric == "mIoU"
    assert MIN_MIOU["int8"] <= measured.value <= 1.0 and report.accuracy.drop == pytest.approx(1.0 - measured.value)
