"""Darknet → ONNX against independent implementations: Darknet itself (Debian's libdarknet through
``deploykit.testing.darknet``'s small C program) and OpenCV 4.x's readNetFromDarknet (in the CI pass
that puts OpenCV 4.14 first); and which of them a conversion asks for (``oracle=``, ``--oracle``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from typer.testing import CliRunner

import deploykit
from deploykit.cli.main import app
from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
from deploykit.convert.darknet.weights import write_random_weights
from deploykit.errors import ConversionError, OracleError, UsageError
from deploykit.testing import darknet
from deploykit.verify import VerifySettings
from deploykit.vision.yolo import decode_heads
from tests.assets.darknet_helper import use_empty_cache, use_fake_darknet, use_no_compiler
from tests.assets.paths import DARKNET_CFG, REPO, darknet_cfg, missing_asset, require_opencv4

MODELS = REPO / "models" / "darknet"
RAW_ATOL = 1e-4


@pytest.fixture(scope="session")
def darknet_reference():
    """Darknet's own library through deploykit.testing's C helper (built here, as a user would ask)."""
    reason = darknet.unavailable_reason()
    if reason:
        missing_asset("Darknet's own forward pass (deploykit.testing.darknet)", reason)
    darknet.build_helper()
    return darknet


def _resized_cfg(source: Path, directory: Path, size: tuple[int, int] | None) -> Path:
    """A copy of ``source`` with the [net] input size (width, height) replaced."""
    text = source.read_text()
    if size:
        text = re.sub(r"(?m)^\s*width\s*=.*$", f"width={size[0]}", text)
        text = re.sub(r"(?m)^\s*height\s*=.*$", f"height={size[1]}", text)
    cfg = directory / source.name
    cfg.write_text(text)
    return cfg


DARKNET_CASES = [
    (DARKNET_CFG / "yolov2-tiny.cfg", None),
    (DARKNET_CFG / "yolov2.cfg", 256),  # reorg + region
    (DARKNET_CFG / "yolov3-tiny.cfg", None),
    (DARKNET_CFG / "yolov3.cfg", 224),
    (DARKNET_CFG / "yolov3-spp.cfg", 192),  # SPP maxpools
    (DARKNET_CFG / "tiny.cfg", None),  # classifier: avgpool + softmax
    (DARKNET_CFG / "alexnet.cfg", None),  # connected + dropout
    (DARKNET_CFG / "resnet18.cfg", 128),  # strided shortcuts
    (MODELS / "yolov2-tiny.cfg", None),
    (MODELS / "yolov3-tiny.cfg", None),
    (MODELS / "yolov3.cfg", 160),
]


@pytest.mark.slow
@pytest.mark.parametrize(("source", "size"), DARKNET_CASES, ids=[f"{c.parent.name}/{c.name}" for c, _ in DARKNET_CASES])
def test_raw_outputs_match_darknet(darknet_reference, tmp_path, source, size):
    if not source.is_file():
        missing_asset(f"{source}", "apt-get install darknet")
    cfg = _resized_cfg(source, tmp_path, (size, size) if size else None)
    net = load_network(cfg)
    weights = tmp_path / "random.weights"
    write_random_weights(net, weights, seed=11)
    onnx_path = tmp_path / "model.onnx"
    convert_darknet(cfg, weights, onnx_path, verify_backends=[], export=DarknetExportSettings(head="raw"))
    finals = net.heads() or [net.layers[-1]]
    image = np.random.default_rng(0).uniform(0, 1, (1, net.channels, net.height, net.width)).astype(np.float32)
    expected = darknet_reference.darknet_outputs(cfg, weights, image, [layer.index for layer in finals])
    with deploykit.load(onnx_path) as session:
        ours = session.run({"images": image})
    for layer in finals:
        got = ours[f"{layer.type}_{layer.index}"].ravel()
        want = expected[layer.index]
        assert got.shape == want.shape
        error = float(np.max(np.abs(got - want)))
        assert error <= RAW_ATOL, (
            f"{layer.type}_{layer.index}: max abs error {error:.3g} (values up to {np.abs(want).max():.3g})"
        )
        assert np.std(want) > 0.05 * np.abs(want).mean(), "the test weights must produce outputs that vary"


# --- OpenCV 4.x: the importer OpenCV 5 removed ------------------------------------------------------------------

OPENCV_CASES = [
    (name, None) for name in ("yolov2-tiny", "yolov3-tiny", "yolov3", "yolov4-tiny", "yolov4", "yolov7-tiny")
]
OPENCV_CASES.append(("yolov4-tiny", (320, 192)))  # non-square


def _assert_heads_match_opencv4(cv2, cfg: Path, opencv_cfg: Path, weights: Path, directory: Path,
                                input_size: tuple[int, int] | None = None) -> None:  # fmt: skip
    """Our raw and decoded heads against OpenCV 4.x's Darknet importer reading ``opencv_cfg``."""
    raw_path, decoded_path = directory / "raw.onnx", directory / "decoded.onnx"
    convert_darknet(
        cfg, weights, raw_path, verify_backends=[], export=DarknetExportSettings(head="raw", input_size=input_size)
    )
    convert_darknet(
        cfg,
        weights,
        decoded_path,
        verify_backends=[],
        export=DarknetExportSettings(head="decoded", input_size=input_size),
    )
    net = load_network(opencv_cfg)
    image = np.random.default_rng(1).uniform(0, 1, (1, 3, net.height, net.width)).astype(np.float32)
    reader = cv2.dnn.readNetFromDarknet(str(opencv_cfg), str(weights))
    reader.setInput(image)
    names = list(reader.getUnconnectedOutLayersNames())
    expected = np.concatenate([o.reshape(1, -1, 85) for o in reader.forward(names)], axis=1)
    heads = json.loads({p.key: p.value for p in onnx.load(str(raw_path)).metadata_props}["deploykit.darknet.heads"])
    with deploykit.load(raw_path) as raw_session, deploykit.load(decoded_path) as decoded_session:
        from_raw = decode_heads(raw_session.run({"images": image}), heads)
        decoded = decoded_session.run({"images": image})["detections"]
    np.testing.assert_allclose(decoded, from_raw, rtol=1e-5, atol=1e-5)
    # OpenCV zeroes class scores at or below a threshold: 0.2 for [yolo], the cfg's thresh= for [region]
    threshold = max(head["opencv_threshold"] for head in heads)
    zeroed = expected[..., 5:] == 0
    assert not np.any(zeroed & (decoded[..., 5:] > threshold + 1e-4))
    ours = decoded.copy()
    ours[..., 5:][zeroed] = 0
    np.testing.assert_allclose(ours, expected, rtol=1e-3, atol=1e-4)


