"""The zero-copy fast path (inputs wrapped, outputs written into caller-owned arrays) keeps the
contract: callers' inputs are never written, outputs never alias inputs or each other, and a
later call never writes into an earlier call's arrays."""

from __future__ import annotations

import numpy as np
import pytest

import deploykit
from deploykit.backends.registry import get_backend
from tests.assets.paths import missing_asset
from tests.assets.reference import run_reference


def _open(path, backend_name, **options):
    return deploykit.load(path, backend_name, **get_backend(backend_name).precision_options("f32"), **options)


def test_inputs_are_never_written_and_outputs_never_alias(backend_name, catalog_paths):
    path = catalog_paths["multi_io"]
    rng = np.random.default_rng(3)
    with _open(path, backend_name) as session:
        feeds = {name: rng.uniform(-1, 1, [d if isinstance(d, int) else 2 for d in spec.shape]).astype(spec.dtype)
                 for name, spec in session.inputs.items()}  # fmt: skip
        kept = {name: array.copy() for name, array in feeds.items()}
        first = session.run(feeds)
        first_kept = {name: array.copy() for name, array in first.items()}
        # a second call with other arrays writes neither into the first call's inputs nor outputs
        other = {name: rng.uniform(-1, 1, array.shape).astype(array.dtype) for name, array in feeds.items()}
        second = session.run(other)
    for name, array in feeds.items():
        np.testing.assert_array_equal(array, kept[name])
    for name, array in first.items():
        np.testing.assert_array_equal(array, first_kept[name])
        assert array.flags.c_contiguous and array.flags.writeable
        assert not any(np.shares_memory(array, x) for x in [*feeds.values(), *other.values(), *second.values()])
    expected = run_reference(path, other)
    for name in second:
        np.testing.assert_allclose(second[name], expected[name], rtol=1e-4, atol=1e-5)


def test_read_only_and_strided_inputs(backend_name, catalog_paths):
    path = catalog_paths["conv_bn_act"]
    base = np.random.default_rng(4).uniform(-1, 1, (1, 3, 16, 32)).astype(np.float32)
    strided = base[:, :, :, ::2]  # a view that is not C-contiguous
    frozen = np.ascontiguousarray(strided)
    frozen.setflags(write=False)
    expected = run_reference(path, {"x": frozen})["y"]
    with _open(path, backend_name) as session:
        for x in (strided, frozen):
            np.testing.assert_allclose(session.run({"x": x})["y"], expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batch", [1, 3, 2])
def test_openvino_dynamic_outputs_are_copied_out(catalog_paths, batch):
    if not get_backend("openvino").is_available():
        missing_asset("the openvino backend's runtime", str(get_backend("openvino").unavailable_reason()))
    path = catalog_paths["mlp_dynamic_batch"]
    x = np.random.default_rng(batch).uniform(-1, 1, (batch, 8)).astype(np.float32)
    with _open(path, "openvino", reshape="never") as session:
        first = session.run({"x": x})["y"]
        kept = first.copy()
        session.run({"x": x * 2})
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(first, run_reference(path, {"x": x})["y"], rtol=1e-4, atol=1e-5)


def test_a_reused_input_array_is_read_afresh_and_dropped_outputs_may_be_reused(backend_name, catalog_paths):
    """A steady loop passes the same input array and drops each result: the session may keep the
    input bound and write into the dropped output again, but must read the input's current
    content and never touch an output (or a view of one) the caller still holds."""
    path = catalog_paths["conv_bn_act"]
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    with _open(path, backend_name) as session:
        for _ in range(3):  # dropped results
            session.run({"x": x})
        first = session.run({"x": x})["y"]
        np.testing.assert_allclose(first, run_reference(path, {"x": x})["y"], rtol=1e-4, atol=1e-5)
        kept = first.copy()
        x[...] = rng.uniform(-1, 1, x.shape)  # the same array, new content
        view = session.run({"x": x})["y"][0]  # only a view of this result is kept
        np.testing.assert_allclose(view, run_reference(path, {"x": x})["y"][0], rtol=1e-4, atol=1e-5)
        view_kept = view.copy()
        x[...] = rng.uniform(-1, 1, x.shape)
        third = session.run({"x": x})["y"]
        np.testing.assert_allclose(third, run_reference(path, {"x": x})["y"], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(view, view_kept)
    assert not np.shares_memory(third, view) and not np.shares_memory(third, first)
