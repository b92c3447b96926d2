"""Careless source files give the right message (issue 12): Darknet cfgs, weights and labels files,
PyTorch checkpoints and exports, ONNX files for inspect, reports for `deploykit report`."""

from __future__ import annotations

import json
import struct

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.assets.paths import require_module
from tests.assets.tiny import TINY_CFG
from tests.fuzz.harness import invoke_checked

STRIDE_ZERO = TINY_CFG.replace("[maxpool]\nsize=2\nstride=2", "[maxpool]\nsize=2\nstride=0")


@pytest.mark.parametrize("command", ["convert", "inspect"])
def test_maxpool_stride_zero(tiny, tmp_path, command):
    cfg = tmp_path / "s0.cfg"
    cfg.write_text(STRIDE_ZERO)
    args = ["inspect", cfg] if command == "inspect" else ["convert", "darknet", cfg, tiny["weights"], "-o", "x.onnx"]
    result = invoke_checked(args, reads=[cfg])
    assert result.exit_code == 1
    assert "layer 1 [maxpool] (line 14) | stride=0 must be a positive integer" in result.stderr


def test_convolution_stride_zero(tmp_path):
    cfg = tmp_path / "c0.cfg"
    cfg.write_text(TINY_CFG.replace("size=3\nstride=1", "size=3\nstride=0"))
    result = invoke_checked(["inspect", cfg])
    assert result.exit_code == 1 and "[convolutional] (line 6) | stride=0 must be a positive integer" in result.stderr


@pytest.mark.parametrize(
    ("option", "written"), [("size=3", "size=0"), ("filters=4", "filters=0"), ("filters=4", "filters=-4")]
)
def test_convolution_size_or_filters_zero_names_the_option(tmp_path, option, written):
    cfg = tmp_path / "z.cfg"
    cfg.write_text(TINY_CFG.replace(f"\n{option}\n", f"\n{written}\n", 1))
    result = invoke_checked(["inspect", cfg])
    assert result.exit_code == 1
    assert (
        f"layer 0 [convolutional] (line 6) | {written} must be a positive integer. Hint: set {written.split('=')[0]}=1 or more."
        in result.stderr
    )


