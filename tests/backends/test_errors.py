"""Model-file, backend and device errors a user can hit, checked by message."""

from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import deploykit
from deploykit.errors import (
    BackendUnavailableError,
    DeviceUnavailableError,
    InputError,
    InvalidModelError,
    ModelNotFoundError,
    UnknownBackendError,
    UnsupportedModelError,
    UsageError,
)


def test_missing_file(backend_name, tmp_path):
    with pytest.raises(ModelNotFoundError, match=r"model '.*nope.onnx' \| no such file"):
        deploykit.load(tmp_path / "nope.onnx", backend_name)


def test_directory(backend_name, tmp_path):
    """A folder is a bundle (``deploykit optimize -o``) or nothing: one without its manifest says both."""
    with pytest.raises(
        deploykit.BundleError, match=r"is a folder without deploykit.json, expected a deploykit bundle"
    ) as caught:
        deploykit.load(tmp_path, backend_name)
    assert "the path of an .onnx file" in str(caught.value)


def test_truncated_model(backend_name, catalog_paths, tmp_path):
    data = catalog_paths["conv_bn_act"].read_bytes()
    broken = tmp_path / "truncated.onnx"
    broken.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidModelError, match=r"model '.*truncated.onnx' \| cannot be parsed as ONNX"):
        deploykit.load(broken, backend_name)


def test_not_an_onnx_file(backend_name, tmp_path):
    other = tmp_path / "notes.onnx"
    other.write_text("this is a text file, not a model\n")
    with pytest.raises(InvalidModelError, match=r"model '.*notes.onnx' \|"):
        deploykit.load(other, backend_name)


def test_empty_file(backend_name, tmp_path):
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(InvalidModelError, match=r"is not an ONNX model \(no IR version or no graph outputs\)"):
        deploykit.load(empty, backend_name)


def test_unknown_option(backend_name, catalog_paths):
    with pytest.raises(UsageError, match=rf"backend '{backend_name}' \| unknown option\(s\) turbo; it takes: "):
        deploykit.load(catalog_paths["multi_io"], backend_name, turbo=True)


def test_unknown_backend(catalog_paths):
    with pytest.raises(
        UnknownBackendError,
        match=r"backend 'tensorflow' \| is not registered; known backends are onnxruntime, openvino, opencv",
    ):
        deploykit.load(catalog_paths["multi_io"], "tensorflow")


def test_aliases_resolve(catalog_paths):
    for alias, name in (("ORT", "onnxruntime"), ("ov", "openvino"), ("cv", "opencv")):
        backend = deploykit.get_backend(alias)
        assert backend.name == name


def test_missing_runtime_names_the_extra(monkeypatch, catalog_paths):
    backend = deploykit.get_backend("openvino")
    missing = replace(backend.runtime, module="openvino_not_installed_here")
    monkeypatch.setattr(type(backend), "runtime", missing)
    with pytest.raises(BackendUnavailableError, match=r"pip install 'deploykit\[openvino\]'"):
        deploykit.load(catalog_paths["multi_io"], "openvino")


def _det_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "det", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_op_unsupported_on_one_backend(tmp_path):
    path = _det_model(tmp_path / "det.onnx")
    x = np.array([[2, 0, 0], [0, 3, 0], [0, 0, 4]], np.float32)
    with deploykit.load(path, "onnxruntime") as session:
        assert session.run({"x": x})["y"] == pytest.approx(24.0)
    with pytest.raises(UnsupportedModelError, match=r"backend 'openvino' \| cannot read 'det.onnx': .*Det"):
        deploykit.load(path, "openvino")


# --- devices: no silent fallback -------------------------------------------------------------


def test_onnxruntime_cuda_without_gpu_is_an_error(catalog_paths):
    from tests.conftest import has_cuda_gpu

    if has_cuda_gpu():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceUnavailableError) as caught:
        deploykit.load(catalog_paths["conv_bn_act"], "onnxruntime", "cuda")
    message = str(caught.value)
    assert "backend 'onnxruntime' | device 'cuda' cannot be used:" in message
    assert "CUDAExecutionProvider" in message
    assert "allow_fallback=True" in message


def test_onnxruntime_explicit_fallback_is_reported(catalog_paths):
    from tests.conftest import has_cuda_gpu

    if has_cuda_gpu():
        pytest.skip("this machine has a GPU")
    with deploykit.load(catalog_paths["conv_bn_act"], "ort", "cuda:0", allow_fallback=True) as session:
        assert session.info.fallback is True
        assert session.info.device == "cpu"
        assert session.info.device_requested == "cuda:0"
        assert "CUDAExecutionProvider" in (session.info.fallback_reason or "")
        assert session.info.providers == ["CPUExecutionProvider"]
        session.run({"x": np.zeros((1, 3, 16, 16), np.float32)})


