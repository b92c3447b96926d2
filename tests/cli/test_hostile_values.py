"""Values are checked up front with the accepted range in the message (issue 12): backend options,
seeds, tolerances, thresholds, opsets, images."""

from __future__ import annotations

import re
import struct
import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deploykit
from deploykit.backends.options import thread_limit
from deploykit.errors import InputError, InvalidModelError, UsageError
from tests.fuzz.harness import invoke_checked, usage_said

BACKENDS = ["onnxruntime", "openvino", "opencv"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "option, message",
    [
        ("threads=abc", "option threads='abc' is not an integer"),
        ("threads=100000", "option threads=100000 is out of range; expected an integer (0 to {limit}"),
        ("threads=-4", "option threads=-4 is out of range"),
        ("threads=1.5", "option threads=1.5 is not an integer"),
        ("nosuch=1", "unknown option(s) nosuch"),
    ],
)
def test_backend_options_are_validated(tiny, backend, option, message):
    result = invoke_checked(["run", tiny["dynamic"], "-b", backend, "-o", option])
    assert result.exit_code == 2
    assert message.format(limit=thread_limit()) in result.stderr


@pytest.mark.parametrize(
    "backend, option, message",
    [
        ("openvino", "streams=-1", "option streams=-1 is out of range; expected an integer (1 to"),
        ("openvino", "shape_cache=0", "option shape_cache=0 is out of range; expected an integer (1 to 1024)"),
        ("openvino", "reshape=sometimes", "option reshape='sometimes' is not one of auto, never"),
        ("onnxruntime", "spinning=maybe", "option spinning='maybe' is not true or false"),
        ("onnxruntime", "log_level=9", "option log_level=9 is out of range; expected an integer (0 to 4)"),
        ("onnxruntime", "graph_optimization=max", "is not one of disable, basic, extended, all"),
    ],
)
def test_backend_specific_options(tiny, backend, option, message):
    result = invoke_checked(["run", tiny["dynamic"], "-b", backend, "-o", option])
    assert result.exit_code == 2 and message in result.stderr


def test_valid_options_are_converted(tiny):
    with deploykit.load(tiny["dynamic"], "onnxruntime", threads="2", spinning="false") as session:
        assert session.info.options == {"threads": 2, "spinning": False}


def test_backends_options_prints_the_schema():
    result = invoke_checked(["backends", "--options"])
    assert result.exit_code == 0
    for text in ("accepted", "default", "shape_cache", "1 to 1024", f"0 to {thread_limit()}", "true | false"):
        assert text in result.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["run", "{dynamic}", "--seed", "-1"],
        ["convert", "torch", "{factory}:tiny_cnn", "-i", "x:1x3x8x8", "-o", "{out}", "--seed", "-1"],
    ],
    ids=["run", "convert-torch"],
)
def test_negative_seed(tiny, tmp_path, command):
    args = [part.format(**tiny, out=tmp_path / "x.onnx") for part in command]
    result = invoke_checked(args, writes=[tmp_path / "x.onnx"])
    said = usage_said(result.output)
    assert result.exit_code == 2 and "Invalid value for '--seed': '-1': expected an integer in [0, 4294967295]" in said


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_tolerances_checked_before_converting(tiny, tmp_path, value):
    out = tmp_path / "x.onnx"
    args = ["convert", "torch", f"{tiny['factory']}:tiny_cnn", "-i", "x:1x3x8x8", "-o", out, "--atol", value]
    result = invoke_checked(args, writes=[out])
    said = usage_said(result.output)
    assert result.exit_code == 2 and f"Invalid value for '--atol': '{value}': expected a finite number ≥ 0" in said


@pytest.mark.parametrize("opset", ["99", "6"])
def test_torch_opset_outside_what_onnx_knows(tiny, tmp_path, opset):
    args = ["convert", "torch", f"{tiny['factory']}:tiny_cnn", "-i", "x:1x3x8x8", "-o", tmp_path / "x.onnx"]
    result = invoke_checked([*args, "--opset", opset], writes=[tmp_path / "x.onnx"])
    newest = onnx.defs.onnx_opset_version()
    assert result.exit_code == 2 and f"--opset '{opset}' | expected an integer in [7, {newest}]" in result.stderr
    assert f"knows opsets up to {newest}" in result.stderr


@pytest.fixture(scope="module")
def opset99(tmp_path_factory):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 99)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("op") / "op99.onnx"
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("backend", BACKENDS)
def test_model_opset_newer_than_onnx_is_refused_everywhere(opset99, backend):
    newest = onnx.defs.onnx_opset_version()
    result = invoke_checked(["run", opset99, "-b", backend], reads=[opset99])
    assert result.exit_code == 1
    assert f"declares ONNX opset 99; the installed onnx {onnx.__version__} knows opsets 1 to {newest}" in result.stderr
    with pytest.raises(InvalidModelError, match="knows opsets 1 to"):
        deploykit.load(opset99, backend)


