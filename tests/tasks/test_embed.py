"""The ``embed`` task on a real encoder: MobileNetV2's ImageNet backbone (the recipe's packaged
weights), cut after its global average pool, judged by the cosine of its pooled embeddings.

The reference is PyTorch running the same weights (``models/torch/mobilenet_v2.py``), independent of
the ONNX file; ``deploykit compare`` then judges the ONNX Runtime and OpenVINO rows by the task."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import deploykit
from deploykit.cli.main import app
from deploykit.recipes import get_recipe, models_dir
from deploykit.tasks.embed import EmbedTask, cosines, pooled
from deploykit.tasks.registry import recognise
from deploykit.vision.image import image_cases
from tests.assets.paths import darknet_image
from tests.assets.samples import mobilenet_v2_encoder

PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg")


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("embed-photos")
    for name in PHOTOS:
        shutil.copy(darknet_image(name), folder / name)
    return folder


@pytest.fixture(scope="module")
def encoder(mobilenet: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recipe's MobileNetV2 without its classifier: (batch, 1280) pooled features, task ``embed``."""
    return mobilenet_v2_encoder(mobilenet, tmp_path_factory.mktemp("encoder") / "mobilenet_v2_encoder.onnx")


def _torch_embeddings(batch: np.ndarray) -> np.ndarray:
    import torch

    spec = importlib.util.spec_from_file_location("mobilenet_v2_factory", models_dir() / "torch" / "mobilenet_v2.py")
    assert spec is not None and spec.loader is not None
    factory = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(factory)
    network = factory.build()
    network.load_state_dict(torch.load(get_recipe("mobilenet_v2").checked_weights(), map_location="cpu"))
    network.eval()
    with torch.no_grad():
        features = network.features(torch.from_numpy(batch))
        return torch.nn.functional.adaptive_avg_pool2d(features, 1).flatten(1).numpy()


def test_pooling_and_cosine_are_what_they_say():
    maps = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    assert pooled(maps).tolist() == [[5.5, 17.5]]
    tokens = np.array([[[1.0, 0.0], [3.0, 2.0]]])
    assert pooled(tokens).tolist() == [[2.0, 1.0]]
    assert cosines(
        np.array([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]), np.array([[2.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    ).tolist() == [1.0, 1.0, 0.0]


@pytest.mark.slow
def test_an_encoder_is_recognised_only_by_its_metadata(encoder):
    interface = deploykit.model.read_interface(encoder)
    outputs = {s.name: s for s in interface.outputs}
    task = recognise(outputs, interface.metadata_props)
    assert isinstance(task, EmbedTask) and task.output == interface.outputs[0].name
    # the same (batch, 1280) output without the metadata looks like a 1280-class classifier
    unstated = {k: v for k, v in interface.metadata_props.items() if k != "deploykit.task"}
    assert recognise(outputs, unstated).name == "classify"


@pytest.mark.slow
def test_onnx_runtime_embeddings_match_pytorch(encoder, photos):
    cases, _ = image_cases(encoder, photos)
    batch = np.concatenate([next(iter(c.values())) for c in cases])
    expected = _torch_embeddings(batch)
    with deploykit.load(encoder, "onnxruntime") as session:
        found = [session.run(c) for c in cases]
    task = recognise({s.name: s for s in deploykit.model.read_interface(encoder).outputs},
                     deploykit.model.read_interface(encoder).metadata_props)  # fmt: skip
    assert task is not None
    reference = [{task.output: expected[i : i + 1]} for i in range(len(cases))]  # type: ignore[attr-defined]
    result = task.judge(cases, reference, found, thresholds=None, precision="f32")
    assert result.kind == "embed" and result.metric == "embedding cosine" and result.threshold == 0.999
    assert result.passed and result.value > 0.99999, result.describe()
    assert result.details["samples"] == len(PHOTOS) and result.details["dimensions"] == 1280
    # the oracle can fail: another image's embedding is far from this one's
    shuffled = found[1:] + found[:1]
    assert not task.judge(cases, reference, shuffled, thresholds=None, precision="f32").passed


@pytest.mark.slow
def test_compare_judges_every_row_of_an_encoder_by_embedding_cosine(encoder, photos):
    backends = ["onnxruntime"] + (["openvino"] if deploykit.get_backend("openvino").is_available() else [])
    options = [part for name in backends for part in ("-b", name)]
    result = CliRunner().invoke(app, ["compare", str(encoder), *options, "--inputs", str(photos), "--json"])
    assert result.exit_code == 0, result.output
    verdicts = [deploykit.Verdict.from_dict(v) for v in json.loads(result.stdout)["verdicts"]]
    assert len(verdicts) == len(backends)
    for verdict in verdicts:
        assert verdict.status == "pass", verdict.describe()
        assert verdict.task is not None and verdict.task.kind == "embed", verdict.describe()
        assert verdict.task.metric == "embedding cosine" and verdict.task.value >= verdict.task.threshold == 0.999


@pytest.mark.slow
def test_quantize_judges_an_encoder_by_embedding_cosine(encoder, photos, tmp_path):
    from deploykit.quantize import QuantizeReport
    from deploykit.quantize.results import TaskMetric
    from deploykit.tasks.embed import MIN_COSINE

    settings = deploykit.QuantizeSettings(held_out=0.5, measure_speed=False)
    report = deploykit.quantize(encoder, tmp_path / "encoder.int8.onnx", settings, calibrate=photos)
    measured = report.accuracy.task
    assert report.task == "embed" and isinstance(measured, TaskMetric), report.accuracy
    assert measured.kind == "embed" and measured.metric == "embedding cosine"
    assert measured.details["samples"] == report.accuracy.samples and measured.details["dimensions"] == 1280
    assert MIN_COSINE["int8"] <= measured.value <= measured.details["mean_cosine"] < 1.0
    assert report.accuracy.drop == pytest.approx(1.0 - measured.value)
    assert QuantizeReport.from_dict(report.to_dict()).accuracy.task == measured
