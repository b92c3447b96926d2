"""ONNX Runtime's OpenVINO execution provider as the ``openvino`` device of the onnxruntime backend.

`make test` runs this file with the ``onnxruntime-openvino`` package first on the path
(PYTHONPATH=.ort-openvino, DEPLOYKIT_EXPECT_ONNXRUNTIME=openvino): the device runs and is verified
against onnx's reference evaluator. With any other onnxruntime package the device is listed as
unavailable with the reason, and asking for it is an error (no silent CPU).
"""

from __future__ import annotations

import os

import pytest

import deploykit
from deploykit.errors import DeviceUnavailableError
from deploykit.verify import compare

WITH_EP = os.environ.get("DEPLOYKIT_EXPECT_ONNXRUNTIME") == "openvino"
backend = deploykit.get_backend("onnxruntime")


def test_the_openvino_device_is_listed_where_the_package_has_it():
    if WITH_EP:
        import onnxruntime

        assert ".ort-openvino" in onnxruntime.__file__, onnxruntime.__file__
        assert "openvino" in backend.devices()
        assert "openvino" not in backend.unavailable_devices()
    else:
        assert "openvino" not in backend.devices()
        assert "install onnxruntime-openvino" in backend.unavailable_devices()["openvino"]


@pytest.mark.parametrize("device", ["openvino", "openvino:CPU"])
def test_the_openvino_device_runs_and_is_verified_or_refused(catalog_paths, device):
    model = catalog_paths["conv_bn_act"]
    if not WITH_EP:
        with pytest.raises(
            DeviceUnavailableError, match=r"device '.*' cannot be used: .* has no OpenVINOExecutionProvider"
        ):
            deploykit.load(model, "onnxruntime", device)
        return
    with deploykit.load(model, "onnxruntime", device) as session:
        assert session.info.device == device.lower() and session.info.providers[0] == "OpenVINOExecutionProvider"
    report = compare(model, [f"onnxruntime:{device}"])
    assert report.verdicts[0].status == "pass", report.verdicts[0].describe()
