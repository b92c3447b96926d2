"""``POST /v2/models/{name}/image``: an encoded photo in, the pipeline's detections or top-k out, equal to
``deploykit.Detector`` / ``deploykit.Classifier`` on the same file; refusals are protocol errors."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

import deploykit
from deploykit.serve import ServedModel, Server, ServerSettings
from deploykit.tasks.registry import pipeline_tasks
from tests.assets.paths import darknet_image, yolov4_detector_photo


@pytest.fixture(scope="module")
def server(mobilenet_v2, yolov4_tiny, catalog_paths) -> Iterator[Server]:
    models = [ServedModel.from_path(mobilenet_v2, name="mobilenet"), ServedModel.from_path(yolov4_tiny, name="yolo"),
              ServedModel.from_path(catalog_paths["mlp_dynamic_batch"], name="mlp")]  # fmt: skip
    with Server(models, settings=ServerSettings(http_port=0, grpc_port=None, metrics_port=None)) as running:
        assert running.wait_ready(60)
        yield running


@pytest.fixture(scope="module")
def client(server) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", timeout=60) as http:
        yield http


def test_a_photo_gets_the_detectors_boxes(client, yolov4_tiny):
    photo = yolov4_detector_photo("bus.jpg")
    with deploykit.Detector(yolov4_tiny, conf=0.3) as detector:
        expected = [d.to_dict() for d in detector(photo)]
    response = client.post("/v2/models/yolo/image", params={"conf": 0.3}, content=photo.read_bytes(),
                           headers={"Content-Type": "image/jpeg"})  # fmt: skip
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model_name"] == "yolo" and body["task"] == "detect"
    assert {d["label"] for d in body["detections"]} >= {"bus", "person"}
    assert len(body["detections"]) == len(expected)
    for got, want in zip(body["detections"], expected, strict=True):
        assert got["label"] == want["label"] and got["score"] == pytest.approx(want["score"], abs=1e-5)
        assert got["xyxy"] == pytest.approx(want["xyxy"], abs=1e-3)


def test_a_photo_gets_the_classifiers_top_k(client, mobilenet_v2):
    photo = darknet_image("eagle.jpg")
    with deploykit.Classifier(mobilenet_v2) as classifier:
        expected = [c.to_dict() for c in classifier(photo, top_k=3)]
    response = client.post("/v2/models/mobilenet/versions/1/image", params={"top_k": 3}, content=photo.read_bytes())
    assert response.status_code == 200, response.text
    classes = response.json()["classes"]
    assert [c["label"] for c in classes] == [c["label"] for c in expected] and classes[0]["label"] == "bald eagle"
    assert [c["score"] for c in classes] == pytest.approx([c["score"] for c in expected], abs=1e-5)


@pytest.mark.parametrize(
    ("model", "body", "params", "status", "message"),
    [
        ("mlp", b"\xff\xd8", {}, 400, f"model 'mlp' | has no {' or '.join(pipeline_tasks())} task in its metadata"),
        ("yolo", b"", {}, 400, "request | has an empty body, expected an encoded image"),
        ("yolo", b"not an image at all", {}, 400, "image 'request body' |"),
        ("yolo", None, {"conf": "high"}, 400, "parameter 'conf' | 'high' is not a number"),
        ("yolo", None, {"conf": "1.5"}, 400, "conf"),
        ("mobilenet", None, {"top_k": "0"}, 400, "top_k"),
        ("nope", b"x", {}, 404, "model 'nope' | is not served here"),
    ],
)
def test_bad_image_requests(client, model, body, params, status, message):
    content = yolov4_detector_photo("bus.jpg").read_bytes() if body is None else body
    response = client.post(f"/v2/models/{model}/image", params=params, content=content)
    assert response.status_code == status and message in response.json()["error"], response.text


def test_a_model_unloaded_and_loaded_again_answers_images_from_its_new_sessions(client):
    """The route keeps one pipeline per model; after an unload and a load it must use the new sessions."""
    photo = darknet_image("eagle.jpg").read_bytes()
    assert client.post("/v2/models/mobilenet/image", content=photo).status_code == 200
    assert client.post("/v2/repository/models/mobilenet/unload").status_code == 200
    refused = client.post("/v2/models/mobilenet/image", content=photo)
    assert refused.status_code == 503 and "model 'mobilenet' | it was unloaded" in refused.json()["error"]
    assert client.post("/v2/repository/models/mobilenet/load").status_code == 200
    answer = client.post("/v2/models/mobilenet/image", content=photo)
    assert answer.status_code == 200, answer.text
    assert answer.json()["classes"][0]["label"] == "bald eagle"
