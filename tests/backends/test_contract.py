"""The backend contract: every backend, every catalog model, against the ONNX reference."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import deploykit
from deploykit.backends.registry import get_backend
from deploykit.verify.metrics import Thresholds, compare_outputs
from tests.assets.catalog import CATALOG
from tests.assets.reference import run_reference

# fp32 tolerances for these small graphs: runtimes reorder sums, nothing more.
ATOL, RTOL = 1e-5, 1e-4


@pytest.mark.parametrize("entry", CATALOG, ids=[e.name for e in CATALOG])
def test_matches_reference(backend_name, catalog_paths, entry):
    path = catalog_paths[entry.name]
    feeds_list = entry.feeds(np.random.default_rng(0))
    try:
        session = deploykit.load(path, backend_name, **get_backend(backend_name).precision_options("f32"))
    except deploykit.UnsupportedModelError as refusal:
        # a backend may refuse what its runtime cannot run, but only by naming what it cannot run
        if not entry.refusal_names:
            raise
        missing = [name for name in entry.refusal_names if name not in refusal.message]
        assert not missing, f"the refusal does not name {missing}: {refusal}"
        assert refusal.hint, refusal
        pytest.skip(f"{backend_name} refuses {entry.name}, naming {', '.join(entry.refusal_names)}: {refusal}")
    with session:
        assert list(session.outputs) == [o for o in run_reference(path, feeds_list[0])]
        assert session.info.fallback is False
        assert session.info.precision == "f32"
        for feeds in feeds_list:
            outputs = session.run(feeds)
            reference = run_reference(path, feeds)
            assert list(outputs) == list(reference), "outputs must come in graph order"
            for name, array in outputs.items():
                assert array.flags.c_contiguous
                assert array.dtype == reference[name].dtype
            report = compare_outputs(outputs, reference, Thresholds(atol=ATOL, rtol=RTOL))
            assert all(o.passed for o in report), [o.describe() for o in report if not o.passed]


def test_outputs_are_owned_by_the_caller(backend_name, catalog_paths):
    path = catalog_paths["mlp_dynamic_batch"]
    rng = np.random.default_rng(5)
    first_feed, second_feed = rng.uniform(-1, 1, (2, 3, 8)).astype(np.float32)
    with deploykit.load(path, backend_name, **get_backend(backend_name).precision_options("f32")) as session:
        first = session.run({"x": first_feed})["y"]
        kept = first.copy()
        session.run({"x": second_feed})
        np.testing.assert_array_equal(first, kept)


def test_concurrent_runs_equal_serial_runs(backend_name, catalog_paths):
    path = catalog_paths["conv_bn_act"]
    rng = np.random.default_rng(6)
    feeds = [rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(8 * 50)]
    with deploykit.load(path, backend_name, **get_backend(backend_name).precision_options("f32")) as session:
        serial = [session.run({"x": x})["y"] for x in feeds]
        results: list[np.ndarray | None] = [None] * len(feeds)
        errors: list[BaseException] = []

        def worker(start: int) -> None:
            try:
                for i in range(start, len(feeds), 8):
                    results[i] = session.run({"x": feeds[i]})["y"]
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors
    for expected, got in zip(serial, results, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_session_reports_what_runs(backend_name, catalog_paths):
    with deploykit.load(catalog_paths["conv_bn_act"], backend_name) as session:
        info = session.info
        assert info.backend == backend_name
        assert info.backend_version
        assert info.device.lower() == "cpu"
        assert info.precision in ("f32", "bf16", "f16")
        assert info.providers


def test_run_after_close_is_an_error(backend_name, catalog_paths):
    session = deploykit.load(catalog_paths["multi_io"], backend_name)
    session.close()
    with pytest.raises(deploykit.UsageError, match="is closed"):
        session.run({"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 3), np.float32)})
