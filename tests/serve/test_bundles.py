"""``deploykit serve deploy/``: an ``optimize`` bundle folder is served in exactly the configuration it
chose (backend, precision, threads), its verdict and precision in the model's metadata, and its
answers equal ``deploykit.load(bundle).run``; asking it for another backend is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

import deploykit
from deploykit.optimize import OptimizePlan, optimize, read_bundle
from tests.fuzz.harness import invoke_checked
from tests.quantize.conftest import classifier_path, photos

__all__ = ["classifier_path", "photos"]


@pytest.fixture(scope="module")
def bundle(classifier_path, photos, tmp_path_factory) -> Iterator[Path]:
    """One quick search of the small classifier on ONNX Runtime, one thread, no INT8: a real bundle."""
    with pytest.MonkeyPatch.context() as patch:  # bundles remember verified files: in a cache of our own
        patch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path_factory.mktemp("deploykit-cache")))
        output = tmp_path_factory.mktemp("serve-bundle") / "deploy"
        optimize(
            classifier_path,
            photos,
            OptimizePlan(backends=["onnxruntime"], threads=[1], quantize=False, time_budget="30s"),
            output=output,
        )
        yield output


def test_a_bundle_folder_serves_its_chosen_configuration(command, bundle):
    manifest = read_bundle(bundle).manifest
    server = command(str(bundle))
    base = f"http://127.0.0.1:{server.http}"
    metadata = httpx.get(f"{base}/v2/models/deploy", timeout=30).json()
    parameters = metadata["parameters"]
    assert metadata["platform"] == f"deploykit-{manifest.backend}"
    assert parameters["backend"] == manifest.backend and parameters["precision"] == manifest.precision
    assert parameters["verdict"] == manifest.verdict["status"] == "pass"
    assert parameters["options"]["threads"] == manifest.threads == 1
    assert parameters["options"] == {**manifest.options, **parameters["options"]}  # every chosen option is in force
    (spec,) = manifest.inputs
    x = np.random.default_rng(3).random([1, *spec["shape"][1:]], dtype=np.float32)
    body = {"inputs": [{"name": spec["name"], "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}]}
    answer = httpx.post(f"{base}/v2/models/deploy/infer", json=body, timeout=30).json()
    with deploykit.load(bundle) as session:
        expected = session.run({spec["name"]: x})
    for output in answer["outputs"]:
        np.testing.assert_array_equal(
            np.array(output["data"], np.float32).reshape(output["shape"]), expected[output["name"]]
        )


def test_a_bundle_refuses_another_backend(bundle):
    done = invoke_checked(["serve", str(bundle), "-b", "openvino"])
    assert done.exit_code == 2, done.stderr
    assert done.stderr.startswith(f"error: bundle '{bundle}' | chose backend onnxruntime; asked for openvino.")


def test_a_bundle_loaded_later_gets_the_same_checks(command, bundle, tmp_path, catalog_paths):
    """The repository extension loads a bundle from the served folder in its own configuration, and
    refuses one whose model file is not the one the bundle recorded (its SHA-256)."""
    import shutil

    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    folder = tmp_path / "bundles"
    for name in ("served", "later", "tampered"):
        shutil.copytree(bundle, folder / name)
    model_file = read_bundle(bundle).manifest.model_file
    shutil.copy(catalog_paths["mlp_dynamic_batch"], folder / "tampered" / model_file)  # valid ONNX, another file
    server = command(str(folder / "served"))
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http}")
    client.load_model("later")
    config = client.get_model_config("later")
    manifest = read_bundle(bundle).manifest
    assert config["backend"] == manifest.backend and config["parameters"]["verdict"]["string_value"] == "pass"
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("tampered")
    assert caught.value.status() == "400"
    assert caught.value.message().startswith(
        f"model 'tampered' | fails its checks: bundle '{folder / 'tampered'}' | model '{model_file}' has SHA-256"
    )
    assert not client.is_model_ready("tampered") and client.is_model_ready("later") and client.is_server_ready()


def test_a_bundle_of_a_converted_model_is_served_where_nothing_converts(command, classifier_path, photos, tmp_path):
    """A bundle that chose MNN carries the .mnn and its .json: served with MNN's converter turned off and an
    empty cache, its metadata comes from the .json (the ONNX names) and its answers equal ``load(bundle)``."""
    from deploykit.backends.registry import get_backend

    reason = get_backend("mnn").unavailable_reason()
    if reason:
        pytest.skip(f"the mnn runtime is not installed: {reason}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path / "cache"))
        plan = OptimizePlan(backends=["mnn"], threads=[1], quantize=False, time_budget="20s")
        optimize(classifier_path, photos, plan, output=tmp_path / "deploy")
    assert read_bundle(tmp_path / "deploy").manifest.model_file.endswith(".mnn")
    hidden = {"DEPLOYKIT_CACHE_DIR": str(tmp_path / "empty"), "DEPLOYKIT_MNN_CONVERTER": "off"}
    server = command(str(tmp_path / "deploy"), env=hidden)
    base = f"http://127.0.0.1:{server.http}"
    metadata = httpx.get(f"{base}/v2/models/deploy", timeout=30).json()
    assert metadata["platform"] == "deploykit-mnn"
    assert [i["name"] for i in metadata["inputs"]] == ["images"] and [o["name"] for o in metadata["outputs"]] == [
        "logits"
    ]
    x = np.random.default_rng(4).random((1, 3, 32, 32), dtype=np.float32)
    body = {"inputs": [{"name": "images", "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}]}
    (output,) = httpx.post(f"{base}/v2/models/deploy/infer", json=body, timeout=30).json()["outputs"]
    with pytest.MonkeyPatch.context() as patch:
        for key, value in hidden.items():
            patch.setenv(key, value)
        with deploykit.load(tmp_path / "deploy") as session:
            expected = session.run({"images": x})["logits"]
    np.testing.assert_array_equal(np.array(output["data"], np.float32).reshape(output["shape"]), expected)
