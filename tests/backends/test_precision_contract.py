"""What a backend claims about precision is what runs, on any CPU.

For every registered backend × device × precision it claims (``Backend.precisions(device)``), a
catalog model opened with ``precision_options`` reports that precision; for every precision it
does not claim, asking for it is a ``PrecisionUnavailableError`` naming what the device runs
(backends without a precision setting refuse the option itself). Nothing here names a CPU: the
expectations come from the backend's own claims, so the test holds on a CPU with or without
bf16, f16, AMX or VNNI; ``make test`` also runs it with OpenVINO's oneDNN limited to a Zen-4-like
ISA (avx512_bf16, no avx512_fp16, no AMX: ``ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16``).
"""

from __future__ import annotations

import numpy as np
import pytest

import deploykit
from deploykit.backends.registry import get_backend
from deploykit.errors import PrecisionUnavailableError, UsageError
from tests.assets.catalog import CATALOG

FLOAT_PRECISIONS = ("f32", "bf16", "f16")
MODEL = "conv_bn_act"


def _feeds() -> dict[str, np.ndarray]:
    entry = next(e for e in CATALOG if e.name == MODEL)
    return entry.feeds(np.random.default_rng(0))[0]


def _devices(backend_name: str) -> list[str]:
    backend = get_backend(backend_name)
    return list(backend.devices())


def test_each_claimed_precision_runs_as_claimed(backend_name, catalog_paths):
    backend = get_backend(backend_name)
    checked = 0
    for device in _devices(backend_name):
        for precision in backend.precisions(device):
            options = backend.precision_options(precision)
            with deploykit.load(catalog_paths[MODEL], backend_name, device, **options) as session:
                assert session.info.precision == precision, (backend_name, device, precision, session.info)
                assert not session.info.fallback, session.info.fallback_reason
                if "precision" in options:
                    assert session.info.precision_requested == precision
                outputs = session.run(_feeds())
                assert all(np.isfinite(v).all() for v in outputs.values())
            checked += 1
    assert checked, f"{backend_name} claims no precision on any device"


def test_each_unclaimed_precision_is_refused_by_name(backend_name, catalog_paths):
    backend = get_backend(backend_name)
    for device in _devices(backend_name):
        native = backend.precisions(device)
        for precision in (p for p in FLOAT_PRECISIONS if p not in native):
            if "precision" not in backend.options:  # no precision setting: the option itself is refused
                with pytest.raises(UsageError, match="precision"):
                    deploykit.load(catalog_paths[MODEL], backend_name, device, precision=precision)
                continue
            if precision not in backend.options["precision"].choices:  # type: ignore[union-attr]
                continue
            with pytest.raises(PrecisionUnavailableError) as caught:
                deploykit.load(catalog_paths[MODEL], backend_name, device, precision=precision)
            message = str(caught.value)
            assert f"does not compute {precision} natively; it runs {', '.join(native)} here" in message
            assert "--allow-fallback" in message


def test_an_allowed_fallback_says_what_ran(catalog_paths):
    """With allow_fallback the runtime may substitute; the session says ``asked → ran``, never quietly."""
    backend = get_backend("openvino")
    if not backend.is_available():
        pytest.skip("openvino is not installed")
    native = backend.precisions("CPU")
    for precision in FLOAT_PRECISIONS:
        with deploykit.load(catalog_paths[MODEL], "ov", precision=precision, allow_fallback=True) as session:
            info = session.info
            assert info.precision_requested == precision
            if precision in native:
                assert info.precision == precision and not info.fallback
            elif info.precision != precision:
                assert info.fallback and f"precision {precision} → {info.precision}" in info.fallback_reason


def test_the_other_cpu_pass_really_is_another_cpu():
    """`make test`'s pytest-other-cpu pass limits oneDNN to avx512_bf16 without avx512_fp16: OpenVINO
    must then claim no f16, so that pass exercises the refusals this CPU may never reach."""
    import os

    if os.environ.get("ONEDNN_MAX_CPU_ISA") != "AVX512_CORE_BF16":
        pytest.skip("only in make test's pytest-other-cpu pass (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16)")
    backend = get_backend("openvino")
    if not backend.is_available():
        pytest.skip("openvino is not installed")
    assert "f16" not in backend.precisions("CPU"), backend.precisions("CPU")


def test_the_emulated_cpu_pass_really_has_no_bf16():
    """`make test`'s pytest-cpu-without-bf16 pass runs under qemu-x86_64 -cpu Haswell-v4: OpenVINO must
    then claim f32 alone, so that pass is the case of a user's CPU without bf16 or f16."""
    import os

    if not os.environ.get("DEPLOYKIT_EMULATED_CPU"):
        pytest.skip("only in make test's pytest-cpu-without-bf16 pass (qemu-x86_64 -cpu Haswell-v4)")
    backend = get_backend("openvino")
    if not backend.is_available():
        pytest.skip("openvino is not installed")
    assert backend.precisions("CPU") == ["f32"], backend.precisions("CPU")