@pytest.mark.slow
@pytest.mark.opencv4
@pytest.mark.parametrize(("name", "size"), OPENCV_CASES, ids=[f"{n}-{s}" for n, s in OPENCV_CASES])
def test_heads_match_opencv4_darknet(tmp_path, name, size):
    cv2 = require_opencv4()
    cfg = _resized_cfg(MODELS / f"{name}.cfg", tmp_path, size)
    weights = tmp_path / f"{name}.weights"
    write_random_weights(load_network(cfg), weights, seed=7)
    _assert_heads_match_opencv4(cv2, cfg, cfg, weights, tmp_path)


def _squeeze_excitation_cfg(directory: Path) -> Path:
    """A small YOLO whose every stage ends in a squeeze-excitation block (global [avgpool], two 1x1
    convolutions, [scale_channels]), as in EfficientNet-based YOLOs; native size 416."""
    stages = []
    for filters in (16, 32, 64, 128, 256):
        stages.append(
            f"[convolutional]\nbatch_normalize=1\nfilters={filters}\nsize=3\nstride=2\npad=1\nactivation=leaky\n\n"
            f"[avgpool]\n\n[convolutional]\nfilters={filters // 4}\nsize=1\nstride=1\nactivation=leaky\n\n"
            f"[convolutional]\nfilters={filters}\nsize=1\nstride=1\nactivation=logistic\n\n"
            "[scale_channels]\nfrom=-4\n"
        )
    head = (
        "[convolutional]\nfilters=255\nsize=1\nstride=1\npad=1\nactivation=linear\n\n"
        "[yolo]\nmask=0,1,2\nanchors=10,14, 23,27, 37,58\nclasses=80\nnum=3\n"
    )
    cfg = directory / "se-yolo.cfg"
    cfg.write_text("[net]\nwidth=416\nheight=416\nchannels=3\n\n" + "\n".join(stages) + "\n" + head)
    return cfg