@pytest.mark.parametrize(
    "option, message",
    [
        (["--iou", "2"], "Invalid value for '--iou': '2': expected a finite number in [0, 1]"),
        (["--conf", "-5"], "Invalid value for '--conf': '-5': expected a finite number in [0, 1]"),
        (["--conf", "nan"], "Invalid value for '--conf': 'nan': expected a finite number in [0, 1]"),
        (["--top-k", "-3"], "Invalid value for '--top-k': '-3': expected an integer in [1, 1000000000]"),
        (["--top-k", "0"], "Invalid value for '--top-k': '0': expected an integer in [1, 1000000000]"),
        (["--draw", "out.xyz"], "--draw 'out.xyz' | OpenCV cannot write images with extension '.xyz'"),
        (["--draw", "noextension"], "OpenCV cannot write images with extension '(none)'"),
    ],
)
def test_predict_values(tiny, tmp_path, monkeypatch, option, message):
    monkeypatch.chdir(tmp_path)
    result = invoke_checked(["predict", tiny["classifier"], tiny["image"], *option], reads=[tiny["image"]])
    parsed = option[0] != "--draw"  # numbers are the parser's; the extension is the pipeline's UsageError
    assert result.exit_code == 2 and message in (usage_said(result.output) if parsed else result.stderr)
    assert not list(tmp_path.iterdir())


def test_pipeline_arguments(tiny):
    with pytest.raises(UsageError, match=r"iou '5' \| expected a finite number in \[0, 1\]"):
        deploykit.Detector(tiny["classifier"], iou=5)
    with pytest.raises(UsageError, match=r"max_detections '0' \| expected an integer ≥ 1"):
        deploykit.Detector(tiny["classifier"], max_detections=0)
    with deploykit.Classifier(tiny["classifier"]) as classifier:
        with pytest.raises(UsageError, match=r"top_k '-1' \| expected an integer ≥ 1"):
            classifier(tiny["image"], top_k=-1)
        assert len(classifier(tiny["image"], top_k=3)) == 3


def _png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")


def test_huge_image_refused_before_decoding(tiny, tmp_path):
    huge = tmp_path / "huge.png"
    huge.write_bytes(_png_header(40000, 40000))
    result = invoke_checked(["predict", tiny["classifier"], huge], reads=[huge])
    assert result.exit_code == 1
    assert "is 40000x40000 (1,600 megapixels, 4.5 GiB decoded); deploykit decodes images up to 268" in result.stderr


