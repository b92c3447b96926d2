"""Every feed error a user can hit, with its message (checked on all backends)."""

from __future__ import annotations

import numpy as np
import pytest

import deploykit
from deploykit import InputError
from deploykit.backends.registry import get_backend
from tests.assets.catalog import CATALOG


@pytest.fixture
def multi_io(backend_name, catalog_paths):
    with deploykit.load(
        catalog_paths["multi_io"], backend_name, **get_backend(backend_name).precision_options("f32")
    ) as s:
        yield s


def _ab(dtype=np.float32, shape=(2, 3)):
    return {"a": np.ones(shape, dtype), "b": np.ones(shape, dtype)}


def test_unknown_input_name(multi_io):
    with pytest.raises(InputError, match=r"input 'c' \| is not an input of this model; its inputs are 'a', 'b'"):
        multi_io.run({**_ab(), "c": np.ones((2, 3), np.float32)})


def test_missing_input(multi_io):
    with pytest.raises(InputError, match=r"input 'b' \| is missing; expected float32\(2, 3\)"):
        multi_io.run({"a": np.ones((2, 3), np.float32)})


def test_lossy_dtype_refused_then_cast_on_request(multi_io):
    with pytest.raises(
        InputError,
        match=r"input 'a' \| got dtype float64, expected float32; .*lose precision.*cast=True",
    ):
        multi_io.run(_ab(np.float64))
    outputs = multi_io.run(_ab(np.float64), cast=True)
    np.testing.assert_array_equal(outputs["z_sum"], np.full((2, 3), 2, np.float32))


def test_lossless_dtype_cast_happens(multi_io):
    outputs = multi_io.run(_ab(np.float16))
    assert outputs["a_prod"].dtype == np.float32


def test_wrong_rank(multi_io):
    with pytest.raises(InputError, match=r"input 'a' \| got rank 3 \(1, 2, 3\), expected rank 2 \(2, 3\)"):
        multi_io.run({"a": np.ones((1, 2, 3), np.float32), "b": np.ones((2, 3), np.float32)})


def test_wrong_static_dim(multi_io):
    with pytest.raises(InputError, match=r"input 'a' \| got shape \(2, 4\), expected \(2, 3\) \(axis 1 must be 3\)"):
        multi_io.run({"a": np.ones((2, 4), np.float32), "b": np.ones((2, 3), np.float32)})


def test_positional_call_and_count(multi_io):
    outputs = multi_io(np.ones((2, 3), np.float32), np.full((2, 3), 3, np.float32))
    np.testing.assert_array_equal(outputs["a_prod"], np.full((2, 3), 3, np.float32))
    with pytest.raises(InputError, match=r"got 1 positional input\(s\), the model has 2: 'a', 'b'"):
        multi_io(np.ones((2, 3), np.float32))


def test_string_feed_is_refused(multi_io):
    with pytest.raises(InputError, match=r"input 'a' \| got dtype <U1|input 'a' \| got dtype str"):
        multi_io.run({"a": [["x"] * 3] * 2, "b": np.ones((2, 3), np.float32)})


def test_integer_indices_take_int32(backend_name, catalog_paths):
    entry = next(e for e in CATALOG if e.name == "int64_embedding")
    try:
        session = deploykit.load(catalog_paths["int64_embedding"], backend_name)
    except deploykit.UnsupportedModelError as refusal:  # the contract's rule: a refusal must name what it cannot run
        assert entry.refusal_names and all(name in refusal.message for name in entry.refusal_names), refusal
        pytest.skip(f"{backend_name} refuses {entry.name} by name: {refusal}")
    with session:
        outputs = session.run({"indices": np.array([[0, 1, 2, 3, 9]], dtype=np.int32)})
        assert outputs["embedded"].shape == (1, 5, 4)