def test_global_avgpool_is_not_a_stride(tmp_path):
    cfg = _squeeze_excitation_cfg(tmp_path)
    assert load_network(cfg).stride() == 32
    assert load_network(cfg, (320, 256)).layers[-1].out_shape == (255, 8, 10)
    with pytest.raises(ConversionError) as caught:
        load_network(cfg, (330, 320))
    assert "input size 330x320 | is not a multiple of the network stride 32." in str(caught.value)


@pytest.mark.slow
@pytest.mark.opencv4
@pytest.mark.parametrize("size", [(320, 320), (320, 256)], ids=["320x320", "320x256"])
def test_squeeze_excitation_at_other_sizes_matches_opencv4(tmp_path, size):
    cv2 = require_opencv4()
    cfg = _squeeze_excitation_cfg(tmp_path)
    weights = tmp_path / "se.weights"
    write_random_weights(load_network(cfg), weights, seed=5)
    (tmp_path / "opencv").mkdir()
    resized = _resized_cfg(cfg, tmp_path / "opencv", size)
    _assert_heads_match_opencv4(cv2, cfg, resized, weights, tmp_path, input_size=size)


@pytest.mark.slow
@pytest.mark.opencv4
def test_opencv_threshold_option_matches_opencv_rows_exactly(tmp_path):
    cv2 = require_opencv4()
    cfg = MODELS / "yolov4-tiny.cfg"
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=3)
    out = tmp_path / "m.onnx"
    report = convert_darknet(
        cfg,
        weights,
        out,
        verify_backends=["onnxruntime"],
        export=DarknetExportSettings(head="decoded", opencv_threshold=0.2),
    )
    assert report.passed and re.match(r"oracle: opencv(-darknet)? 4\.", report.notes[0], re.IGNORECASE), report.notes
    image = np.random.default_rng(2).uniform(0, 1, (1, 3, 416, 416)).astype(np.float32)
    reader = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
    reader.setInput(image)
    expected = np.concatenate(
        [o.reshape(1, -1, 85) for o in reader.forward(reader.getUnconnectedOutLayersNames())], axis=1
    )
    with deploykit.load(out) as session:
        ours = session.run({"images": image})["detections"]
    clear = np.abs(ours[..., 5:] - 0.2) > 1e-4  # scores within float noise of the threshold may fall either way
    assert np.array_equal((ours[..., 5:] > 0)[clear], (expected[..., 5:] > 0)[clear])
    np.testing.assert_allclose(ours[..., 5:][clear], expected[..., 5:][clear], atol=1e-4)
    np.testing.assert_allclose(ours[..., :5], expected[..., :5], rtol=1e-3, atol=1e-4)


def test_converted_model_runs_on_every_backend(tmp_path):
    cfg = MODELS / "yolov4-tiny.cfg"
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=4)
    report = convert_darknet(
        cfg,
        weights,
        tmp_path / "m.onnx",
        verify_backends=["onnxruntime", "openvino", "opencv"],
        export=DarknetExportSettings(head="decoded"),
    )
    assert report.passed, [v.describe() for v in report.verdicts]
    assert [v.candidate for v in report.verdicts] == ["onnxruntime", "openvino", "opencv"]


# --- Which oracle: auto never compiles; darknet and opencv run or say why not -------------------------------------


@pytest.fixture
def empty_cache(tmp_path, monkeypatch) -> Path:
    return use_empty_cache(tmp_path, monkeypatch)


@pytest.fixture
def no_compiler(tmp_path, monkeypatch) -> None:
    """Darknet's files where the checks look (not the real thing) and no C compiler on PATH."""
    use_fake_darknet(tmp_path, monkeypatch)
    use_no_compiler(tmp_path, monkeypatch)


