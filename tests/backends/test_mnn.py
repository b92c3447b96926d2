"""The MNN backend beyond the contract: the conversion cache, names/types/layout, native ``.mnn`` files,
precisions, options, a clean stdout, and every refusal a user can meet, with its message. Real MNN,
no mocks; hardware-dependent expectations come from ``MnnBackend.precisions``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
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
    ModelError,
    ModelNotFoundError,
    PrecisionUnavailableError,
    UnsupportedModelError,
    UsageError,
)
from deploykit.verify.metrics import Thresholds, compare_outputs
from tests.assets.paths import REPO, missing_asset
from tests.assets.reference import run_reference
from tests.assets.samples import tiny_classifier

F32 = Thresholds(atol=1e-5, rtol=1e-4)


@pytest.fixture(scope="module")
def mnn_backend():
    backend = get_backend("mnn")
    reason = backend.unavailable_reason()
    if reason:
        missing_asset("the mnn backend's runtime", reason)
    return backend


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A cache of this test's own, so what it finds there is what it made."""
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "mnn"


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mnn-models") / "classifier.onnx"
    onnx.save(tiny_classifier(), path)
    return path


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.iterdir() if p.is_dir() and not p.name.startswith("."))


def _images(batch: int = 1, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, (batch, 3, 32, 32)).astype(np.float32)


def _matches_reference(session, path: Path, feeds: dict[str, np.ndarray]) -> None:
    outputs = session.run(feeds)
    report = compare_outputs(outputs, run_reference(path, feeds), F32)
    assert all(o.passed for o in report), [o.describe() for o in report if not o.passed]


def _save(tmp_path: Path, name: str, nodes, inputs, outputs, initializers=()) -> Path:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


# --- the cache ---------------------------------------------------------------------------------


def test_conversion_is_cached_with_its_log_and_reused(mnn_backend, classifier, cache):
    with deploykit.load(classifier, "mnn") as session:
        _matches_reference(session, classifier, {"images": _images()})
    (entry,) = _entries(cache)
    assert "Converted Success" in (entry / "convert.log").read_text(), "the converter's own log is kept"
    recorded = json.loads((entry / "entry.json").read_text())
    assert recorded["key"]["converter"] == mnn_backend.version()
    assert set(recorded["files"]) == {"model.mnn", "convert.log"}
    before = (entry / "entry.json").stat().st_mtime_ns
    with deploykit.load(classifier, "mnn") as session:
        _matches_reference(session, classifier, {"images": _images(seed=1)})
    assert _entries(cache) == [entry] and (entry / "entry.json").stat().st_mtime_ns == before


def test_a_model_named_relative_to_the_working_folder_converts(mnn_backend, classifier, tmp_path, monkeypatch):
    """``deploykit compare demo/m.onnx``: the converter runs in its own folder, so it is given the model's
    absolute path (it said 'Model File Does Not Exist' for the relative one); a relative cache folder too."""
    (tmp_path / "demo").mkdir()
    shutil.copy(classifier, tmp_path / "demo" / "m.onnx")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEPLOYKIT_CACHE_DIR", "cache")
    with deploykit.load(Path("demo/m.onnx"), "mnn") as session:
        _matches_reference(session, classifier, {"images": _images()})
    assert len(_entries(tmp_path / "cache" / "mnn")) == 1


