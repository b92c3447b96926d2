"""OpenVINO-specific behaviour: per-shape compilation of dynamic models, precision reporting."""

from __future__ import annotations

import numpy as np
import pytest

import deploykit
from deploykit.backends.registry import get_backend
from deploykit.errors import PrecisionUnavailableError, UsageError
from tests.assets.paths import require_module

require_module("openvino", "pip install 'deploykit[openvino]'", "OpenVINO")


def test_dynamic_model_compiles_once_per_shape(catalog_paths):
    with deploykit.load(catalog_paths["mlp_dynamic_batch"], "openvino", precision="f32") as session:
        for batch in (1, 4, 1, 4, 4):
            assert session.run({"x": np.ones((batch, 8), np.float32)})["y"].shape == (batch, 4)
        cached = session._by_shape  # the per-shape cache is the behaviour under test
        assert sorted(key[0][0] for key in cached) == [1, 4]
        static = [entry.compiled.inputs[0].get_partial_shape().is_static for entry in cached.values()]
        assert all(static)


def test_reshape_never_keeps_one_dynamic_model(catalog_paths):
    with deploykit.load(catalog_paths["mlp_dynamic_batch"], "openvino", precision="f32", reshape="never") as session:
        assert session.run({"x": np.ones((3, 8), np.float32)})["y"].shape == (3, 4)
        assert not session._by_shape


def test_precision_is_what_the_compiled_model_says(catalog_paths):
    """Every precision this CPU claims runs as asked; one it does not claim is refused, or with
    allow_fallback reported as ``asked → ran`` (derived from precisions(), never from this CPU)."""
    native = get_backend("openvino").precisions("CPU")
    for precision in native:
        with deploykit.load(catalog_paths["conv_bn_act"], "ov", precision=precision) as session:
            assert session.info.precision == precision
            assert session.info.precision_requested == precision and not session.info.fallback
    for precision in sorted({"f32", "bf16", "f16"} - set(native)):
        with pytest.raises(PrecisionUnavailableError, match=f"does not compute {precision} natively; it runs"):
            deploykit.load(catalog_paths["conv_bn_act"], "ov", precision=precision)
        with deploykit.load(catalog_paths["conv_bn_act"], "ov", precision=precision, allow_fallback=True) as session:
            assert session.info.precision_requested == precision
            if session.info.precision != precision:
                assert session.info.fallback
                assert f"precision {precision} → {session.info.precision}" in session.info.fallback_reason
                assert session.info.precision_label == f"{precision} → {session.info.precision}"


def test_bad_precision_and_hint(catalog_paths):
    with pytest.raises(
        UsageError,
        match=r"option precision='int4' is not one of f32, fp32, float32, bf16, bfloat16, f16, fp16, float16, half",
    ):
        deploykit.load(catalog_paths["conv_bn_act"], "ov", precision="int4")
    with pytest.raises(UsageError, match=r"option performance_hint='fast' is not one of latency, throughput"):
        deploykit.load(catalog_paths["conv_bn_act"], "ov", performance_hint="fast")


def test_auto_device_reports_the_real_device(catalog_paths):
    with deploykit.load(catalog_paths["conv_bn_act"], "openvino", "AUTO") as session:
        assert session.info.device_requested == "AUTO"
        assert session.info.providers and all(p for p in session.info.providers)
        session.run({"x": np.zeros((1, 3, 16, 16), np.float32)})
