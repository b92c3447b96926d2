"""The ncnn backend beyond the contract: the pnnx cache, shapes, batches, native pairs, precisions,
devices and every refusal a user can meet, with its message. Real pnnx and ncnn, no mocks.

Hardware-dependent expectations come from ``NcnnBackend.precisions`` and ``devices``, never from
the machine this was written on.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deploykit
from deploykit.backends.registry import get_backend
from deploykit.errors import (
    BackendUnavailableError,
    DeviceUnavailableError,
    InputError,
    ModelError,
    ModelNotFoundError,
    PrecisionUnavailableError,
    UnsupportedModelError,
    UsageError,
)
from deploykit.verify.metrics import Thresholds, compare_outputs
from tests.assets.catalog import CATALOG
from tests.assets.paths import REPO, missing_asset
from tests.assets.reference import run_reference
from tests.assets.samples import tiny_classifier

F32 = Thresholds(atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def ncnn_backend():
    backend = get_backend("ncnn")
    reason = backend.unavailable_reason()
    if reason:
        missing_asset("the ncnn backend's runtime", reason)
    return backend


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache of this test's own, so what it finds there is what it made."""
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "ncnn"


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("ncnn-models")
    paths = {}
    for entry in CATALOG:
        paths[entry.name] = directory / f"{entry.name}.onnx"
        onnx.save(entry.build(), paths[entry.name])
    paths["classifier"] = directory / "classifier.onnx"
    onnx.save(tiny_classifier(), paths["classifier"])
    paths["other_classifier"] = directory / "other_classifier.onnx"
    onnx.save(tiny_classifier(seed=1, classes=12), paths["other_classifier"])
    return paths


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith("."))


def _matches_reference(session, path: Path, feeds: dict[str, np.ndarray]) -> None:
    outputs = session.run(feeds)
    report = compare_outputs(outputs, run_reference(path, feeds), F32)
    assert all(o.passed for o in report), [o.describe() for o in report if not o.passed]


# --- the cache ---------------------------------------------------------------------------------


def test_conversion_is_cached_with_its_log_and_reused(ncnn_backend, models, cache):
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    with deploykit.load(models["conv_bn_act"], "ncnn") as session:
        _matches_reference(session, models["conv_bn_act"], {"x": x})
    (entry,) = _entries(cache)
    assert "pass_ncnn" in (entry / "pnnx.log").read_text(), "pnnx's own log is kept"
    recorded = json.loads((entry / "entry.json").read_text())
    assert recorded["key"]["input_shapes"] == [[1, 3, 16, 16]]
    assert recorded["key"]["options"]["fp16"] is False, "f32 keeps the weights f32 (pnnx fp16=0)"
    assert recorded["key"]["pnnx"].startswith("pnnx ")
    before = (entry / "entry.json").stat().st_mtime_ns
    with deploykit.load(models["conv_bn_act"], "ncnn") as session:
        _matches_reference(session, models["conv_bn_act"], {"x": x})
    assert _entries(cache) == [entry] and (entry / "entry.json").stat().st_mtime_ns == before
    assert not [p for p in cache.iterdir() if p.name.startswith(".")], "no scratch directory is left"


def test_shapes_and_models_get_entries_of_their_own(ncnn_backend, models, cache):
    deploykit.load(models["symbolic_sequence"], "ncnn", shape="x:1x7x4").close()
    deploykit.load(models["symbolic_sequence"], "ncnn", shape="x:1x2x4").close()
    deploykit.load(models["conv_bn_act"], "ncnn").close()
    assert len(_entries(cache)) == 3