def test_a_damaged_entry_is_rebuilt_not_trusted(mnn_backend, classifier, cache):
    deploykit.load(classifier, "mnn").close()
    (entry,) = _entries(cache)
    size = (entry / "model.mnn").stat().st_size
    (entry / "model.mnn").write_bytes((entry / "model.mnn").read_bytes()[: size // 2])
    with deploykit.load(classifier, "mnn") as session:
        _matches_reference(session, classifier, {"images": _images()})
    assert _entries(cache) == [entry] and (entry / "model.mnn").stat().st_size == size
    recorded = json.loads((entry / "entry.json").read_text())
    from deploykit.io import file_sha256

    assert file_sha256(entry / "model.mnn") == recorded["files"]["model.mnn"]


# --- the interface -----------------------------------------------------------------------------


def test_onnx_names_types_and_a_dynamic_batch_are_kept(mnn_backend, classifier, cache):
    with deploykit.load(classifier, "mnn", threads=1) as session:
        assert list(session.inputs) == ["images"] and list(session.outputs) == ["probabilities"]
        assert session.inputs["images"].shape == ("batch", 3, 32, 32)
        for batch in (1, 3):
            _matches_reference(session, classifier, {"images": _images(batch)})
        assert session.info.precision == "f32" and session.info.device == "cpu"
        assert "1 thread(s)" in session.info.providers and "winograd off" in session.info.providers


def test_integer_and_boolean_tensors_come_back_in_the_graphs_type(mnn_backend, cache, tmp_path):
    """MNN holds int64 and bool as int32; the session hands back what the ONNX graph declares."""
    path = _save(
        tmp_path,
        "typed",
        [
            helper.make_node("Add", ["i", "i"], ["doubled"]),
            helper.make_node("Greater", ["x", "zero"], ["positive"]),
        ],
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, [2, 3]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("doubled", TensorProto.INT64, [2, 3]),
            helper.make_tensor_value_info("positive", TensorProto.BOOL, [2, 3]),
        ],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )
    feeds = {
        "i": np.arange(6, dtype=np.int64).reshape(2, 3) - 2,
        "x": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
    }
    with deploykit.load(path, "mnn") as session:
        got = session.run(feeds)
    assert got["doubled"].dtype == np.int64 and got["positive"].dtype == np.bool_
    np.testing.assert_array_equal(got["doubled"], feeds["i"] * 2)
    np.testing.assert_array_equal(got["positive"], feeds["x"] > 0)


def test_an_int64_value_outside_int32_is_refused_by_name(mnn_backend, cache, tmp_path):
    path = _save(
        tmp_path,
        "indices",
        [helper.make_node("Add", ["i", "i"], ["doubled"])],
        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("doubled", TensorProto.INT64, [2])],
    )
    with deploykit.load(path, "mnn") as session:
        with pytest.raises(deploykit.InputError, match=r"input 'i' \| holds values outside int32"):
            session.run({"i": np.array([1, 2**40], np.int64)})


# --- refusals ----------------------------------------------------------------------------------


def test_every_layer_mnn_cannot_take_is_named_with_its_nodes(mnn_backend, cache, tmp_path):
    value = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])]
    path = _save(
        tmp_path,
        "hardmax",
        [
            helper.make_node("Hardmax", ["x"], ["a"], name="hard_one"),
            helper.make_node("Relu", ["x"], ["r"], name="fine"),
            helper.make_node("Hardmax", ["r"], ["b"], name="hard_two"),
        ],
        value,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3, 3]) for n in ("a", "b")],
    )
    with pytest.raises(UnsupportedModelError) as caught:
        deploykit.load(path, "mnn")
    message = str(caught.value)
    assert (
        "backend 'mnn' | MNN's converter cannot take 2 layer(s) of 'hardmax.onnx': it has no conversion for Hardmax (hard_one, hard_two)."
        in message
    )
    assert "fine" not in message and "Hint: run the model on another backend" in message
    assert _entries(cache) == [] and not [p for p in cache.iterdir() if p.name.startswith(".")], "nothing is cached"


def test_a_converter_failure_is_a_message_with_its_reason(mnn_backend, cache, tmp_path):
    path = _save(
        tmp_path,
        "one_input_sum",
        [helper.make_node("Sum", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    # MNN 3.6's converter crashes (SIGSEGV) after saying why: the child process takes the crash
    with pytest.raises(UnsupportedModelError) as caught:
        deploykit.load(path, "mnn")
    assert re.search(r"MNN's converter could not convert 'one_input_sum.onnx' \((exit status|signal) \d+\): "
                     r"Not support 1 input for Sum op", str(caught.value)), str(caught.value)  # fmt: skip


def test_a_device_other_than_the_cpu_is_a_usage_error(mnn_backend, classifier, cache):
    with pytest.raises(UsageError, match=r"backend 'mnn' \| device 'gpu' is not a device .*expected cpu"):
        deploykit.load(classifier, "mnn", device="gpu")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"threads": -1}, "threads"),
        ({"memory": "huge"}, "memory"),
        ({"winograd": "maybe"}, "winograd"),
    ],
)
def test_bad_options_are_refused_before_loading(mnn_backend, classifier, options, message):
    with pytest.raises(UsageError, match=message):
        deploykit.load(classifier, "mnn", **options)


def test_the_converter_turned_off_is_unavailable_and_says_how_to_turn_it_on(
    mnn_backend, classifier, cache, monkeypatch
):
    monkeypatch.setenv("DEPLOYKIT_MNN_CONVERTER", "off")
    with pytest.raises(BackendUnavailableError, match=r"MNN's converter is turned off") as caught:
        deploykit.load(classifier, "mnn")
    assert "unset $DEPLOYKIT_MNN_CONVERTER" in (caught.value.hint or "")


