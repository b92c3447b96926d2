"""ONNX Runtime reports the device that actually runs, with either package.

CI installs ``onnxruntime-gpu``; `make test` also runs this file with the CPU-only ``onnxruntime``
first on the path (PYTHONPATH=.ort-cpu, DEPLOYKIT_EXPECT_ONNXRUNTIME=cpu), where a GPU request can
only fall back.
"""

from __future__ import annotations

import os

import pytest

import deploykit

CPU_ONLY = os.environ.get("DEPLOYKIT_EXPECT_ONNXRUNTIME") == "cpu"


def test_the_expected_onnxruntime_package_is_the_one_imported():
    import onnxruntime

    providers = onnxruntime.get_available_providers()
    if CPU_ONLY:
        assert ".ort-cpu" in onnxruntime.__file__, onnxruntime.__file__
        assert "CUDAExecutionProvider" not in providers, providers
    else:
        assert "CPUExecutionProvider" in providers, providers


@pytest.mark.parametrize("requested", ["cuda", "cuda:0", "tensorrt"])
def test_fallback_reports_the_device_that_runs(catalog_paths, requested):
    with deploykit.load(catalog_paths["conv_bn_act"], "onnxruntime", requested, allow_fallback=True) as session:
        info = session.info
    running = info.providers[0]
    if running == "TensorrtExecutionProvider" or (running == "CUDAExecutionProvider" and requested != "tensorrt"):
        assert info.device == requested and not info.fallback
    elif running == "CUDAExecutionProvider":
        assert info.device == "cuda:0" and info.fallback, "TensorRT fell back to CUDA"
    else:
        assert info.providers == ["CPUExecutionProvider"]
        assert info.device == "cpu", f"providers {info.providers} run on the CPU, the session says {info.device}"
        assert info.fallback and info.fallback_reason and info.device_requested == requested
    if CPU_ONLY:
        assert info.device == "cpu"


def test_cpu_request_is_cpu_without_fallback(catalog_paths):
    with deploykit.load(catalog_paths["conv_bn_act"], "onnxruntime", "cpu") as session:
        assert session.info.device == "cpu" and not session.info.fallback