@pytest.mark.parametrize(
    "damage", ["truncate-bin", "edit-param", "garbage-entry", "no-entry-json", "bin-not-listed", "ports-lost"]
)
def test_a_corrupt_entry_is_rebuilt_not_trusted(ncnn_backend, models, cache, damage):
    path = models["conv_bn_act"]
    deploykit.load(path, "ncnn").close()
    (entry,) = _entries(cache)
    recorded = json.loads((entry / "entry.json").read_text())
    if damage == "truncate-bin":
        data = (entry / "model.ncnn.bin").read_bytes()
        (entry / "model.ncnn.bin").write_bytes(data[: len(data) // 2])
    elif damage == "edit-param":
        with (entry / "model.ncnn.param").open("a") as handle:
            handle.write("Sigmoid extra 1 1 out0 out9\n")
    elif damage == "garbage-entry":
        (entry / "entry.json").write_text("{not json")
    elif damage == "no-entry-json":
        (entry / "entry.json").unlink()
    elif damage == "bin-not-listed":  # its hash gone, a damaged .bin would go unnoticed
        del recorded["files"]["model.ncnn.bin"]
        (entry / "entry.json").write_text(json.dumps(recorded))
    else:
        del recorded["record"]["outputs"]
        (entry / "entry.json").write_text(json.dumps(recorded))
    broken = entry.stat().st_ino
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    with deploykit.load(path, "ncnn") as session:
        _matches_reference(session, path, {"x": x})
    (rebuilt,) = _entries(cache)
    assert rebuilt == entry and rebuilt.stat().st_ino != broken, "the entry was rebuilt (a new folder renamed in)"
    recorded = json.loads((rebuilt / "entry.json").read_text())
    from deploykit.io import file_sha256

    assert file_sha256(rebuilt / "model.ncnn.bin") == recorded["files"]["model.ncnn.bin"]
    assert file_sha256(rebuilt / "model.ncnn.param") == recorded["files"]["model.ncnn.param"]
    assert [p["blob"] for p in recorded["record"]["outputs"]] == ["out0"]


def test_an_entry_of_the_former_layout_is_left_alone_and_converted_again(ncnn_backend, models, cache):
    """Entries written before ncnn used the shared cache (version 1: ``param_sha256``/``bin_sha256`` at
    the top of ``entry.json``) are not read: the model converts into an entry of its own, and the old
    folder stays as it was (deploykit removes no files it does not know as its own)."""
    from deploykit.backends import ncnn_convert
    from deploykit.backends.converted import entry_digest
    from deploykit.io import file_sha256

    path = models["conv_bn_act"]
    deploykit.load(path, "ncnn").close()
    (entry,) = _entries(cache)
    recorded = json.loads((entry / "entry.json").read_text())
    former_key = {**recorded["key"], "entry_version": 1}
    former = cache / entry_digest(former_key)
    shutil.copytree(entry, former)
    hashes = {
        "param_sha256": file_sha256(former / "model.ncnn.param"),
        "bin_sha256": file_sha256(former / "model.ncnn.bin"),
    }
    (former / "entry.json").write_text(json.dumps({"key": former_key, **recorded["record"], **hashes}, indent=1))
    shutil.rmtree(entry)
    before = {p.name: p.read_bytes() for p in former.iterdir()}
    assert ncnn_convert.ENTRY_VERSION != 1
    x = np.random.default_rng(3).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    with deploykit.load(path, "ncnn") as session:
        _matches_reference(session, path, {"x": x})
    assert _entries(cache) == sorted([entry, former]), "converted again into an entry of the shared layout"
    assert {p.name: p.read_bytes() for p in former.iterdir()} == before, "the former entry is untouched"


def test_two_processes_converting_at_once_do_one_conversion(ncnn_backend, models, cache, tmp_path):
    """A wrapper around the real pnnx counts its runs; both processes start together on an empty cache."""
    from deploykit.backends.ncnn_convert import pnnx_executable
    from deploykit.io import file_sha256

    counter = tmp_path / "runs.txt"
    wrapper = tmp_path / "pnnx"
    wrapper.write_text(f'#!/bin/sh\necho run >> "{counter}"\nsleep 1\nexec "{pnnx_executable()}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    script = textwrap.dedent(f"""
        import numpy as np, deploykit
        with deploykit.load({str(models["classifier"])!r}, "ncnn") as session:
            y = session.run({{"images": np.ones((1, 3, 32, 32), np.float32)}})["probabilities"]
        print(float(y.sum()))
    """)
    environment = {**os.environ, "DEPLOYKIT_PNNX": str(wrapper), "PYTHONPATH": str(REPO)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", script], env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    results = [worker.communicate(timeout=300) for worker in workers]
    assert [w.returncode for w in workers] == [0, 0], [r[1].decode()[-2000:] for r in results]
    assert counter.read_text().count("run") == 1, "the second process waited and used the first one's entry"
    (entry,) = _entries(cache)
    recorded = json.loads((entry / "entry.json").read_text())
    assert file_sha256(entry / "model.ncnn.bin") == recorded["files"]["model.ncnn.bin"]
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]


# --- shapes and batches --------------------------------------------------------------------------


def test_a_dynamic_size_without_a_shape_is_refused_naming_the_input(ncnn_backend, models):
    with pytest.raises(UnsupportedModelError) as caught:
        deploykit.load(models["symbolic_sequence"], "ncnn")
    message = str(caught.value)
    assert message.startswith("input 'x' | axis 1 ('seq') of (1, seq, 4) is dynamic")
    assert "pnnx converts a model at fixed input shapes only" in message
    assert "Hint: give the shape as the backend option shape=NAME:SHAPE" in message
    assert "shape=x:1xNx4" in message


def test_the_shape_option_fixes_a_dynamic_size(ncnn_backend, models):
    path = models["symbolic_sequence"]
    x = np.random.default_rng(2).uniform(-1, 1, (1, 7, 4)).astype(np.float32)
    with deploykit.load(path, "ncnn", shape="x:1x7x4") as session:
        assert session.inputs["x"].shape == (1, 7, 4)
        _matches_reference(session, path, {"x": x})
        with pytest.raises(InputError, match=r"input 'x'"):
            session.run({"x": x[:, :2]})


def test_a_bad_shape_option_is_a_usage_error(ncnn_backend, models):
    with pytest.raises(UsageError, match=r"--shape 'x' \| expected NAME:SHAPE"):
        deploykit.load(models["symbolic_sequence"], "ncnn", shape="x")
    with pytest.raises(UsageError, match=r"input 'y' \| is not an input of 'symbolic_sequence.onnx'"):
        deploykit.load(models["symbolic_sequence"], "ncnn", shape="y:1x7x4")


def test_a_feed_that_is_a_view_gives_the_same_answer(ncnn_backend, models):
    """An image made as photos are (HWC → CHW, a transposed view) is not contiguous: deploykit copies it,
    and the copy must live until ncnn has taken it (once it did not: NaN and 1e21 came back)."""
    path = models["conv_bn_act"]
    hwc = np.random.default_rng(7).uniform(-1, 1, (16, 16, 3)).astype(np.float32)
    view = hwc.transpose(2, 0, 1)[None]
    assert not view.flags.c_contiguous
    with deploykit.load(path, "ncnn") as session:
        for _ in range(3):
            _matches_reference(session, path, {"x": view})
        np.testing.assert_array_equal(session.run({"x": view})["y"], session.run({"x": view.copy()})["y"])


def test_a_batch_runs_sample_by_sample(ncnn_backend, models):
    path = models["classifier"]
    images = np.random.default_rng(3).uniform(0, 1, (3, 3, 32, 32)).astype(np.float32)
    with deploykit.load(path, "ncnn") as session:
        assert session.inputs["images"].shape == ("batch", 3, 32, 32)
        assert session.outputs["probabilities"].shape == ("batch", 10)
        batched = session.run({"images": images})["probabilities"]
        assert batched.shape == (3, 10)
        _matches_reference(session, path, {"images": images})
        for index in range(3):
            single = session.run({"images": images[index : index + 1]})["probabilities"]
            np.testing.assert_array_equal(single[0], batched[index])


def test_a_batch_with_an_output_that_has_no_batch_axis_is_refused(ncnn_backend, tmp_path):
    """y is (batch, 4) but z = ReduceSum over everything is (1, 1): the samples cannot be joined."""
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).ravel().tolist())
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["y"]),
            helper.make_node("ReduceSum", ["y"], ["z"], keepdims=1),
        ],
        "unbatched_output",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 1]),
        ],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "unbatched_output.onnx"
    onnx.save(model, path)
    with deploykit.load(path, "ncnn") as session:
        np.testing.assert_array_equal(session.run({"x": np.ones((1, 4), np.float32)})["z"], [[4.0]])
        with pytest.raises(InputError) as caught:
            session.run({"x": np.ones((2, 4), np.float32)})
    assert str(caught.value).startswith("batch 2 | an ncnn Mat holds one sample")
    assert "output(s) z of 'unbatched_output.onnx' have no batch axis" in str(caught.value)


# --- models ncnn cannot take ------------------------------------------------------------------------


def test_an_operator_without_an_ncnn_layer_is_named(ncnn_backend, models):
    with pytest.raises(UnsupportedModelError) as caught:
        deploykit.load(models["int64_embedding"], "ncnn")
    assert str(caught.value) == (
        "backend 'ncnn' | cannot run 'int64_embedding.onnx': ncnn has no layer for operator Gather "
        "(node 'Gather_0'). Hint: run it on another backend (-b onnxruntime or -b openvino); or, when those nodes "
        "are post-processing (a detector's box decoding and NMS: comparisons, strided slices, casts), export the "
        "model without them and do that part in Python."
    )


def test_every_layer_ncnn_lacks_is_listed_with_the_output_types_and_a_hint_that_would_work(ncnn_backend, cache,
                                                                                           tmp_path):  # fmt: skip
    """A detector-like tail: comparisons, casts, a strided slice and an int64 index output. Casting the
    output alone would leave four operators ncnn cannot load, so the message names them all."""
    half = helper.make_tensor("half", TensorProto.FLOAT, [], [0.5])
    slicing = [helper.make_tensor(n, TensorProto.INT64, [1], [v]) for n, v in
               (("starts", 1), ("ends", 9), ("axes", 1), ("steps", 2))]  # fmt: skip
    nodes = [
        helper.make_node("Greater", ["x", "half"], ["gt"]),
        helper.make_node("Cast", ["gt"], ["gtf"], to=TensorProto.FLOAT),
        helper.make_node("Equal", ["x", "half"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["eqf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["gtf", "eqf"], ["s"]),
        helper.make_node("Slice", ["s", "starts", "ends", "axes", "steps"], ["sliced"]),
        helper.make_node("ArgMax", ["sliced"], ["index"], axis=1, keepdims=0),
        helper.make_node("Mul", ["sliced", "sliced"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("index", TensorProto.INT64, [1])], [half, *slicing],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), tmp_path / "t.onnx")
    with pytest.raises(UnsupportedModelError) as caught:
        deploykit.load(tmp_path / "t.onnx", "ncnn")
    message = caught.value.message
    assert message.startswith("backend 'ncnn' | cannot run 't.onnx': ncnn has no layer for ")
    for operator in ("torch.gt (node ", "torch.eq (node ", "Tensor.slice (node ", "Tensor.to ×2 (nodes "):
        assert operator in message, message
    assert "output 'index' has element type int64" in message and "a cast alone would not make it run" in message
    assert "another backend" in caught.value.hint and "post-processing" in caught.value.hint


def _node_test_model(name: str, directory: Path) -> Path:
    """One model of onnx's own node tests (shipped in the onnx package)."""
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the collection computes its expected outputs, some with inf/nan
        case = next(c for c in collect_testcases(None) if c.name == name)
    path = directory / f"{name}.onnx"
    onnx.save(case.model, path)
    return path


def test_an_attribute_pnnx_drops_is_a_refusal_not_another_graph(ncnn_backend, cache, tmp_path):
    """pnnx converts this LSTM but says 'ignore LSTM LSTM_0 param hidden_size=4': its graph would differ."""
    path = _node_test_model("test_lstm_with_initial_bias", tmp_path)
    with pytest.raises(UnsupportedModelError) as caught:
        deploykit.load(path, "ncnn")
    message = str(caught.value)
    assert message.startswith(
        "backend 'ncnn' | pnnx dropped attributes while converting 'test_lstm_with_initial_bias.onnx' "
        "(ignore LSTM LSTM_0 param hidden_size=4), so the ncnn graph would compute something else."
    )
    (entry,) = _entries(cache)
    assert f"Hint: try another backend; pnnx's log is {entry / 'pnnx.log'}." in message


def test_an_attribute_pnnx_drops_at_its_onnx_default_is_no_loss(ncnn_backend, cache, tmp_path):
    """pnnx says 'ignore Swish Swish_0 param alpha=1.0'; 1.0 is Swish's default, x*sigmoid(x) what it computes."""
    from deploykit.backends.ncnn_convert import ignored_params

    log = "ignore Swish Swish_0 param alpha=1.0\nignore Swish Swish_1 param alpha=2.0\nignore torch.where w param input=0.0\n"
    assert ignored_params(log) == ["ignore Swish Swish_1 param alpha=2.0", "ignore torch.where w param input=0.0"]
    path = _node_test_model("test_swish", tmp_path)
    x = np.linspace(-3, 3, 3).astype(np.float32)
    with deploykit.load(path, "ncnn") as session:
        _matches_reference(session, path, {"x": x})


def test_a_fixed_batch_larger_than_one_runs_in_one_mat(ncnn_backend, cache, tmp_path):
    """pnnx marks axis 0 of LRN's (5, 5, 5, 5) input as the batch: it becomes the Mat's batch, as in
    pnnx's model_ncnn.py, not an axis squeezed out (which only works at size 1)."""
    path = _node_test_model("test_lrn_default", tmp_path)
    x = np.random.default_rng(0).standard_normal((5, 5, 5, 5)).astype(np.float32)
    with deploykit.load(path, "ncnn") as session:
        _matches_reference(session, path, {"x": x})


def test_an_error_while_running_leaves_no_blob_to_outlive_the_net(ncnn_backend, cache, tmp_path):
    """pnnx makes a one-input Max a reduction: ncnn gives 1 value where the graph declares 3. The
    error is raised, the session closes, and the process lives on (ncnn used to abort: 'pool
    allocator destroyed too early')."""
    script = textwrap.dedent(
        """
        import numpy as np, onnx, sys
        from onnx import TensorProto, helper
        import deploykit
        from deploykit.errors import UnsupportedModelError
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
        graph = helper.make_graph([helper.make_node("Max", ["x"], ["y"])], "max", [x], [y])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), sys.argv[1])
        try:
            with deploykit.load(sys.argv[1], "ncnn") as session:
                session.run({"x": np.arange(3, dtype=np.float32)})
        except UnsupportedModelError as exc:
            print("refused:", exc.message)
        print("alive")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "max.onnx")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert "refused: output 'y' | ncnn gave 1 values as out0, the converted graph declares (3,)." in done.stdout
    assert done.stdout.rstrip().endswith("alive") and "destroyed too early" not in done.stderr


def test_pnnx_crashing_is_a_message_with_its_signal(ncnn_backend, cache, tmp_path):
    path = _node_test_model("test_spacetodepth", tmp_path)
    with pytest.raises(UnsupportedModelError) as caught:
        deploykit.load(path, "ncnn")
    message = str(caught.value)
    assert message.startswith("backend 'ncnn' | pnnx could not convert 'test_spacetodepth.onnx' (signal ")
    assert "Hint: run 'deploykit inspect' on the model for unusual ops, or try another backend." in message
    assert not cache.exists() or _entries(cache) == [], "a failed conversion leaves no entry"
    assert not cache.exists() or not [p for p in cache.iterdir() if p.is_dir()], "nor a scratch directory"


def test_an_integer_output_is_refused_by_name(ncnn_backend, tmp_path):
    graph = helper.make_graph(
        [helper.make_node("ArgMax", ["x"], ["index"], axis=1, keepdims=0)],
        "argmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5])],
        [helper.make_tensor_value_info("index", TensorProto.INT64, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "argmax.onnx")
    with pytest.raises(UnsupportedModelError, match=r"^output 'index' \| has element type int64; ncnn returns float32"):
        deploykit.load(tmp_path / "argmax.onnx", "ncnn")


def test_a_broken_onnx_file_gets_the_house_message(ncnn_backend, tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"this is no onnx model")
    with pytest.raises(deploykit.InvalidModelError, match=r"broken\.onnx"):
        deploykit.load(path, "ncnn")


def test_missing_pnnx_is_unavailable_naming_the_extra(ncnn_backend, models, cache, monkeypatch, tmp_path):
    monkeypatch.setenv("DEPLOYKIT_PNNX", str(tmp_path / "no-pnnx-here"))
    with pytest.raises(BackendUnavailableError) as caught:
        deploykit.load(models["conv_bn_act"], "ncnn")
    assert f"the pnnx executable {tmp_path / 'no-pnnx-here'} (from $DEPLOYKIT_PNNX=" in str(caught.value)
    assert "Hint: pip install 'deploykit[ncnn]'" in str(caught.value)


def test_missing_ncnn_is_unavailable_naming_the_extra():
    """In a fresh interpreter where ``import ncnn`` fails, as it does when the extra is not installed."""
    script = textwrap.dedent("""
        import sys
        sys.modules["ncnn"] = None  # makes 'import ncnn' raise ImportError
        from deploykit.backends.registry import get_backend
        print(get_backend("ncnn").unavailable_reason())
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.startswith("backend 'ncnn' | cannot import 'ncnn' (ModuleNotFoundError")
    assert "Hint: pip install 'deploykit[ncnn]'." in done.stdout


# --- native .param + .bin pairs ------------------------------------------------------------------------


def _pair(models, cache, tmp_path) -> tuple[Path, Path]:
    """The classifier's .param/.bin as pnnx wrote them (this test's cache holds only that entry)."""
    deploykit.load(models["classifier"], "ncnn").close()
    (entry,) = _entries(cache)
    param, weights = tmp_path / "model.param", tmp_path / "model.bin"
    shutil.copyfile(entry / "model.ncnn.param", param)
    shutil.copyfile(entry / "model.ncnn.bin", weights)
    return param, weights


def test_a_native_pair_runs_with_ncnn_blob_names(ncnn_backend, models, cache, tmp_path):
    param, _ = _pair(models, cache, tmp_path)
    images = np.random.default_rng(4).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)
    expected = run_reference(models["classifier"], {"images": images})["probabilities"]
    with deploykit.load(param, "ncnn") as session:
        assert list(session.inputs) == ["in0"] and list(session.outputs) == ["out0"]
        got = session.run({"in0": images[0]})["out0"]
    np.testing.assert_allclose(got.ravel(), expected.ravel(), atol=1e-5, rtol=1e-4)


def test_a_param_without_its_bin_is_refused(ncnn_backend, models, cache, tmp_path):
    param, weights = _pair(models, cache, tmp_path)
    weights.unlink()
    with pytest.raises(ModelNotFoundError) as caught:
        deploykit.load(param, "ncnn")
    assert str(caught.value).startswith(
        "model 'model.param' | has no weights file model.bin beside it; an ncnn model is a .param and a .bin"
    )


@pytest.mark.parametrize("how", ["longer", "shorter"])
def test_a_bin_of_another_model_is_refused(ncnn_backend, models, cache, tmp_path, how):
    param, weights = _pair(models, cache, tmp_path)
    data = weights.read_bytes()
    weights.write_bytes(data + b"\0" * 64 if how == "longer" else data[:-64])
    with pytest.raises(ModelError) as caught:
        deploykit.load(param, "ncnn")
    message = str(caught.value)
    if how == "longer":
        assert (
            f"its weights file model.bin holds {len(data) + 64} bytes, the layers in the .param read {len(data)}"
            in (message)
        )
    else:
        assert "model 'model.param' | " in message and "belongs to another model" in message
    assert "Hint: put the .bin written together with this .param next to it" in message


def test_a_missing_param_is_model_not_found(ncnn_backend, tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"model '.*nothing.param' \| does not exist"):
        deploykit.load(tmp_path / "nothing.param", "ncnn")


def test_a_param_that_is_not_ncnn_is_refused(ncnn_backend, tmp_path):
    (tmp_path / "text.param").write_text("hello\n")
    (tmp_path / "text.bin").write_bytes(b"")
    with pytest.raises(UnsupportedModelError, match=r"'text.param': it is not an ncnn .param file"):
        deploykit.load(tmp_path / "text.param", "ncnn")


# --- precisions, options, devices ---------------------------------------------------------------


def test_precisions_are_what_ncnn_applies_here(ncnn_backend, models):
    """Each precision offered really changes the numbers (a reduced one rounds), within its tolerance."""
    offered = ncnn_backend.precisions("cpu")
    assert offered[0] == "f32" and set(offered) <= {"f32", "f16", "bf16"}
    path = models["conv_bn_act"]
    x = np.random.default_rng(5).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    with deploykit.load(path, "ncnn", precision="f32") as session:
        f32 = session.run({"x": x})["y"]
        assert session.info.precision == "f32" and session.info.fallback is False
    for precision in offered[1:]:
        with deploykit.load(path, "ncnn", precision=precision) as session:
            assert session.info.precision == precision and session.info.fallback is False
            reduced = session.run({"x": x})["y"]
        assert not np.array_equal(reduced, f32), f"{precision} is offered, so it must round something"
        np.testing.assert_allclose(reduced, f32, atol=2e-2)


def test_a_precision_not_offered_here_is_reported_as_what_ran(ncnn_backend, models):
    missing = [p for p in ("f16", "bf16") if p not in ncnn_backend.precisions("cpu")]
    if not missing:
        pytest.skip(f"ncnn runs every precision on this machine's CPU: {ncnn_backend.precisions('cpu')}")
    with pytest.raises(PrecisionUnavailableError, match=rf"does not compute {missing[0]} natively; it runs"):
        deploykit.load(models["conv_bn_act"], "ncnn", precision=missing[0])
    with deploykit.load(models["conv_bn_act"], "ncnn", allow_fallback=True, precision=missing[0]) as session:
        assert session.info.precision == "f32"
        assert session.info.fallback is True
        assert f"ncnn runs f32 here, not {missing[0]}" in session.info.fallback_reason
        assert f"precision {missing[0]} → f32" in session.info.fallback_reason
        assert session.info.precision_label == f"{missing[0]} → f32"


def test_options_reach_ncnn(ncnn_backend, models):
    path = models["conv_bn_act"]
    x = np.random.default_rng(6).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    with deploykit.load(path, "ncnn", threads=1, light_mode=False, winograd=False, sgemm=False) as session:
        assert "1 thread(s)" in session.info.providers
        _matches_reference(session, path, {"x": x})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threads": -1}, r"option threads=-1 is out of range"),
        ({"winograd": "maybe"}, r"option winograd='maybe' is not true or false"),
        ({"precision": "int8"}, r"option precision='int8' is not one of f32, f16, bf16"),
        ({"vulkan": True}, r"unknown option\(s\) vulkan"),
    ],
)
def test_bad_options_are_refused_before_loading(ncnn_backend, models, options, message):
    with pytest.raises(UsageError, match=r"^backend 'ncnn' \| " + message):
        deploykit.load(models["conv_bn_act"], "ncnn", **options)


def test_vulkan_is_a_device_only_where_ncnn_finds_one(ncnn_backend, models):
    from deploykit.backends.ncnn import gpu_count

    devices = ncnn_backend.devices()
    assert devices[0] == "cpu"
    assert devices[1:] == [f"vulkan:{i}" for i in range(gpu_count())]
    if gpu_count():
        pytest.skip("this machine has a Vulkan device; the refusal below is for machines without one")
    assert "vulkan" in ncnn_backend.unavailable_devices()
    with pytest.raises(DeviceUnavailableError) as caught:
        deploykit.load(models["conv_bn_act"], "ncnn", "vulkan")
    assert str(caught.value).startswith("backend 'ncnn' | device 'vulkan' cannot be used: ncnn finds 0 Vulkan device")
    with deploykit.load(models["conv_bn_act"], "ncnn", "vulkan", allow_fallback=True) as session:
        assert session.info.device == "cpu" and session.info.fallback is True
        assert "Vulkan" in (session.info.fallback_reason or "")


def test_a_device_name_that_is_none_is_a_usage_error(ncnn_backend, models):
    with pytest.raises(UsageError, match=r"^backend 'ncnn' \| device 'gpu:x' is not a device name"):
        deploykit.load(models["conv_bn_act"], "ncnn", "gpu:x")