# --- native .mnn files -------------------------------------------------------------------------


def test_a_native_file_opens_with_the_names_it_holds(mnn_backend, classifier, cache, tmp_path):
    deploykit.load(classifier, "mnn").close()
    (entry,) = _entries(cache)
    native = tmp_path / "alone.mnn"
    shutil.copyfile(entry / "model.mnn", native)
    images = _images(1)
    with deploykit.load(native, "mnn") as session:
        assert list(session.inputs) == ["images"] and list(session.outputs) == ["probabilities"]
        # without deploykit's .json the shapes are the file's own: MNN stores a dynamic batch as 1
        assert session.inputs["images"].shape == (1, 3, 32, 32) and session.outputs["probabilities"].shape is None
        got = session.run({"images": images})["probabilities"]
    np.testing.assert_allclose(
        got, run_reference(classifier, {"images": images})["probabilities"], atol=1e-5, rtol=1e-4
    )


def test_a_missing_or_foreign_native_file_is_refused(mnn_backend, tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        deploykit.load(tmp_path / "none.mnn", "mnn")
    foreign = tmp_path / "text.mnn"
    foreign.write_text("not a model at all")
    with pytest.raises(UnsupportedModelError, match=r"cannot read 'text.mnn': it is not an MNN model") as caught:
        deploykit.load(foreign, "mnn")
    assert "deploykit export mnn" in (caught.value.hint or "")


def test_a_broken_interface_file_beside_a_native_file_is_named(mnn_backend, classifier, cache, tmp_path):
    deploykit.load(classifier, "mnn").close()
    (entry,) = _entries(cache)
    shutil.copyfile(entry / "model.mnn", tmp_path / "m.mnn")
    (tmp_path / "m.json").write_text('{"format": "something-else"}')
    with pytest.raises(ModelError, match=r"model 'm.mnn' \| its interface file m.json cannot be read"):
        deploykit.load(tmp_path / "m.mnn", "mnn")


# --- precisions and options -------------------------------------------------------------------


def test_precisions_are_what_mnn_applies_here(mnn_backend, classifier, cache):
    offered = mnn_backend.precisions("cpu")
    assert offered[0] == "f32" and set(offered) <= {"f32", "f16", "bf16"}
    for precision in ("f16", "bf16"):
        if precision in offered:
            with deploykit.load(classifier, "mnn", precision=precision) as session:
                assert session.info.precision == precision
            continue
        with pytest.raises(PrecisionUnavailableError, match=rf"does not compute {precision} natively; it runs"):
            deploykit.load(classifier, "mnn", precision=precision)
        with deploykit.load(classifier, "mnn", allow_fallback=True, precision=precision) as session:
            assert session.info.precision == "f32" and session.info.fallback is True
            assert f"MNN runs f32 here, not {precision}" in session.info.fallback_reason


def test_options_reach_mnn(mnn_backend, classifier, cache):
    with deploykit.load(classifier, "mnn", threads=2, winograd=True, memory="low", power="high") as session:
        assert "2 thread(s)" in session.info.providers and "winograd on" in session.info.providers
        assert session.info.options == {"threads": 2, "winograd": True, "memory": "low", "power": "high"}
        outputs = session.run({"images": _images()})
    assert outputs["probabilities"].shape == (1, 10)


def test_a_closed_session_refuses_to_run(mnn_backend, classifier, cache):
    session = deploykit.load(classifier, "mnn")
    session.close()
    with pytest.raises(UsageError, match="is closed"):
        session.run({"images": _images()})


# --- stdout ------------------------------------------------------------------------------------


def test_mnn_prints_nothing_on_stdout(mnn_backend, classifier, tmp_path):
    """MNN's banner (at import) and its precision lines (at load) would break --json on stdout."""
    script = textwrap.dedent(f"""
        import numpy as np, deploykit
        backend = deploykit.get_backend("mnn")
        backend.precisions("cpu")
        with deploykit.load({str(classifier)!r}, "mnn", precision="bf16", allow_fallback=True) as session:
            session.run({{"images": np.ones((1, 3, 32, 32), np.float32)}})
    """)
    environment = {**os.environ, "PYTHONPATH": str(REPO), "DEPLOYKIT_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", script], env=environment, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == b""
