"""Each candidate runs twice in one session: a runtime whose runs differ fails, whatever its first run matched."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from deploykit.verify import VerifySettings, compare
from deploykit.verify.check import REPEAT_RUNS
from tests.assets.paths import REPO

FLAKY = "flaky=tests.assets.flaky_backend:FlakyBackend"


def _conv(path):
    weight = np.random.default_rng(0).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.ravel())],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    return path


def test_a_runtime_whose_second_run_differs_fails_as_nondeterministic(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", FLAKY)
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the verification worker imports the plug-in
    report = compare(_conv(tmp_path / "conv.onnx"), ["flaky", "onnxruntime"], VerifySettings(precision="f32"))
    flaky, steady = report.verdicts
    assert REPEAT_RUNS >= 2
    assert flaky.status == "fail", flaky.reason
    assert flaky.reason.startswith("nondeterministic: runs differ by ")
    assert "output 'y'" in flaky.reason and "runs in one session" in flaky.reason
    assert steady.status == "pass", steady.reason
    assert report.exit_code() == 1


def test_without_an_oracle_a_flaky_runtime_still_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", FLAKY)
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the verification worker imports the plug-in
    report = compare(_conv(tmp_path / "conv.onnx"), ["flaky"], VerifySettings(oracle="none"))
    assert report.verdicts[0].status == "fail" and "nondeterministic" in report.verdicts[0].reason