@pytest.fixture(scope="module")
def yolov3_tiny(tmp_path_factory) -> tuple[Path, Path]:
    cfg = MODELS / "yolov3-tiny.cfg"
    weights = tmp_path_factory.mktemp("weights") / "yolov3-tiny.weights"
    write_random_weights(load_network(cfg), weights, seed=9)
    return cfg, weights


def _has_opencv4_importer() -> bool:
    try:
        import cv2
    except ImportError:
        return False
    return hasattr(cv2.dnn, "readNetFromDarknet")


def test_auto_never_compiles_the_darknet_helper(tmp_path, empty_cache, yolov3_tiny):
    cfg, weights = yolov3_tiny
    report = convert_darknet(cfg, weights, tmp_path / "m.onnx", verify_backends=["onnxruntime"])
    assert not empty_cache.exists(), "auto must not build anything"
    assert report.written
    if _has_opencv4_importer():
        assert report.oracle.name.startswith("opencv-darknet 4.") and report.status == "pass"
        return
    assert report.status == "unverified" and not report.oracle.independent
    detail = report.oracle.detail
    assert detail.startswith("no Darknet oracle ran: OpenCV here has no Darknet importer (OpenCV 5 dropped it; "
                             "pip install 'opencv-python-headless<5' for OpenCV 4.x's importer); ")  # fmt: skip
    if darknet.unavailable_reason() is None:
        assert (f"Darknet's own forward pass is not built here: pass --oracle darknet (oracle='darknet') to build it "
                f"into {empty_cache}; backends compared with each other") in detail  # fmt: skip
    else:
        assert f"{darknet.unavailable_reason()}; backends compared with each other" in detail


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "size"),
    [(MODELS / "yolov3-tiny.cfg", None), (MODELS / "yolov3-tiny.cfg", "320x256"), (DARKNET_CFG / "tiny.cfg", None)],
    ids=["yolov3-tiny", "yolov3-tiny-320x256", "classifier-tiny"],
)
def test_darknet_oracle_builds_the_helper_and_checks_the_conversion(tmp_path, empty_cache, source, size):
    reason = darknet.unavailable_reason()
    if reason:
        missing_asset("Darknet's own forward pass (deploykit.testing.darknet)", reason)
    cfg = darknet_cfg(source.name) if source.parent == DARKNET_CFG else source
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=12)
    report = convert_darknet(cfg, weights, tmp_path / "m.onnx", verify_backends=["onnxruntime"], export=DarknetExportSettings(input_size=size), checks=VerifySettings(oracle="darknet"))  # fmt: skip
    assert report.oracle.name == "darknet" and report.oracle.independent
    assert report.status == "pass", [v.describe() for v in report.verdicts]
    assert [path.name for path in empty_cache.iterdir()] == [darknet.helper_path().name]
    # now that it is built, auto uses it too, where OpenCV 4.x does not come first
    again = convert_darknet(
        cfg,
        weights,
        tmp_path / "n.onnx",
        verify_backends=["onnxruntime"],
        export=DarknetExportSettings(input_size=size),
    )
    if not _has_opencv4_importer():
        assert again.oracle.name == "darknet" and again.status == "pass"


def test_darknet_oracle_disagrees_with_the_wrong_weights(tmp_path, yolov3_tiny):
    """The same check fails when the model is not what Darknet runs: the oracle can say no."""
    reason = darknet.unavailable_reason()
    if reason:
        missing_asset("Darknet's own forward pass (deploykit.testing.darknet)", reason)
    from deploykit.convert.darknet.oracles import verify

    cfg, right = yolov3_tiny
    wrong = tmp_path / "wrong.weights"
    net = load_network(cfg)
    write_random_weights(net, wrong, seed=10)
    model = tmp_path / "m.onnx"
    convert_darknet(cfg, wrong, model, verify_backends=[])
    with deploykit.load(model) as session:
        heads = json.loads(session.metadata["deploykit.darknet.heads"])
    verdicts, oracle = verify(model, net, heads, cfg, right, ["onnxruntime"], (net.width, net.height),
                              DarknetExportSettings(), VerifySettings(oracle="darknet"))  # fmt: skip
    assert oracle.name == "darknet" and [v.status for v in verdicts] == ["fail"]