def test_onnxruntime_bad_device_name(catalog_paths):
    with pytest.raises(UsageError, match=r"device 'npu7' is not a device name; expected cpu, cuda, cuda:N"):
        deploykit.load(catalog_paths["multi_io"], "onnxruntime", "npu7")


def test_openvino_missing_device(catalog_paths):
    import openvino as ov

    if "GPU" in ov.Core().available_devices:
        pytest.skip("this machine has an OpenVINO GPU")
    with pytest.raises(
        DeviceUnavailableError,
        match=r"backend 'openvino' \| device 'GPU' cannot be used: OpenVINO on this machine offers CPU",
    ):
        deploykit.load(catalog_paths["multi_io"], "openvino", "GPU")


def test_opencv_cuda_target_without_cuda_build(catalog_paths):
    import cv2

    if cv2.cuda.getCudaEnabledDeviceCount():
        pytest.skip("this OpenCV has CUDA")
    with pytest.raises(DeviceUnavailableError, match=r"backend 'opencv' \| device 'cuda' cannot be used: .*CUDA"):
        deploykit.load(catalog_paths["multi_io"], "opencv", "cuda")
    with deploykit.load(catalog_paths["multi_io"], "opencv", "cuda_fp16", allow_fallback=True) as s:
        assert s.info.fallback and s.info.device == "cpu" and s.info.precision == "f32"


def test_opencv_unknown_target(catalog_paths):
    with pytest.raises(UsageError, match=r"device 'vulkan' is not a target; expected one of cpu, opencl"):
        deploykit.load(catalog_paths["multi_io"], "opencv", "vulkan")


# --- OpenCV and Darknet ------------------------------------------------------------------------


def _tiny_darknet(tmp_path):
    """A one-layer Darknet model: 1x1 conv, 2 filters, linear, 3-channel 8x8 input."""
    cfg = tmp_path / "tiny.cfg"
    cfg.write_text(
        "[net]\nwidth=8\nheight=8\nchannels=3\n\n"
        "[convolutional]\nfilters=2\nsize=1\nstride=1\npad=0\nactivation=linear\n"
    )
    biases = np.array([0.5, -0.25], np.float32)
    weights = np.arange(6, dtype=np.float32).reshape(2, 3, 1, 1) / 10
    blob = tmp_path / "tiny.weights"
    blob.write_bytes(struct.pack("<iiiQ", 0, 2, 0, 0) + biases.tobytes() + weights.tobytes())
    return cfg, blob, biases, weights


def test_opencv_reads_darknet_natively_or_says_to_convert(tmp_path):
    import cv2

    cfg, blob, biases, weights = _tiny_darknet(tmp_path)
    if not hasattr(cv2.dnn, "readNetFromDarknet"):
        with pytest.raises(
            UnsupportedModelError,
            match=r"OpenCV 5 removed readNetFromDarknet.*deploykit convert darknet",
        ):
            deploykit.load(cfg, "opencv", weights=str(blob))
        return
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    with deploykit.load(cfg, "opencv", weights=str(blob)) as session:
        assert session.inputs["data"].shape == (1, 3, 8, 8)
        (output,) = session.run({"data": x}).values()
    expected = np.einsum("oc,nchw->nohw", weights[:, :, 0, 0], x) + biases[None, :, None, None]
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_opencv_darknet_needs_weights(tmp_path):
    import cv2

    if not hasattr(cv2.dnn, "readNetFromDarknet"):
        pytest.skip("OpenCV 5 has no Darknet reader")
    cfg, _, _, _ = _tiny_darknet(tmp_path)
    with pytest.raises(UsageError, match=r"needs its .weights file"):
        deploykit.load(cfg, "opencv")


def test_symbolic_dims_must_agree(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])
    out = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 2])
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["s"])], "g", [x, y], [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "shared.onnx")
    with deploykit.load(tmp_path / "shared.onnx", "onnxruntime") as session:
        with pytest.raises(
            InputError,
            match=r"input 'y' \| axis 0 \('batch'\) is 3, but input 'x' set 'batch' to 2",
        ):
            session.run({"x": np.zeros((2, 2), np.float32), "y": np.zeros((3, 2), np.float32)})


def test_onnxruntime_s_reason_does_not_depend_on_where_the_model_lives(tmp_path):
    """ONNX Runtime puts the model's full path into its load error; deploykit's message names the file
    and says the same reason wherever the file is."""
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    deep = tmp_path.joinpath(*["a-rather-long-folder-name"] * 12)
    deep.mkdir(parents=True)
    messages = []
    for folder in (tmp_path, deep):
        onnx.save(model, folder / "custom.onnx")
        with pytest.raises(UnsupportedModelError) as caught:
            deploykit.load(folder / "custom.onnx", "onnxruntime")
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert "NoSuchOp" in messages[0] and str(tmp_path) not in messages[0]
