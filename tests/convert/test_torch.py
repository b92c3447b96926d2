"""PyTorch → ONNX: exports of real models, checked against PyTorch on every backend."""

from __future__ import annotations

import json
import pickle

import numpy as np
import onnx
import pytest

from tests.assets.paths import REPO, darknet_image, mobilenet_v2_weights, require_module

torch = require_module("torch", "pip install 'deploykit[torch]'", "PyTorch")

import deploykit  # noqa: E402
from deploykit.convert.torch import TorchExportSettings, convert_torch  # noqa: E402
from deploykit.errors import ConversionError, ParityError, UsageError  # noqa: E402
from tests.assets import torch_models  # noqa: E402

MODELS = REPO / "tests" / "assets" / "torch_models.py"
ALL = ("onnxruntime", "openvino", "opencv")


def _dims(path, name):
    model = onnx.load(str(path))
    value = next(v for v in model.graph.input if v.name == name)
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_cnn_with_dynamic_batch_on_every_backend(tmp_path):
    out = tmp_path / "cnn.onnx"
    report = convert_torch(
        torch_models.small_cnn(),
        (torch.randn(1, 3, 32, 32),),
        out,
        verify_backends=ALL,
        export=TorchExportSettings(dynamic={"images": {0: "batch"}}, exporter="torchscript"),
    )
    assert report.passed and report.written and out.is_file()
    assert [v.candidate for v in report.verdicts] == list(ALL)
    assert all(v.status == "pass" and v.oracle.name == "pytorch" for v in report.verdicts)
    assert all({o.case for o in v.outputs} == {0, 1} for v in report.verdicts), "a second batch size is checked"
    assert report.input_sets[1] == {"images": [2, 3, 32, 32]}
    assert _dims(out, "images") == ["batch", 3, 32, 32]
    meta = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
    assert json.loads(meta["deploykit.export_options"])["dynamic"] == {"images": {"0": "batch"}}
    assert meta["deploykit.converter"].startswith("torch ")
    with deploykit.load(out, "ort") as session:
        x = np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32)
        with torch.no_grad():
            expected = torch_models.small_cnn().eval()(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(session(x)["output"], expected, atol=1e-4, rtol=1e-3)


def test_a_pass_on_tiny_outputs_says_it_proved_little_and_how_to_prove_more(tmp_path):
    report = convert_torch(
        torch_models.tiny_logits(), (torch.randn(1, 3, 16, 16),), tmp_path / "tiny.onnx",
        verify_backends=("onnxruntime",), export=TorchExportSettings(exporter="torchscript"),
    )  # fmt: skip
    assert report.passed
    verdict = report.verdicts[0]
    assert verdict.rule == "element-wise, atol scaled to the reference"
    assert all(o.atol_scaled is not None and o.atol_scaled < 1e-8 for o in verdict.outputs)
    note = next(n for n in report.notes if "the check proved little" in n)
    assert "random weights" in note and "--weights" in note and "--inputs" in note


@pytest.mark.slow
def test_dynamo_exporter_names_dynamic_axes(tmp_path):
    out = tmp_path / "cnn_dynamo.onnx"
    report = convert_torch(
        f"{MODELS}:small_cnn",
        output=out,
        inputs=["images:1x3x32x32"],
        export=TorchExportSettings(dynamic={"images": {0: "batch"}}, exporter="dynamo", opset=18),
    )
    assert report.exporter == "dynamo" and report.opset == 18 and report.passed
    assert _dims(out, "images") == ["batch", 3, 32, 32]
    assert report.input_sets[1]["images"][0] == 2


def test_two_inputs_with_int64_ids(tmp_path):
    out = tmp_path / "tagger.onnx"
    report = convert_torch(
        f"{MODELS}:token_tagger",
        output=out,
        inputs=["ids:2x7:int64:0..50", "mask:2x7"],
        verify_backends=ALL,
        export=TorchExportSettings(
            output_names=["tokens", "pooled"], dynamic={"ids": {1: "seq"}, "mask": {1: "seq"}}, exporter="torchscript"
        ),
    )
    assert report.passed, [v.describe() for v in report.verdicts]
    with deploykit.load(out) as session:
        assert session.inputs["ids"].dtype == np.int64
        assert session.inputs["ids"].shape == (2, "seq")
        assert list(session.outputs) == ["tokens", "pooled"]


def test_lstm_with_dynamic_sequence(tmp_path):
    out = tmp_path / "lstm.onnx"
    report = convert_torch(
        f"{MODELS}:sequence_lstm",
        output=out,
        inputs=["sequence:1x9x6"],
        verify_backends=("onnxruntime", "openvino"),
        export=TorchExportSettings(dynamic={"sequence": {1: "steps"}}, exporter="torchscript"),
    )
    assert report.passed
    assert report.input_sets[1] == {"sequence": [1, 18, 6]}
    assert "LSTM" in report.op_histogram


@pytest.mark.slow
def test_auto_falls_back_when_dynamo_rejects_control_flow(tmp_path):
    out = tmp_path / "guarded.onnx"
    report = convert_torch(
        f"{MODELS}:guarded_scale", output=out, inputs=["x:3x4"], export=TorchExportSettings(opset=18, exporter="auto")
    )
    assert report.exporter == "torchscript"
    assert any(n.startswith("exporter dynamo failed") and n.endswith("used torchscript") for n in report.notes)
    assert report.passed and out.is_file()


def test_auto_below_opset_18_uses_torchscript(tmp_path):
    report = convert_torch(f"{MODELS}:small_cnn", output=tmp_path / "a.onnx", inputs=["images:1x3x16x16"])
    assert report.exporter == "torchscript" and report.opset == 17


def test_torchscript_archive_from_cli(tmp_path):
    from typer.testing import CliRunner

    from deploykit.cli.main import app

    archive = tmp_path / "traced.pt"
    torch.jit.save(torch.jit.trace(torch_models.small_cnn().eval(), torch.randn(1, 3, 16, 16)), str(archive))
    out, report_dir = tmp_path / "traced.onnx", tmp_path / "conv"
    result = CliRunner().invoke(
        app,
        [
            "convert",
            "torch",
            str(archive),
            "-i",
            "x:1x3x16x16",
            "-o",
            str(out),
            "--report",
            str(report_dir),
            "--verify-backends",
            "ort,openvino,opencv",
        ],
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in report_dir.iterdir()) == ["report.json"]
    data = json.loads((report_dir / "report.json").read_text())
    assert data["passed"] and data["exporter"] == "torchscript" and data["parameter_count"] > 0
    assert "TorchScript archives go through the TorchScript exporter" in data["notes"][0]
    assert "Conv" in data["op_histogram"]


def test_pickled_module_needs_trust(tmp_path):
    path = tmp_path / "whole.pt"
    torch.save(torch_models.small_cnn(), str(path))
    with pytest.raises(ConversionError, match=r"holds pickled Python objects.*unpickling runs code.*--trust-pickle"):
        convert_torch(str(path), output=tmp_path / "x.onnx", inputs=["images:1x3x16x16"])
    report = convert_torch(
        str(path),
        output=tmp_path / "x.onnx",
        inputs=["images:1x3x16x16"],
        export=TorchExportSettings(trust_pickle=True),
    )
    assert report.passed


def test_state_dict_alone_says_to_pass_the_factory(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save(torch_models.small_cnn().state_dict(), str(path))
    with pytest.raises(
        ConversionError, match=r"is a state_dict \(weights only\), not a model.*file.py:factory --weights"
    ):
        convert_torch(str(path), output=tmp_path / "x.onnx", inputs=["images:1x3x16x16"])


def test_weights_are_loaded_strictly(tmp_path):
    trained = torch_models.small_cnn()
    with torch.no_grad():
        trained.head.bias.fill_(3.0)
    path = tmp_path / "trained.pt"
    torch.save({"state_dict": trained.state_dict()}, str(path))
    out = tmp_path / "trained.onnx"
    convert_torch(
        f"{MODELS}:small_cnn", output=out, inputs=["images:1x3x16x16"], export=TorchExportSettings(weights=str(path))
    )
    bias = next(t for t in onnx.load(str(out)).graph.initializer if t.name.endswith("head.bias"))
    np.testing.assert_array_equal(onnx.numpy_helper.to_array(bias), np.full(5, 3.0, np.float32))


def test_weights_for_another_architecture(tmp_path):
    path = tmp_path / "lstm.pt"
    torch.save(torch_models.sequence_lstm().state_dict(), str(path))
    with pytest.raises(ConversionError) as caught:
        convert_torch(
            f"{MODELS}:small_cnn",
            output=tmp_path / "x.onnx",
            inputs=["images:1x3x16x16"],
            export=TorchExportSettings(weights=str(path)),
        )
    message = str(caught.value)
    assert "do not fit the model" in message
    assert "missing: conv1.weight" in message and "unexpected: lstm.weight_ih_l0" in message
    assert not (tmp_path / "x.onnx").exists()


def test_mismatched_shapes_are_listed(tmp_path):
    state = torch_models.small_cnn().state_dict()
    state["head.weight"] = torch.zeros(7, 16)
    path = tmp_path / "w.pt"
    torch.save(state, str(path))
    with pytest.raises(ConversionError, match=r"1 mismatched: head.weight: file \(7, 16\) vs model \(5, 16\)"):
        convert_torch(
            f"{MODELS}:small_cnn",
            output=tmp_path / "x.onnx",
            inputs=["images:1x3x16x16"],
            export=TorchExportSettings(weights=str(path)),
        )


def test_parity_failure_writes_nothing_and_keeps_the_old_file(tmp_path):
    out = tmp_path / "noisy.onnx"
    out.write_bytes(b"a good model from yesterday")
    with pytest.raises(ParityError) as caught:
        convert_torch(f"{MODELS}:noisy_model", output=out, inputs=["x:2x5"])
    message = str(caught.value)
    assert "verification failed: onnxruntime: fail against pytorch (f32, element-wise) — output 'output' |" in message
    assert "worst element [" in message and "nothing was written" in message
    assert out.read_bytes() == b"a good model from yesterday"
    assert caught.value.report is not None and not caught.value.report.passed
    assert [p.name for p in tmp_path.iterdir()] == ["noisy.onnx"], "no temporary files left behind"


def test_keep_on_mismatch_writes_and_still_fails(tmp_path):
    out = tmp_path / "noisy.onnx"
    with pytest.raises(ParityError, match="was kept because of --keep-on-mismatch"):
        convert_torch(f"{MODELS}:noisy_model", output=out, inputs=["x:2x5"], keep_on_mismatch=True)
    assert out.is_file()


def test_simplify_keeps_parity(tmp_path):
    require_module("onnxslim", "pip install 'deploykit[torch]'")
    report = convert_torch(
        f"{MODELS}:small_cnn",
        output=tmp_path / "s.onnx",
        inputs=["images:1x3x16x16"],
        export=TorchExportSettings(simplify=True),
    )
    assert report.simplified and report.passed


@pytest.mark.parametrize(
    ("source", "inputs", "pattern"),
    [
        ("no_such_module_xyz:build", ["x:1x3"], r"cannot import module 'no_such_module_xyz'"),
        (f"{MODELS}:missing_name", ["x:1x3"], r"has no callable 'missing_name'"),
        (
            f"{MODELS}:broken_factory",
            ["x:1x3"],
            r"calling broken_factory\(\) raised RuntimeError: config file 'net.yaml' not found",
        ),
        (f"{MODELS}:not_a_module", ["x:1x3"], r"returned dict, expected a torch.nn.Module"),
        ("nowhere/model.py:build", ["x:1x3"], r"file 'nowhere/model.py' does not exist"),
        (
            f"{MODELS}:token_tagger",
            ["ids:2x7:int64"],
            r"1 given \(ids\), but TokenTagger.forward takes 2 \(ids, mask\)",
        ),
        (f"{MODELS}:small_cnn", ["images:1x3x16"], r"forward\(\) failed on the example inputs"),
        (f"{MODELS}:small_cnn", [], r"no example inputs or input specs were given"),
    ],
)
def test_bad_sources_and_inputs(tmp_path, source, inputs, pattern):
    with pytest.raises(ConversionError, match=pattern):
        convert_torch(source, output=tmp_path / "x.onnx", inputs=inputs)
    assert list(tmp_path.iterdir()) == []


def test_unsupported_op_in_the_chosen_exporter(tmp_path):
    with pytest.raises(
        ConversionError,
        match=r"the torchscript exporter failed: .*svd.*Hint: an op may have no ONNX equivalent",
    ):
        convert_torch(
            f"{MODELS}:uses_svd",
            output=tmp_path / "x.onnx",
            inputs=["x:3x3"],
            export=TorchExportSettings(exporter="torchscript"),
        )


def test_output_directory_must_exist(tmp_path):
    with pytest.raises(UsageError, match=r"directory '.*missing' does not exist"):
        convert_torch(f"{MODELS}:small_cnn", output=tmp_path / "missing" / "x.onnx", inputs=["images:1x3x8x8"])


@pytest.mark.parametrize(
    ("spec", "pattern"),
    [
        ("images", r"expected NAME:SHAPE"),
        ("images:1xthree", r"shape '1xthree' \| not a list of positive sizes"),
        ("ids:1x4:complex", r"dtype 'complex' is not one of"),
        ("ids:1x4:int64:9..3", r"value range '9..3' is not LOW..HIGH"),
    ],
)
def test_input_specs_that_do_not_parse(spec, pattern):
    from deploykit.convert.specs import parse_input_spec

    with pytest.raises(UsageError, match=pattern):
        parse_input_spec(spec)


def test_dynamic_axis_errors():
    from deploykit.convert.specs import parse_dynamic, parse_input_spec

    specs = [parse_input_spec("images:1x3x8x8")]
    with pytest.raises(UsageError, match=r"expected NAME:AXIS=LABEL"):
        parse_dynamic(["images:batch"], specs)
    with pytest.raises(UsageError, match=r"dynamic axis 4 of 'images' \| the input has rank 4"):
        parse_dynamic(["images:4=x"], specs)
    with pytest.raises(UsageError, match=r"dynamic axis for 'x' \| not one of the inputs \(images\)"):
        parse_dynamic(["x:0=batch"], specs)


def test_cli_failure_exits_1_without_traceback(tmp_path):
    from typer.testing import CliRunner

    from deploykit.cli.main import app

    result = CliRunner().invoke(
        app, ["convert", "torch", f"{MODELS}:noisy_model", "-i", "x:2x5", "-o", str(tmp_path / "n.onnx")]
    )
    assert result.exit_code == 1
    assert "error: PyTorch → ONNX 'n.onnx' | verification failed" in result.stderr
    assert "Traceback" not in result.output and not (tmp_path / "n.onnx").exists()


def _preprocess(path):
    import cv2

    image = cv2.imread(str(path))[:, :, ::-1]
    height, width = image.shape[:2]
    scale = 256 / min(height, width)
    image = cv2.resize(image, (round(width * scale), round(height * scale)), interpolation=cv2.INTER_LINEAR)
    height, width = image.shape[:2]
    top, left = (height - 224) // 2, (width - 224) // 2
    image = image[top : top + 224, left : left + 224] / 255.0
    image = (image - (0.485, 0.456, 0.406)) / (0.229, 0.224, 0.225)
    return image.transpose(2, 0, 1)[None].astype(np.float32)


@pytest.mark.slow
def test_pretrained_mobilenet_v2_recognises_an_eagle(tmp_path):
    weights = mobilenet_v2_weights()
    out = tmp_path / "mobilenet_v2.onnx"
    report = convert_torch(
        f"{REPO / 'models' / 'torch' / 'mobilenet_v2.py'}:build",
        output=out,
        inputs=["images:1x3x224x224"],
        verify_backends=ALL,
        export=TorchExportSettings(dynamic={"images": {0: "batch"}}, weights=str(weights)),
    )
    assert report.passed, [v.describe() for v in report.verdicts]
    labels = (REPO / "models" / "labels" / "imagenet.txt").read_text().splitlines()
    x = _preprocess(darknet_image("eagle.jpg"))
    for backend, options in (("onnxruntime", {}), ("openvino", {"precision": "f32"}), ("opencv", {})):
        with deploykit.load(out, backend, **options) as session:
            logits = session(x)["output"][0]
        assert labels[int(np.argmax(logits))] == "bald eagle", backend


def test_pickle_module_is_not_loaded_without_trust(tmp_path):
    """The refusal happens before any unpickling: a payload that would run code is never executed."""
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (marker.write_text, ("pwned",))

    path = tmp_path / "evil.pt"
    with open(path, "wb") as handle:
        pickle.dump(Payload(), handle)
    with pytest.raises(ConversionError, match="--trust-pickle"):
        convert_torch(str(path), output=tmp_path / "x.onnx", inputs=["x:1"])
    assert not marker.exists()


def test_a_model_whose_reference_holds_nan_is_degenerate_not_pass(tmp_path):
    """NaN in PyTorch's own output means the check could not fail there: degenerate, nothing written."""
    output = tmp_path / "nan.onnx"
    with pytest.raises(ParityError) as caught:
        convert_torch(f"{MODELS}:nan_outputs", output=output, inputs=["x:1x8"], verify_backends=["onnxruntime"])
    message = str(caught.value)
    assert "degenerate against pytorch" in message and "it holds NaN (" in message
    assert "no check could fail" in message and "--exporter" not in message
    assert not output.exists()


def test_a_model_whose_reference_is_all_infinity_is_degenerate_not_pass(tmp_path):
    """Issue 21: x / 0 agreed on ±inf everywhere and passed; an output that overflowed everywhere says nothing."""
    output = tmp_path / "inf.onnx"
    with pytest.raises(ParityError) as caught:
        convert_torch(f"{MODELS}:infinite_outputs", output=output, inputs=["x:1x8"], verify_backends=["onnxruntime"])
    assert "degenerate against pytorch" in str(caught.value) and "every element is ±infinity (8 of 8)" in str(
        caught.value
    )
    assert not output.exists()


def test_a_forward_that_writes_into_its_input_is_judged_on_the_original_input(tmp_path):
    """The oracle gets a copy: a correct export of an in-place forward() passes."""
    output = tmp_path / "mutates.onnx"
    report = convert_torch(f"{MODELS}:mutates_input", output=output, inputs=["x:1x8"], verify_backends=["onnxruntime"])
    assert [v.status for v in report.verdicts] == ["pass"], [v.describe() for v in report.verdicts]
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    with deploykit.load(output, "ort") as session:
        np.testing.assert_allclose(session.run({"x": x})["output"], x * 2 + 1, rtol=1e-6)


def test_the_0_1_keywords_still_convert_with_a_deprecation_warning_naming_the_settings(tmp_path):
    """The documented 0.1 call: export and check keywords given to convert_torch itself."""
    out = tmp_path / "cnn.onnx"
    with pytest.warns(DeprecationWarning) as warned:
        report = deploykit.convert_torch(torch_models.small_cnn(), (torch.randn(1, 3, 32, 32),), out,
                                         input_names=["images"], dynamic={"images": {0: "batch"}},
                                         exporter="torchscript", atol=1e-4)  # fmt: skip
    assert report.passed and report.written
    assert _dims(out, "images") == ["batch", 3, 32, 32]
    message = str(warned[0].message)
    assert "convert_torch(input_names=, dynamic=, exporter=, atol=) is deprecated" in message
    assert "export=TorchExportSettings(input_names=..., dynamic=..., exporter=...)" in message
    assert "checks=VerifySettings(thresholds=ThresholdOverrides(atol=...))" in message
    with pytest.raises(TypeError, match="unexpected keyword argument 'dynamc'"):
        deploykit.convert_torch(torch_models.small_cnn(), (torch.randn(1, 3, 32, 32),), out, dynamc={})