def test_darknet_oracle_without_a_compiler_is_an_error(tmp_path, empty_cache, no_compiler, yolov3_tiny):
    cfg, weights = yolov3_tiny
    output = tmp_path / "m.onnx"
    with pytest.raises(OracleError) as caught:
        convert_darknet(cfg, weights, output, verify_backends=["onnxruntime"], checks=VerifySettings(oracle="darknet"))
    assert caught.value.message == (
        "Darknet helper | no C compiler: neither gcc nor cc is on PATH, expected a C compiler to build Darknet's "
        f"forward pass into {empty_cache}."
    )
    assert not output.exists() and not empty_cache.exists()


def test_darknet_oracle_refuses_a_cfg_pjreddies_darknet_does_not_know(tmp_path, yolov3_tiny):
    cfg = MODELS / "yolov4-tiny.cfg"
    weights = tmp_path / "w.weights"
    write_random_weights(load_network(cfg), weights, seed=1)
    with pytest.raises(OracleError) as caught:
        convert_darknet(
            cfg, weights, tmp_path / "m.onnx", verify_backends=["onnxruntime"], checks=VerifySettings(oracle="darknet")
        )
    assert caught.value.message == (
        "oracle 'darknet' | Debian's libdarknet (pjreddie's Darknet) does not implement group_id, scale_x_y used by "
        "this cfg, expected a cfg of the layers pjreddie's Darknet knows (YOLOv2/v3)."
    )
    assert not (tmp_path / "m.onnx").exists()


def test_opencv_oracle_runs_or_says_opencv_has_no_importer(tmp_path, yolov3_tiny):
    cfg, weights = yolov3_tiny
    output = tmp_path / "m.onnx"
    if _has_opencv4_importer():  # the OpenCV 4 pass, or a machine with OpenCV 4 installed
        report = convert_darknet(
            cfg, weights, output, verify_backends=["onnxruntime"], checks=VerifySettings(oracle="opencv")
        )
        assert report.oracle.name.startswith("opencv-darknet 4.") and report.status == "pass"
        return
    with pytest.raises(OracleError) as caught:
        convert_darknet(cfg, weights, output, verify_backends=["onnxruntime"], checks=VerifySettings(oracle="opencv"))
    assert caught.value.message == (
        "oracle 'opencv' | OpenCV here has no Darknet importer (OpenCV 5 dropped it; pip install "
        "'opencv-python-headless<5' for OpenCV 4.x's importer), expected OpenCV 4.x's readNetFromDarknet to run "
        "this cfg."
    )
    assert not output.exists()


@pytest.mark.opencv4
def test_opencv_oracle_with_opencv4(tmp_path, yolov3_tiny):
    require_opencv4()
    cfg, weights = yolov3_tiny
    report = convert_darknet(
        cfg, weights, tmp_path / "m.onnx", verify_backends=["onnxruntime"], checks=VerifySettings(oracle="opencv")
    )
    assert report.oracle.name.startswith("opencv-darknet 4.") and report.status == "pass"


def test_none_oracle_compares_backends_only(tmp_path, empty_cache, yolov3_tiny):
    cfg, weights = yolov3_tiny
    report = convert_darknet(cfg, weights, tmp_path / "m.onnx", verify_backends=["onnxruntime", "openvino"], checks=VerifySettings(oracle="none"))  # fmt: skip
    assert report.status == "unverified" and report.written and not empty_cache.exists()
    assert report.oracle.detail == "no oracle asked for (oracle 'none'); backends compared with each other"
    assert all(v.agreement for v in report.verdicts)


def test_oracle_choice_is_checked_before_any_work(tmp_path, yolov3_tiny):
    cfg, weights = yolov3_tiny
    with pytest.raises(UsageError) as caught:
        convert_darknet(cfg, weights, tmp_path / "m.onnx", checks=VerifySettings(oracle="libdarknet"))  # type: ignore[arg-type]
    assert caught.value.message == "oracle 'libdarknet' | is not one of auto, opencv, darknet, none."
    with pytest.raises(UsageError) as caught:
        convert_darknet(cfg, weights, tmp_path / "m.onnx", verify_backends=[], checks=VerifySettings(oracle="darknet"))
    assert caught.value.message == (
        "oracle 'darknet' | asked for with no backends to verify, expected at least one backend."
    )


