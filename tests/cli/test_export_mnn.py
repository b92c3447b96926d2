"""``deploykit export mnn``: a verified .mnn with its .json, checked outputs, all or nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deploykit
from deploykit.backends.registry import get_backend
from tests.assets.paths import REPO, missing_asset
from tests.assets.reference import run_reference
from tests.assets.samples import tiny_classifier
from tests.fuzz.harness import invoke_checked


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    reason = get_backend("mnn").unavailable_reason()
    if reason:
        missing_asset("the mnn backend's runtime", reason)
    path = tmp_path_factory.mktemp("export") / "classifier.onnx"
    onnx.save(tiny_classifier(), path)
    return path


def test_export_round_trip(classifier, tmp_path):
    target = tmp_path / "out" / "model.mnn"
    target.parent.mkdir()
    result = invoke_checked(["export", "mnn", classifier, "-o", target], reads=[classifier], watch=[target.parent])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.json", "model.mnn"]
    assert "element-wise" in result.stdout and "pass" in result.stdout and "mnn 3." in result.stdout
    document = json.loads((target.parent / "model.json").read_text())
    assert document["format"] == "deploykit-mnn-io" and document["converter"] == get_backend("mnn").version()
    assert [t["name"] for t in document["inputs"] + document["outputs"]] == ["images", "probabilities"]
    # the exported file is a model like any other: ONNX names, dynamic batch, the reference's numbers
    images = np.random.default_rng(0).uniform(0, 1, (2, 3, 32, 32)).astype(np.float32)
    with deploykit.load(target, "mnn") as session:
        assert list(session.inputs) == ["images"] and session.inputs["images"].shape == ("batch", 3, 32, 32)
        got = session.run({"images": images})["probabilities"]
    np.testing.assert_allclose(
        got, run_reference(classifier, {"images": images})["probabilities"], atol=1e-5, rtol=1e-4
    )


def test_output_without_suffix_writes_the_same_two_files(classifier, tmp_path):
    result = invoke_checked(["export", "mnn", classifier, "-o", tmp_path / "net"], reads=[classifier])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.json", "net.mnn"]


@pytest.mark.parametrize("suffix", [".json", ".onnx"])
def test_an_output_named_like_the_other_file_is_refused(classifier, tmp_path, suffix):
    target = tmp_path / f"model{suffix}"
    result = invoke_checked(["export", "mnn", classifier, "-o", target], reads=[classifier], writes=[target])
    assert result.exit_code == 2
    assert (
        f"error: -o/--output '{target}' | names a {suffix} file; the export writes a .mnn and a .json" in result.stderr
    )
    assert f"Hint: give the .mnn file (-o {tmp_path / 'model.mnn'})" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_failed_verification_writes_nothing(classifier, tmp_path):
    """A tolerance no runtime meets (0) fails the f32 check: the file must not reach the output paths."""
    paths = [tmp_path / "model.mnn", tmp_path / "model.json"]
    result = invoke_checked(
        ["export", "mnn", classifier, "-o", paths[0], "--atol", "0", "--rtol", "0"],
        reads=[classifier],
        writes=paths,
        watch=[tmp_path],
    )
    assert result.exit_code == 1
    assert "error: export mnn 'classifier.onnx' | the exported file does not pass against onnx-reference" in (
        result.stderr
    )
    assert "Nothing was written." in result.stderr and not any(p.exists() for p in paths)


def test_a_model_mnn_cannot_take_is_refused_naming_its_layers(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], name="pick")],
        "hardmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    path = tmp_path / "hardmax.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    out = tmp_path / "out.mnn"
    result = invoke_checked(["export", "mnn", path, "-o", out], reads=[path], writes=[out, tmp_path / "out.json"])
    assert result.exit_code == 1
    assert (
        "MNN's converter cannot take 1 layer(s) of 'hardmax.onnx': it has no conversion for Hardmax (pick)."
        in result.stderr
    )


def test_compare_json_on_stdout_is_only_json(classifier, tmp_path):
    """MNN prints a banner at import in every process that loads it (the compare workers too)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), "DEPLOYKIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "deploykit.cli.launch",
            "compare",
            str(classifier),
            "-b",
            "onnxruntime",
            "-b",
            "mnn",
            "--json",
        ],
        env=environment,
        capture_output=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = json.loads(done.stdout)
    assert {v["candidate"].split(":")[0]: v["status"] for v in report["verdicts"]} == {
        "onnxruntime": "pass",
        "mnn": "pass",
    }