def test_cfg_with_a_byte_order_mark(tiny, tmp_path):
    cfg = tmp_path / "bom.cfg"
    cfg.write_bytes(b"\xef\xbb\xbf" + TINY_CFG.encode())
    result = invoke_checked(["inspect", cfg, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["input"] == [3, 32, 32]
    out = tmp_path / "bom.onnx"
    result = invoke_checked(["convert", "darknet", cfg, tiny["weights"], "-o", out, "--verify-backends", ""])
    assert result.exit_code == 0 and out.is_file()


@pytest.mark.parametrize(
    "content, message, code",
    [  # a --labels value that is no labels file is a usage error; names that do not fit the network, a failure
        (None, "labels '{path}' | no such file.", 2),
        (b"\x00\x01\xffbinary\x00", "labels '{path}' | is a binary file, not UTF-8 text", 2),
        (b"\xff\xfe\xfa\xfb", "labels '{path}' | is a binary file", 2),
        ("a\nb\n", "labels '{path}' | has 2 names, the network has 1 classes.", 1),
    ],
    ids=["missing", "binary", "not-utf8", "count"],
)
def test_labels_file(tiny, tmp_path, content, message, code):
    labels = tmp_path / "x.names"
    if isinstance(content, bytes):
        labels.write_bytes(content)
    elif content is not None:
        labels.write_text(content)
    out = tmp_path / "x.onnx"
    result = invoke_checked(["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--labels", labels],
                            writes=[out])  # fmt: skip
    assert result.exit_code == code and message.format(path=labels) in result.stderr


def test_labels_with_bom_and_blank_lines(tiny, tmp_path):
    labels = tmp_path / "x.names"
    labels.write_bytes(b"\xef\xbb\xbfthing\n\n")
    out = tmp_path / "x.onnx"
    result = invoke_checked(["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--labels", labels,
                             "--verify-backends", ""])  # fmt: skip
    assert result.exit_code == 0
    metadata = {p.key: p.value for p in onnx.load(out).metadata_props}
    assert json.loads(metadata["deploykit.labels"]) == ["thing"]


def test_weights_header_from_no_darknet(tiny, tmp_path):
    weights = tmp_path / "odd.weights"
    data = bytearray(tiny["weights"].read_bytes())
    data[0:12] = struct.pack("<3i", 99999, 2, 0)  # major > 1000 reads as a 16-byte header: sizes shift
    weights.write_bytes(bytes(data[:-400]))
    result = invoke_checked(["convert", "darknet", tiny["cfg"], weights, "-o", tmp_path / "x.onnx"])
    assert result.exit_code == 1
    assert "its header says Darknet version 99999.2.0" not in result.stderr, "major > 1000 is Darknet's own flag"
    weights.write_bytes(struct.pack("<3i", 7, 300, 5) + bytes(data[12:-400]))
    result = invoke_checked(["convert", "darknet", tiny["cfg"], weights, "-o", tmp_path / "x.onnx"])
    assert result.exit_code == 1
    assert "its header says Darknet version 7.300.5, which no Darknet writes" in result.stderr
    assert "belongs to another cfg" not in result.stderr


# --- PyTorch checkpoints ---------------------------------------------------------------------------------------------
torch = require_module("torch", "pip install 'deploykit[torch]'", "PyTorch")


def _convert_torch(tiny, tmp_path, *extra):
    out, report = tmp_path / "x.onnx", tmp_path / "report"
    args = ["convert", "torch", f"{tiny['factory']}:tiny_cnn", "-i", "x:1x3x8x8", "-o", out, "--report", report, *extra]
    return invoke_checked(args, writes=[out, report], watch=[tmp_path]), report / "report.json"


def test_checkpoint_wrapper_keys_are_found(tiny, tmp_path):
    from tests.assets.tiny import tiny_cnn

    checkpoint = tmp_path / "ckpt.pth"
    torch.save({"step": 3, "model_state": tiny_cnn().state_dict(), "optimizer_state": {"lr": 0.1}}, checkpoint)
    result, report = _convert_torch(tiny, tmp_path, "--weights", checkpoint)
    assert result.exit_code == 0, result.output
    assert "weights: state_dict under checkpoint key 'model_state'" in json.loads(report.read_text())["notes"]


def test_weights_key_and_ignore_keys(tiny, tmp_path):
    from tests.assets.tiny import tiny_cnn

    state = dict(tiny_cnn().state_dict())
    state["loss.margin"] = torch.tensor(0.5)
    checkpoint = tmp_path / "ckpt.pth"
    torch.save({"weights": {"student": state}}, checkpoint)
    result, _ = _convert_torch(tiny, tmp_path, "--weights", checkpoint)
    assert result.exit_code == 1 and "is a checkpoint with keys weights; none of state_dict" in result.stderr
    assert "--weights-key weights" in result.stderr
    result, _ = _convert_torch(tiny, tmp_path, "--weights", checkpoint, "--weights-key", "weights.teacher")
    assert result.exit_code == 1 and "has no key 'weights.teacher' (at 'teacher' it has: student)" in result.stderr
    result, _ = _convert_torch(tiny, tmp_path, "--weights", checkpoint, "--weights-key", "weights.student")
    assert result.exit_code == 1 and "1 unexpected: loss.margin" in result.stderr and "--ignore-keys" in result.stderr
    result, report = _convert_torch(
        tiny, tmp_path, "--weights", checkpoint, "--weights-key", "weights.student", "--ignore-keys", "^loss\\."
    )
    assert result.exit_code == 0, result.output
    assert (
        "weights: 1 key(s) ignored by --ignore-keys '^loss\\.': loss.margin" in json.loads(report.read_text())["notes"]
    )
    result, _ = _convert_torch(tiny, tmp_path, "--weights", checkpoint, "--ignore-keys", "([")
    assert result.exit_code == 1 and "--ignore-keys '([' | is not a regular expression" in result.stderr


def test_output_name_used_inside_the_export(tmp_path):
    factory = tmp_path / "embed.py"
    factory.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.embedding = torch.nn.Embedding(10, 4)\n"
        "        self.head = torch.nn.Linear(4, 2)\n"
        "    def forward(self, ids):\n"
        "        return self.head(self.embedding(ids))\n"
        "def build():\n"
        "    torch.manual_seed(0)\n"
        "    return M()\n"
    )
    out = tmp_path / "e.onnx"
    args = ["convert", "torch", f"{factory}:build", "-i", "ids:1x3:int64:0..9", "-o", out, "--exporter", "dynamo",
            "--opset", "18", "--output-names", "embedding"]  # fmt: skip
    result = invoke_checked(args, reads=[factory], writes=[out], watch=[tmp_path])
    assert result.exit_code == 0, result.output
    assert "output name 'embedding' was an internal value of the export: renamed it 'embedding_internal_0'" in (
        result.stdout
    )
    model = onnx.load(out)
    assert [o.name for o in model.graph.output] == ["embedding"]


def test_exporter_output_is_captured_without_colour(capfd):
    import os

    from deploykit.convert.torch_export import _quiet, strip_ansi

    log: list[str] = []
    with _quiet(log):
        print("\x1b[1;31mpython says\x1b[0m")
        os.write(2, b"\x1b[32mnative code says\x1b[0m\n")
    captured = capfd.readouterr()
    assert "says" not in captured.out + captured.err
    assert "python says" in log[0] and "native code says" in log[0] and "\x1b" not in log[0]
    assert strip_ansi("\x1b[2mdim\x1b[0m") == "dim"


# --- ONNX files for inspect ------------------------------------------------------------------------------------------
def test_inspect_counts_constant_weights_and_truncates_metadata(tmp_path):
    weights = numpy_helper.from_array(onnx.numpy_helper.to_array(numpy_helper.from_array(
        __import__("numpy").ones((4, 4), "float32"))), "w")  # fmt: skip
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["w"], value=weights),
            helper.make_node("Constant", [], ["shape"], value=helper.make_tensor("s", TensorProto.INT64, [2], [1, 16])),
            helper.make_node("MatMul", ["x", "w"], ["y0"]),
            helper.make_node("Reshape", ["y0", "shape"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    long_value = "\n".join(f"character {i}" for i in range(6666))
    entry = model.metadata_props.add()
    entry.key, entry.value = "characters", long_value
    path = tmp_path / "const.onnx"
    onnx.save(model, path)
    result = invoke_checked(["inspect", path])
    assert result.exit_code == 0
    assert "parameters  16 (f32)" in result.stdout, "the float Constant counts, the shape constant does not"
    assert f"characters = character 0… ({len(long_value):,} characters, 6,666 lines; --full shows all)" in (
        result.stdout
    )
    assert "character 6665" not in result.stdout
    full = invoke_checked(["inspect", path, "--full"])
    assert "character 6665" in full.stdout


# --- found by the fuzzer ---------------------------------------------------------------------------------------------
def test_predict_with_a_binary_labels_file(tiny):
    result = invoke_checked(["predict", tiny["classifier"], tiny["image"], "--labels", tiny["classifier"]])
    assert result.exit_code == 2
    assert f"labels '{tiny['classifier']}' | is a binary file, not UTF-8 text" in result.stderr


def test_darknet_input_size_typo(tiny, tmp_path):
    out = tmp_path / "x.onnx"
    args = ["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--input-size", "100000000000x16"]
    result = invoke_checked(args, writes=[out])
    assert result.exit_code == 1 and "input size '100000000000x16' | a side is over 16384 pixels." in result.stderr
    cfg = tmp_path / "wide.cfg"
    cfg.write_text(TINY_CFG.replace("width=32", "width=1000000000"))
    result = invoke_checked(["inspect", cfg])
    assert result.exit_code == 1 and "input 1000000000x32x3 is too large" in result.stderr


def test_failed_export_leaves_its_log_not_console_noise(tmp_path):
    factory = tmp_path / "svd.py"
    factory.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.linalg.svd(x)[1]\n"
        "def build():\n"
        "    return M()\n"
    )
    out = tmp_path / "svd.onnx"
    args = ["convert", "torch", f"{factory}:build", "-i", "x:1x4x4", "-o", out, "--exporter", "torchscript"]
    result = invoke_checked(args, reads=[factory], writes=[out], watch=[tmp_path])
    assert result.exit_code == 1
    assert "Exporting the operator 'aten::linalg_svd' to ONNX opset version 17 is not supported" in result.stderr
    log = tmp_path / "svd.onnx.export.log"
    assert f"The exporters' full output is in {log}." in result.stderr
    assert "Torch IR graph at exception" in log.read_text() and "\x1b[" not in log.read_text()
    assert "Torch IR graph" not in result.output


@pytest.mark.parametrize("batch", ["99999999999999999999", "0", "-2", "x"])
def test_darknet_batch_out_of_range(tiny, tmp_path, batch):
    out = tmp_path / "x.onnx"
    args = ["convert", "darknet", tiny["cfg"], tiny["weights"], "-o", out, "--batch", batch]
    result = invoke_checked(args, writes=[out])
    assert result.exit_code == 1
    assert f"batch '{batch}' | expected an integer from 1 to 1024, or 'dynamic'." in result.stderr


@pytest.mark.parametrize(
    "spec, message",
    [
        ("x:100000000000x16", "input 'x' | random data of shape (100000000000, 16) (float32) would take 5.82 TiB"),
        ("x:1x3x8x8:int64:0..99999999999999999999", "input 'x' | the value range 0..99999999999999999999 does not fit"),
        ("x:1x3x8x8:uint8:0..300", "input 'x' | the value range 0..300 does not fit uint8 (0 to 255)."),
    ],
    ids=["huge", "int64-range", "uint8-range"],
)
def test_torch_example_specs_checked_before_allocating(tiny, tmp_path, spec, message):
    out = tmp_path / "x.onnx"
    result = invoke_checked(["convert", "torch", f"{tiny['factory']}:tiny_cnn", "-i", spec, "-o", out], writes=[out])
    assert result.exit_code == 1 and message in result.stderr


@pytest.mark.parametrize(
    "change, message",
    [
        (("anchors=4,6, 8,9, 12,14", "anchors=nan,6, 8,9, 12,14"), "anchors= holds nan; expected anchor widths and"),
        (("anchors=4,6, 8,9, 12,14", "anchors=inf,6, 8,9, 12,14"), "anchors= holds inf; expected"),
        (("anchors=4,6, 8,9, 12,14", "anchors=-4,6, 8,9, 12,14"), "anchors= holds -4; expected"),
        (
            ("anchors=4,6, 8,9, 12,14", "anchors=1e30,6, 8,9, 12,14"),
            "anchors= holds 1e+30; expected anchor sizes in pixels",
        ),
        (("anchors=4,6, 8,9, 12,14", "anchors=4,6, 8,9, 12"), "anchors= holds 5 numbers; expected width,height pairs"),
        (("num=3", "num=1000000"), "num=1000000 anchors, but anchors= gives 3 pairs"),
    ],
)
def test_impossible_anchors_are_refused_before_any_work(tiny, tmp_path, change, message):
    """Issue 21: NaN, infinite or negative anchors and num beyond the anchors given converted and passed."""
    cfg = tmp_path / "odd.cfg"
    cfg.write_text(tiny["cfg"].read_text().replace(*change))
    out = tmp_path / "x.onnx"
    result = invoke_checked(["convert", "darknet", cfg, tiny["weights"], "-o", out], reads=[cfg], writes=[out])
    assert result.exit_code == 1 and "layer 3 [yolo] (line 25) | " + message in " ".join(result.stderr.split())


def test_an_impossible_weights_version_is_refused_even_when_the_size_fits(tiny, tmp_path):
    """Issue 21: a header saying version 999 converted and passed when the float count happened to match."""
    weights = tmp_path / "v999.weights"
    weights.write_bytes(struct.pack("<3i", 999, 2, 0) + tiny["weights"].read_bytes()[12:])
    result = invoke_checked(["convert", "darknet", tiny["cfg"], weights, "-o", tmp_path / "x.onnx"])
    assert result.exit_code == 1
    assert "its header says Darknet version 999.2.0, which no Darknet writes" in " ".join(result.stderr.split())


def test_a_megabyte_cfg_value_is_shown_cut_not_echoed_whole(tiny, tmp_path):
    cfg = tmp_path / "long.cfg"
    cfg.write_text(tiny["cfg"].read_text().replace("classes=1", "classes=1\nblob=" + "1," * 1_000_000))
    result = invoke_checked(["convert", "darknet", cfg, tiny["weights"], "-o", tmp_path / "x.onnx"], reads=[cfg])
    assert result.exit_code == 1 and len(result.stderr) < 1000, len(result.stderr)
    assert "option 'blob=1,1," in result.stderr and "(2000000 characters)" in result.stderr


def test_a_cut_short_torchscript_archive_is_not_called_a_pickle(tmp_path):
    torch = require_module("torch", "pip install 'deploykit[torch]'", "PyTorch")
    archive = tmp_path / "scripted.pt"
    torch.jit.save(torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())), str(archive))
    cut = tmp_path / "cut.pt"
    cut.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])
    result = invoke_checked(["convert", "torch", cut, "-i", "x:1x4", "-o", tmp_path / "x.onnx"], reads=[cut])
    assert result.exit_code == 1
    shown = " ".join(result.stderr.split())
    assert "is a zip archive (as torch.save and torch.jit.save write) that is cut short or damaged" in shown
    assert "--trust-pickle" not in shown