def test_cli_oracle_errors_are_one_message_without_a_traceback(tmp_path, empty_cache, no_compiler, yolov3_tiny):
    cfg, weights = yolov3_tiny
    runner = CliRunner()
    output = tmp_path / "m.onnx"
    result = runner.invoke(
        app, ["convert", "darknet", str(cfg), str(weights), "-o", str(output), "--oracle", "darknet"]
    )
    assert result.exit_code == 1, result.output
    assert "Darknet helper | no C compiler: neither gcc nor cc is on PATH" in result.stderr
    assert "Hint: apt-get install gcc, or set CC to a C compiler" in result.stderr
    assert "Traceback" not in result.output and not output.exists() and not empty_cache.exists()
    result = runner.invoke(app, ["convert", "darknet", str(cfg), str(weights), "-o", str(output), "--oracle", "gcc"])
    assert result.exit_code == 2 and "oracle 'gcc' | is not one of auto, opencv, darknet, none." in result.stderr
    assert "Traceback" not in result.output and not output.exists()


def test_recipes_pass_the_darknet_oracle_on(tmp_path, empty_cache):
    from deploykit.recipes import build

    with pytest.raises(UsageError) as caught:
        build("mobilenet_v2", tmp_path / "m.onnx", darknet_oracle="darknet")
    assert caught.value.message == (
        "recipe 'mobilenet_v2' | a Darknet oracle ('darknet') was asked for a torch recipe, expected a Darknet recipe."
    )
    reason = darknet.unavailable_reason()
    if reason:
        missing_asset("Darknet's own forward pass (deploykit.testing.darknet)", reason)
    report = build("yolov3-tiny", tmp_path / "y.onnx", random_weights=True, verify_backends=["onnxruntime"],
                   darknet_oracle="darknet")  # fmt: skip
    assert report.oracle.name == "darknet" and report.status == "pass", [v.describe() for v in report.verdicts]


def test_opencv_importer_runs_in_a_worker_that_cannot_take_the_conversion_down(yolov3_tiny):
    """OpenCV's importer runs in its own process: a hang is killed at the time limit with an
    OracleError naming the cfg; where OpenCV has no importer (OpenCV 5) the worker says so."""
    from deploykit.convert.darknet.oracles import opencv_darknet_outputs

    cfg, weights = yolov3_tiny
    image = np.random.default_rng(0).uniform(0, 1, (1, 3, 416, 416)).astype(np.float32)
    with pytest.raises(OracleError, match=r"OpenCV's Darknet importer \| failed on 'yolov3-tiny.cfg': did not finish"):
        opencv_darknet_outputs(cfg, weights, image, timeout_s=0.05)
    if not _has_opencv4_importer():
        assert opencv_darknet_outputs(cfg, weights, image) is None


@pytest.mark.opencv4
def test_opencv_importer_worker_returns_outputs_and_refusals(tmp_path, yolov3_tiny):
    """With OpenCV 4: the worker's outputs and version come back; OpenCV's refusal of a cfg is an
    OracleError with OpenCV's own words."""
    from deploykit.convert.darknet.oracles import opencv_darknet_outputs

    require_opencv4()
    cfg, weights = yolov3_tiny
    image = np.random.default_rng(0).uniform(0, 1, (1, 3, 416, 416)).astype(np.float32)
    found = opencv_darknet_outputs(cfg, weights, image)
    assert found is not None
    outputs, version = found
    assert version.startswith("4.") and sorted(outputs) == ["yolo_16", "yolo_23"]
    assert outputs["yolo_16"].shape[-1] == 85 and np.isfinite(outputs["yolo_16"]).all()
    unknown = tmp_path / "unknown.cfg"
    unknown.write_text(cfg.read_text().replace("[maxpool]", "[bogus]", 1))
    with pytest.raises(OracleError, match=r"failed on 'unknown.cfg': cv2.error: .*Unknown layer type: bogus"):
        opencv_darknet_outputs(unknown, weights, image)
