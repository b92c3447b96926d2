"""The one model loader: a file is read once into a typed ``Model`` and the Model travels, not the path.

The parse counts are measured, not assumed: onnx's loaders (and the cfg parser) are wrapped with a
counter in this process while a real ``bench`` (worker processes, the reference oracle, real images)
and a real ``convert darknet`` run.
"""

from __future__ import annotations

import collections
import copy
from pathlib import Path

import numpy as np
import onnx
import pytest

import deploykit
from deploykit.backends.registry import get_backend
from deploykit.bench.plan import BenchPlan
from deploykit.errors import InvalidModelError, MetadataError, ModelNotFoundError
from deploykit.io import file_sha256
from deploykit.metadata import read_metadata
from deploykit.model import Model, as_model
from deploykit.verify.settings import VerifySettings
from tests.assets.tiny import TINY_CFG, classifier_model, write_image

_ONNX_LOADERS = ("load", "load_model", "load_from_string", "load_model_from_string")


@pytest.fixture()
def parses(monkeypatch):
    """Counts every call of onnx's model loaders in this process, by loader name."""
    counts: collections.Counter[str] = collections.Counter()
    for name in _ONNX_LOADERS:
        original = getattr(onnx, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            counts[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(onnx, name, counted)
    return counts


def _dynamic_classifier(path: Path) -> Path:
    """The tiny classifier with a dynamic batch: feeds are made per batch size from the images."""
    model = copy.deepcopy(classifier_model())
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.save(model, path)
    return path


def test_one_bench_parses_the_onnx_file_once_in_this_process(tmp_path, parses):
    model = _dynamic_classifier(tmp_path / "classifier.onnx")
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("a.jpg", "b.jpg"):
        write_image(photos / name)
    plan = BenchPlan(backends=("onnxruntime",), batch=(1, 2), warmup=1, iterations=3)
    report = deploykit.benchmark(model, plan, inputs=photos)
    assert [row.verdict.status for row in report.rows] == ["pass", "pass"]
    assert report.rows[0].verdict.oracle.name == "onnx-reference"  # the oracle ran (in its worker)
    assert sum(parses.values()) == 1, dict(parses)
    assert report.model.sha256 == file_sha256(model)


def test_the_bench_command_parses_it_once_too(tmp_path, parses):
    from typer.testing import CliRunner

    from deploykit.cli.main import app

    model = _dynamic_classifier(tmp_path / "classifier.onnx")
    write_image(tmp_path / "photo.jpg")
    args = ["bench", str(model), "-b", "onnxruntime", "--batch", "1,2", "--inputs", str(tmp_path / "photo.jpg"),
            "--warmup", "1", "--iterations", "3", "--report", str(tmp_path / "report")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert sum(parses.values()) == 1, dict(parses)


def test_a_model_passed_in_is_not_read_again(tmp_path, parses):
    path = _dynamic_classifier(tmp_path / "classifier.onnx")
    model = Model.open(path)
    assert sum(parses.values()) == 1
    report = deploykit.benchmark(model, BenchPlan(backends=("onnxruntime",), warmup=0, iterations=2, isolate=False))
    assert report.rows[0].status == "ok" and report.rows[0].verdict.status == "pass"
    with get_backend("onnxruntime").open(model) as session:
        assert list(session.inputs) == ["images"]
    assert sum(parses.values()) == 1, dict(parses)  # the bench, its in-process oracle and the session: none


def test_model_open_reads_the_interface_hash_and_typed_metadata(tmp_path):
    path = tmp_path / "classifier.onnx"
    onnx.save(classifier_model(), path)
    model = Model.open(path)
    assert (model.path, model.format, model.sha256) == (path, ".onnx", file_sha256(path))
    assert [s.name for s in model.inputs] == ["images"] and model.inputs[0].shape == (1, 3, 16, 16)
    assert [s.name for s in model.outputs] == ["probabilities"] and model.precision == "f32"
    assert model.metadata.task == "classify" and model.metadata.labels == ("a", "b", "c", "d", "e")
    assert model.metadata_props["deploykit.task"] == "classify"
    assert read_metadata(model.metadata) is model.metadata  # typed metadata is not read again
    assert as_model(model) is model and as_model(path).sha256 == model.sha256


def test_typed_metadata_holds_the_recipe_weights_and_quantize_record(tmp_path):
    proto = classifier_model()
    for key, value in (("deploykit.recipe", "tiny"), ("deploykit.weights", "random, seed 3"),
                       ("deploykit.quantize", '{"engine": "ort", "accuracy_delta": NaN}')):  # fmt: skip
        proto.metadata_props.add(key=key, value=value)
    onnx.save(proto, tmp_path / "m.onnx")
    metadata = Model.open(tmp_path / "m.onnx").metadata
    assert (metadata.recipe, metadata.weights, metadata.quantize["engine"]) == ("tiny", "random, seed 3", "ort")
    assert np.isnan(metadata.quantize["accuracy_delta"])


def test_broken_metadata_is_an_error_where_it_is_read_not_when_the_model_opens(tmp_path):
    proto = classifier_model()
    proto.metadata_props.add(key="deploykit.quantize", value="[1, 2]")
    onnx.save(proto, tmp_path / "m.onnx")
    model = Model.open(tmp_path / "m.onnx")  # its interface is fine: sessions, bench on random data work
    with pytest.raises(MetadataError) as caught:
        _ = model.metadata
    assert caught.value.message == "model 'm.onnx' metadata 'deploykit.quantize' | is a JSON list; expected an object."


def test_model_open_errors_name_the_file(tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"model '.*missing.onnx' \| no such file"):
        Model.open(tmp_path / "missing.onnx")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(InvalidModelError, match=r"model '.*broken.onnx' \| cannot be parsed as ONNX"):
        Model.open(broken)


def test_opencv_supplies_the_interface_of_a_darknet_cfg(tmp_path):
    backend = get_backend("opencv")
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(TINY_CFG)
    model = backend.read_model(cfg)
    assert (model.format, model.proto, model.sha256) == (".cfg", None, file_sha256(cfg))
    assert [(s.name, s.shape) for s in model.inputs] == [("data", (1, 3, 32, 32))]
    onnx_file = tmp_path / "classifier.onnx"
    onnx.save(classifier_model(), onnx_file)
    assert get_backend("onnxruntime").read_model(onnx_file).format == ".onnx"


def test_convert_darknet_parses_the_cfg_once_and_reads_no_onnx_back(tmp_path, parses, monkeypatch):
    from deploykit import darknet_cfg as cfg_module
    from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
    from deploykit.convert.darknet.weights import write_random_weights

    cfg, weights = tmp_path / "tiny.cfg", tmp_path / "tiny.weights"
    cfg.write_text(TINY_CFG)
    write_random_weights(load_network(cfg), weights, seed=1)
    cfg_parses = []
    original = cfg_module.parse_cfg_text
    monkeypatch.setattr(cfg_module, "parse_cfg_text", lambda *a, **k: cfg_parses.append(a[1:]) or original(*a, **k))
    report = convert_darknet(cfg, weights, tmp_path / "m.onnx", DarknetExportSettings(input_size=(64, 64), batch=2),
                             VerifySettings(oracle="none"), verify_backends=["onnxruntime"])  # fmt: skip
    assert report.passed and [v.status for v in report.verdicts] == ["unverified"]
    assert len(cfg_parses) == 1  # at the asked-for size and the cfg's own, from one read
    assert sum(parses.values()) == 0, dict(parses)  # the candidate's batch is the converter's, not read back
