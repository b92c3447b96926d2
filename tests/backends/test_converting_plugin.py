"""A backend that converts is a plug-in like any other: the toy converting backend
(``tests/assets/toy_converting_backend.py``), registered through ``DEPLOYKIT_BACKENDS`` alone, converts
through the shared converted-model cache, runs what it converted, and is measured by the conformance
suite against the raw runner it declares, with no line of the suite changed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import deploykit
from deploykit.backends.converted import ENTRY_NAME
from deploykit.backends.registry import BUILTIN_BACKENDS, backend_names, get_backend
from deploykit.backends.traits import RawRuntime
from deploykit.errors import BackendError
from deploykit.model import Model
from tests.assets import toy_converting_backend as toy
from tests.assets.paths import REPO

PLUGIN = "toyconv=tests.assets.toy_converting_backend:ToyConvertingBackend"


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The toy registered by the environment variable alone, and a cache of the test's own."""
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", PLUGIN)
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _affine(path: Path) -> Path:
    """y = x @ W + b, with W and b initializers (the toy converter moves them to its weights file)."""
    rng = np.random.default_rng(7)
    weight = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    graph = helper.make_graph(nodes, "affine", [x], [y], [weight, bias])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def test_the_toy_is_registered_by_the_environment_variable_alone(cache: Path) -> None:
    assert "toyconv" not in BUILTIN_BACKENDS and "toyconv" in backend_names()
    assert get_backend("toyconv").raw is not None


def test_the_toy_converts_once_into_the_cache_and_runs_the_converted_file(cache: Path, tmp_path: Path) -> None:
    model = _affine(tmp_path / "affine.onnx")
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    expected = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"]).run(
        None, {"x": x}
    )[0]
    toy.BUILDS.clear()

    with deploykit.load(model, "toyconv", threads=1) as first:
        produced = first.run({"x": x})["y"]
        entry = first.conversion
        assert first.runtime.get_modelmeta().graph_name == toy.GRAPH_NAME  # the converted file runs
    np.testing.assert_array_equal(produced, expected)
    assert entry.built and len(toy.BUILDS) == 1
    assert entry.directory.parent == cache / toy.CACHE_KIND and (entry.directory / ENTRY_NAME).is_file()
    assert sorted(entry.files) == [toy.MODEL_NAME, toy.WEIGHTS_NAME]
    converted = onnx.load(str(entry.path(toy.MODEL_NAME)), load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in converted.graph.initializer)

    with deploykit.load(model, "toyconv", threads=1) as second:
        np.testing.assert_array_equal(second.run({"x": x})["y"], expected)
        assert not second.conversion.built and second.conversion.directory == entry.directory
    assert len(toy.BUILDS) == 1, "the second open finds the cache entry"
    assert get_backend("toyconv").conversion.converted_file(Model.open(model), {}) == entry.path(toy.MODEL_NAME)


@pytest.mark.parametrize("target", ["tests.assets.toy_converting_backend.run_toyconv", ":run", "module:"])
def test_a_raw_runner_is_named_by_a_module_function_string(target: str) -> None:
    with pytest.raises(BackendError) as raised:
        RawRuntime(target)
    assert str(raised.value) == (
        f"raw runner '{target}' | is not a 'module:function' import string. Hint: name the function as "
        "'package.module:run_name', as RawRuntime's run and outside take it."
    )


_ROW = re.compile(r"^\| toyconv \| (\d+) \| (\d+) / (\d+) \| (\d+) \| (\d+) \| (\d+) \|$", re.M)


@pytest.mark.slow
def test_the_conformance_suite_measures_a_plugin_by_the_raw_runner_it_declares(tmp_path: Path) -> None:
    """The suite, unchanged, in a fresh pytest with two plug-ins registered: it collects both, measures the
    toy against the raw runner it declares (its sample of the ONNX node cases) and loses none, and fails the
    plug-in that declares no raw runner, saying what to declare."""
    plugins = f"{PLUGIN};raiser=tests.assets.crashing_backend:RaisingBackend"
    environment = {**os.environ, "DEPLOYKIT_BACKENDS": plugins, "DEPLOYKIT_CACHE_DIR": str(tmp_path / "cache")}
    command = [sys.executable, "-m", "pytest", "tests/conformance/test_conformance.py", "-k", "toyconv or raiser"]
    command += ["-m", "slow", "-q", "-rf", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "pytest")]
    done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=900)
    said = done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 1 and re.search(r"\b1 failed, 1 passed\b", done.stdout), said
    assert (
        "FAILED tests/conformance/test_conformance.py::test_deploykit_passes_every_case_the_raw_runtime_passes[raiser]"
        in done.stdout
    ), said
    assert "backend 'raiser' is registered but declares no raw runner" in done.stdout, said
    row = _ROW.search(done.stdout)
    assert row is not None, said
    cases, raw_run, deploykit_run, raw_passes, deploykit_passes, lost = map(int, row.groups())
    assert cases > 1000 and 0 < raw_run == deploykit_run < cases, said  # the sample the toy declares
    assert raw_passes > 0 and deploykit_passes >= raw_passes and lost == 0, said
