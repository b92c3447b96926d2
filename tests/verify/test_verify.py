"""The verification subsystem on real runtimes: oracles, verdicts, isolation, inputs that are real or refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

import deploykit
from deploykit.cli.main import app
from deploykit.errors import UsageError
from deploykit.inputs import make_inputs, plan_inputs
from deploykit.model import read_interface
from deploykit.verify import VerifySettings, compare
from deploykit.verify.metrics import Thresholds, compare_array, thresholds_for

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _save(path: Path, nodes, inputs, outputs, inits=(), metadata=None) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in (metadata or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, path)
    return path


def _conv(path: Path, dims, metadata=None) -> Path:
    """A 3→4 channel 3x3 convolution + ReLU whose input shape is ``dims``."""
    weight = np.random.default_rng(0).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    return _save(
        path,
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dims[0], 4, dims[2], dims[3]])],
        [helper.make_tensor("w", TensorProto.FLOAT, weight.shape, weight.ravel())],
        metadata,
    )


# --- metrics and verdict rules --------------------------------------------------------------


def test_elementwise_worst_element_is_the_failing_one_and_rel_error_has_a_floor():
    reference = np.array([0.0, 100.0, 1.0], np.float32)
    actual = np.array([1e-6, 100.05, 1.5], np.float32)  # the 0 vs 1e-6 is within atol; 1.5 vs 1.0 fails
    metrics = compare_array("y", actual, reference, thresholds_for("f32"), reduced=False)
    assert not metrics.passed
    assert metrics.worst_index == (2,)
    assert metrics.max_rel_error == pytest.approx(0.5, rel=1e-5)  # not 1e-6 / tiny


def test_reduced_precision_is_judged_by_cosine_and_snr():
    rng = np.random.default_rng(0)
    reference = rng.normal(0, 1, 1000).astype(np.float32)
    close = reference + rng.normal(0, 0.01, 1000).astype(np.float32)  # ~40 dB: every element misses f32 atol
    assert not compare_array("y", close, reference, thresholds_for("f32"), reduced=False).passed
    metrics = compare_array("y", close, reference, thresholds_for("bf16"), reduced=True)
    assert metrics.passed and 35 < metrics.snr_db < 45
    noisy = reference + rng.normal(0, 1, 1000).astype(np.float32)  # ~0 dB
    assert not compare_array("y", noisy, reference, thresholds_for("bf16"), reduced=True).passed


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf")])
def test_bad_tolerances_are_refused_before_anything_runs(value):
    with pytest.raises(UsageError, match=r"--atol .* \| expected a finite number ≥ 0"):
        thresholds_for("f32", atol=value)
    with pytest.raises(UsageError, match=r"--min-cosine .* expected a number in \[0, 1\]"):
        Thresholds(), thresholds_for("bf16", min_cosine=2.0)


# --- oracles and verdicts on real runtimes --------------------------------------------------


def test_every_backend_passes_against_the_reference_evaluator(tmp_path):
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    report = compare(model, ["ort", "openvino", "opencv"])
    assert report.oracle.name == "onnx-reference" and report.oracle.independent
    assert [v.status for v in report.verdicts] == ["pass", "pass", "pass"]
    assert all(v.rule == "element-wise" and v.precision == "f32" for v in report.verdicts)
    assert report.exit_code() == 0


def test_without_an_oracle_backends_only_agree(tmp_path):
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    report = compare(model, ["ort", "openvino"], VerifySettings(oracle="none"))
    assert [v.status for v in report.verdicts] == ["unverified", "unverified"]
    assert all(v.agreement is True and v.label == "unverified" for v in report.verdicts)
    assert all(v.reason.startswith("no independent oracle: agrees with ") for v in report.verdicts)
    assert report.exit_code() == 0 and report.exit_code(require_oracle=True) == 1


def test_a_constant_reference_is_degenerate_not_pass(tmp_path):
    zeros = np.zeros((1, 4), np.float32)
    model = _save(
        tmp_path / "zero.onnx",
        [helper.make_node("Mul", ["x", "z"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor("z", TensorProto.FLOAT, [1, 4], zeros.ravel())],
    )
    report = compare(model, ["ort"])
    assert report.verdicts[0].status == "degenerate"
    assert "all zero" in report.verdicts[0].reason
    assert report.exit_code() == 1


def test_a_crashing_backend_is_an_error_row_and_the_others_are_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "crasher=tests.assets.crashing_backend:CrashingBackend")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    result = runner.invoke(app, ["compare", str(model), "-b", "crasher", "-b", "ort", "--json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    crashed, survived = data["verdicts"]
    assert crashed["status"] == "error" and "killed by signal SIGABRT" in crashed["reason"]
    assert survived["status"] == "pass"


def test_a_module_named_onnx_in_the_working_directory_does_not_break_workers(tmp_path, monkeypatch):
    (tmp_path / "onnx.py").write_text("raise SystemExit('shadowed')\n")
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    monkeypatch.chdir(tmp_path)
    report = compare(model, ["ort"])
    assert report.verdicts[0].status == "pass", report.verdicts[0].reason


def test_bf16_with_a_loose_enough_rule_passes_and_names_its_rule(tmp_path):
    model = _conv(tmp_path / "conv.onnx", [1, 3, 16, 16])
    report = compare(model, ["openvino"], VerifySettings(precision="f32,bf16,f16"))
    ran = {v.precision for v in report.verdicts}
    assert "f32" in ran
    for verdict in report.verdicts:
        assert verdict.status == "pass", verdict.describe()
        assert verdict.rule == ("element-wise" if verdict.precision == "f32" else "cosine/SNR")
    offered = deploykit.get_backend("openvino").precisions("CPU")
    for precision in ("bf16", "f16"):
        if precision not in offered:  # never a silent skip
            assert any(f"openvino:CPU {precision}: not supported here" in note for note in report.notes)


# --- inputs that are real or refused --------------------------------------------------------


def test_minus_one_dims_are_dynamic(tmp_path):
    model = _conv(tmp_path / "paddle.onnx", [-1, 3, 8, 8])
    spec = read_interface(model).inputs[0]
    assert spec.shape == (None, 3, 8, 8)
    feeds = make_inputs([spec], batch=2)
    assert feeds["x"].shape == (2, 3, 8, 8)
    assert compare(model, ["ort"], VerifySettings(batch=2)).verdicts[0].status == "pass"


def test_an_unfixed_spatial_size_without_metadata_is_an_error_naming_the_axis(tmp_path):
    model = _conv(tmp_path / "fcn.onnx", ["batch", 3, "height", "width"])
    result = runner.invoke(app, ["compare", str(model), "-b", "ort"])
    assert result.exit_code == 2
    assert "input 'x' | axis 2 ('height')" in result.output and "--shape x:" in result.output
    result = runner.invoke(app, ["compare", str(model), "-b", "ort", "--shape", "x:1x3x32x24", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs"] == {"x": [1, 3, 32, 24]}


def test_ultralytics_imgsz_metadata_fixes_the_size(tmp_path):
    model = _conv(tmp_path / "yolo.onnx", ["batch", 3, "h", "w"], {"imgsz": "[64, 48]", "names": "{0: 'a'}"})
    plan = plan_inputs(read_interface(model).inputs, read_interface(model).metadata_props)
    assert plan.shapes["x"] == (1, 3, 64, 48) and "Ultralytics" in plan.sources["x"]


def test_a_fixed_size_state_input_is_not_batched(tmp_path):
    model = _save(
        tmp_path / "vad.onnx",
        [helper.make_node("ReduceSum", ["state"], ["s"], keepdims=0), helper.make_node("Identity", ["x"], ["y"])],
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "batch", 8]),
            helper.make_tensor_value_info("sr", TensorProto.INT64, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
    )  # fmt: skip
    interface = read_interface(model)
    plan = plan_inputs(interface.inputs, batch=3)
    assert plan.shapes == {"x": (3, 16), "state": (2, 3, 8), "sr": (1,)}
    assert plan.batch_axes == {"x": 0, "state": 1, "sr": None}
    from deploykit.inputs import parse_input_settings

    feeds = make_inputs(interface.inputs, batch=3, settings=parse_input_settings(["sr:1:16000..16000"]))
    assert feeds["sr"].tolist() == [16000]
    settings = parse_input_settings(["sr:1:16000..16000"])
    result = deploykit.benchmark(
        model, deploykit.BenchPlan(backends=["ort"], batch=3, shapes=settings, iterations=3, warmup=0, isolate=False)
    )
    row = result.rows[0]
    assert row.config.batch == 3 and row.label.startswith("onnxruntime:cpu b3")
    assert row.verdict.status == "pass", row.verdict


def test_a_huge_shape_is_refused_before_allocating(tmp_path):
    model = _conv(tmp_path / "dyn.onnx", ["batch", 3, "h", "w"])
    result = runner.invoke(app, ["run", str(model), "-i", "x=random:100000000000x3x8x8"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "would take 69.8 TiB" in result.output and "at most" in result.output


def test_a_text_file_given_as_npy_is_named_for_what_it_is(tmp_path):
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    text = tmp_path / "x.npy"
    text.write_text("1, 2, 3\n")
    result = runner.invoke(app, ["run", str(model), "-i", f"x={text}"])
    assert result.exit_code == 2 and "is not a .npy file (it does not start with NumPy's header)" in result.output


def test_a_qdq_model_is_int8_and_judged_as_int8(tmp_path):
    """Weights stored as int8 behind DequantizeLinear: the model's precision is int8 on every backend."""
    weight = np.random.default_rng(0).integers(-100, 100, (4, 3, 3, 3)).astype(np.int8)
    model = _save(
        tmp_path / "qdq.onnx",
        [
            helper.make_node("DequantizeLinear", ["wq", "scale", "zero"], ["w"]),
            helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [
            helper.make_tensor("wq", TensorProto.INT8, weight.shape, weight.ravel()),
            helper.make_tensor("scale", TensorProto.FLOAT, [], [0.01]),
            helper.make_tensor("zero", TensorProto.INT8, [], [0]),
        ],
    )
    assert read_interface(model).precision == "int8"
    report = compare(model, ["ort", "openvino"], VerifySettings(precision="int8"))
    assert [v.precision for v in report.verdicts] == ["int8", "int8"]
    assert all(v.rule == "cosine/SNR" for v in report.verdicts)
    assert all(not v.failed for v in report.verdicts), [v.describe() for v in report.verdicts]
    assert not any("not supported here" in n for n in report.notes), report.notes


def test_a_precision_option_is_the_sweep_never_overridden(tmp_path):
    """`compare -o precision=P` used to run f32 (the default sweep overwrote it) and pass."""
    from deploykit.backends.registry import get_backend
    from deploykit.errors import PrecisionUnavailableError
    from deploykit.verify.check import expand_candidates

    candidates, _ = expand_candidates(["openvino"], ["f32"], options={"precision": "bf16"})
    assert [(c.precision, c.options.get("precision")) for c in candidates] == [("bf16", "bf16")]
    with pytest.raises(UsageError, match=r"precision \| given twice: --option precision=f16 and --precision bf16"):
        expand_candidates(["openvino"], ["bf16"], options={"precision": "f16"})
    native = get_backend("openvino").precisions("CPU")
    missing = [p for p in ("bf16", "f16") if p not in native]
    model = _conv(tmp_path / "conv.onnx", [1, 3, 8, 8])
    if missing:  # a CPU without it: the compare is refused up front, not run at f32
        with pytest.raises((UsageError, PrecisionUnavailableError), match=rf"{missing[0]}"):
            compare(model, ["openvino"], VerifySettings(options={"precision": missing[0]}))
    report = compare(model, ["openvino"], VerifySettings(options={"precision": native[-1]}))
    assert [v.precision for v in report.verdicts] == [native[-1]]


def test_an_int8_model_is_judged_as_int8_at_the_default_precision(tmp_path):
    from deploykit.verify.check import expand_candidates

    candidates, notes = expand_candidates(["ort", "openvino"], ["f32"], model_precision="int8")
    assert [c.precision for c in candidates] == ["int8", "int8"], notes
    _, notes = expand_candidates(["ort"], ["int8"], model_precision="f32")
    assert any("int8: the model is not quantized (run 'deploykit quantize' first" in n for n in notes)
