"""What a plug-in backend gets from the base class without writing it: alias resolution, option
checks, and translation of its runtime's exceptions into deploykit errors."""

from __future__ import annotations

import pytest

import deploykit
from deploykit.backends.registry import canonical_name, get_backend
from deploykit.errors import InvalidModelError, UnsupportedModelError


@pytest.fixture()
def raiser(monkeypatch):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "raiser=tests.assets.crashing_backend:RaisingBackend")
    get_backend.cache_clear()
    yield
    get_backend.cache_clear()


def test_a_plugins_own_alias_resolves(raiser):
    assert canonical_name("RZ") == "raiser"
    assert get_backend("rz").name == "raiser"


def test_a_runtime_exception_while_loading_is_translated(raiser, catalog_paths, tmp_path):
    with pytest.raises(UnsupportedModelError) as caught:
        deploykit.load(catalog_paths["conv_bn_act"], "raiser")
    assert str(caught.value).startswith("backend 'raiser' | cannot load 'conv_bn_act.onnx': op Foo is not implemented.")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    with pytest.raises(InvalidModelError, match=r"model '.*broken.onnx' \| cannot be parsed as ONNX"):
        deploykit.load(broken, "raiser")


def test_a_plugins_own_format_gets_its_runtimes_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("DEPLOYKIT_BACKENDS", "native=tests.assets.crashing_backend:NativeFormatBackend")
    get_backend.cache_clear()
    try:
        own = tmp_path / "model.mine"
        own.write_bytes(b"the runtime's own format")
        with pytest.raises(UnsupportedModelError) as caught:
            deploykit.load(own, "native")
        assert str(caught.value).startswith("backend 'native' | cannot load 'model.mine': op Foo is not implemented.")
        broken = tmp_path / "broken.onnx"  # an .onnx file is still diagnosed as one
        broken.write_bytes(b"not a model")
        with pytest.raises(InvalidModelError, match=r"model '.*broken.onnx' \| cannot be parsed as ONNX"):
            deploykit.load(broken, "native")
        other = tmp_path / "model.other"  # a suffix the backend does not declare is read as ONNX
        other.write_bytes(b"not a model")
        with pytest.raises(InvalidModelError, match=r"model '.*model.other' \| cannot be parsed as ONNX"):
            deploykit.load(other, "native")
    finally:
        get_backend.cache_clear()