@pytest.mark.parametrize("name", ["image", "png"])
def test_truncated_image_is_an_error(tiny, tmp_path, name):
    from tests.assets.tiny import write_image

    whole = write_image(tmp_path / f"whole{tiny[name].suffix}", (240, 320))
    data = whole.read_bytes()
    truncated = tmp_path / f"cut{tiny[name].suffix}"
    truncated.write_bytes(data[: len(data) // 3])
    result = invoke_checked(["predict", tiny["classifier"], truncated], reads=[truncated])
    assert result.exit_code == 1 and "(the file is truncated)" in result.stderr


def test_truncation_check_accepts_whole_images(tiny):
    from deploykit.vision.image import load_image

    for name in ("image", "png"):
        assert load_image(tiny[name]).shape == (24, 32, 3)


def test_predict_on_a_folder(tiny, tmp_path):
    result = invoke_checked(["predict", tiny["classifier"], tmp_path])
    assert result.exit_code == 1 and f"folder '{tmp_path}' | holds no images or videos" in result.stderr


def test_garbage_image(tiny, tmp_path):
    garbage = tmp_path / "noise.jpg"
    garbage.write_bytes(np.random.default_rng(0).bytes(1000))
    result = invoke_checked(["predict", tiny["classifier"], garbage])
    assert result.exit_code == 1 and "is not an image OpenCV can read" in result.stderr


def test_image_errors_in_the_library(tiny, tmp_path):
    from deploykit.vision.image import load_image

    with pytest.raises(InputError, match="is a folder"):
        load_image(tmp_path)


def test_empty_image_file(tiny, tmp_path):
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    result = invoke_checked(["predict", tiny["classifier"], empty])
    assert result.exit_code == 1 and f"image '{empty}' | is empty (0 bytes)." in result.stderr


def test_decode_image_bytes_like_files(tiny):
    from deploykit.vision.image import decode_image, load_image

    data = tiny["image"].read_bytes()
    assert (decode_image(data, "from-bytes.jpg") == load_image(tiny["image"])).all()
    with pytest.raises(InputError, match=r"image 'cut.jpg' \| the JPEG data ends before its end-of-image marker"):
        decode_image(data[: len(data) // 2], "cut.jpg")


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_timeout_that_is_no_duration_is_refused(tiny, command, value):
    """Issue 21 sweep: --timeout nan/inf was a traceback in selectors, 0 and -5 'crashed the runtime'."""
    result = invoke_checked([command, tiny["dynamic"], "--timeout", value])
    assert result.exit_code == 2
    said = usage_said(result.output)
    assert f"Invalid value for '--timeout': '{value}': expected a duration more than 0" in said, said
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value", ["nan", "inf", "-0.1"])
def test_a_regression_threshold_that_is_no_fraction_is_refused(tiny, tmp_path, value):
    """Issue 21 sweep: --threshold nan said 'no regression beyond nan%' and exited 0 against a 100x faster baseline."""
    report = tmp_path / "r"
    assert invoke_checked(["bench", tiny["dynamic"], "--duration", "100ms", "--report", report]).exit_code == 0
    result = invoke_checked(["report", report / "report.json", "--baseline", report / "report.json",
                             "--threshold", value])  # fmt: skip
    assert result.exit_code == 2 and f"Invalid value for '--threshold': '{value}'" in usage_said(result.output)


@pytest.mark.parametrize(
    "value, message",
    [("x=random:1x4x", "shape '1x4x' | not a list of positive sizes"), ("x=random:1xx4", "shape '1xx4' | not a list")],
)
def test_a_shape_with_an_empty_size_is_a_typo_not_a_shape(tiny, value, message):
    result = invoke_checked(["run", tiny["dynamic"], "-i", value])
    assert result.exit_code == 2 and message in result.stderr


def test_an_npz_that_holds_no_arrays_is_refused_not_random(tiny, tmp_path):
    empty = tmp_path / "empty.npz"
    np.savez(empty)
    result = invoke_checked(["run", tiny["dynamic"], "-i", empty])
    assert result.exit_code == 2 and "the .npz holds no arrays" in " ".join(result.stderr.split())


def test_a_report_with_nan_figures_is_not_a_report(tiny, tmp_path):
    """Issue 21 sweep: "p50_ms": NaN passed the schema (Python's json reads NaN; JSON has no such number)."""
    folder = tmp_path / "r"
    assert invoke_checked(["bench", tiny["dynamic"], "--duration", "100ms", "--report", folder]).exit_code == 0
    text = (folder / "report.json").read_text()
    broken = tmp_path / "nan.json"
    broken.write_text(re.sub(r'"p50_ms": [0-9.e-]+', '"p50_ms": NaN', text, count=1))
    result = invoke_checked(["report", broken])
    assert result.exit_code == 1 and "NaN is not a JSON number" in " ".join(result.stderr.split())


def test_a_report_nested_too_deeply_is_not_a_report(tmp_path):
    """Sweep 21b: '[' * 100000 was a RecursionError traceback from the report reader."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    result = invoke_checked(["report", deep])
    assert result.exit_code == 1 and "is JSON nested too deeply to read" in result.stderr


def _npz_member(path, shape, data_bytes, name="x.npy"):
    """An .npz whose member's .npy header says ``shape`` (float32), followed by ``data_bytes`` zeros."""
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open(name, "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": shape})
            block = bytes(1 << 20)
            for _ in range(data_bytes >> 20):
                member.write(block)
            member.write(bytes(data_bytes % (1 << 20)))
    return path


def test_a_zip_bomb_npz_is_refused_before_it_is_inflated(tiny, tmp_path):
    """Each member's .npy header (shape, dtype) and its zip entry's inflated size are checked against
    the bound before numpy inflates a byte: the message names the file, the member and the bound."""
    huge = _npz_member(tmp_path / "huge.npz", (2**40,), 16)  # 4 TiB declared, 16 bytes there
    result = invoke_checked(["compare", tiny["dynamic"], "--inputs", huge, "-b", "ort"], reads=[huge])
    assert result.exit_code == 1
    assert (
        f"inputs file '{huge}' member 'x.npy' | declares shape (1099511627776,) (float32), which would take 4 TiB; "
        "deploykit reads at most" in result.stderr
    )
    not_npy = _npz_member(tmp_path / "blob.npz", (4,), 16, name="blob.bin")
    result = invoke_checked(["compare", tiny["dynamic"], "--inputs", not_npy, "-b", "ort"], reads=[not_npy])
    assert "member 'blob.bin' | is not an .npy array" in result.stderr


def test_a_zip_bomb_under_a_memory_limit_names_the_bound(tiny, tmp_path):
    """200 MiB of zeros deflated to 200 KiB, read under ``ulimit -v`` 640 MiB: the bound is a quarter
    of the address space (160 MiB), and the member is refused by its inflated size, not by MemoryError."""
    import resource
    import subprocess
    import sys

    bomb = _npz_member(tmp_path / "bomb.npz", (50 * 2**20,), 200 * 2**20)
    assert bomb.stat().st_size < 2**20
    limit = 640 * 2**20
    code = f"from deploykit.inputs import load_arrays; load_arrays({str(bomb)!r})"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )  # fmt: skip
    assert "InputError: inputs file" in done.stderr and "member 'x.npy' | inflates to 200 MiB" in done.stderr, (
        done.stderr
    )
    assert "deploykit reads at most 160 MiB per array" in done.stderr
