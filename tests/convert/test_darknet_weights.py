"""The .weights reader: headers, exact sizes, and the errors for truncated or foreign files."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from deploykit.convert.darknet.convert import convert_darknet, load_network
from deploykit.convert.darknet.weights import DarknetWeights, write_random_weights
from deploykit.errors import ConversionError
from tests.assets.paths import REPO

TINY = REPO / "models" / "darknet" / "yolov3-tiny.cfg"
V2 = REPO / "models" / "darknet" / "yolov2-tiny.cfg"


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory):
    path = tmp_path_factory.mktemp("w") / "yolov3-tiny.weights"
    write_random_weights(load_network(TINY), path, seed=0)
    return path


def test_twenty_byte_header_and_exact_size(tiny_weights):
    reader = DarknetWeights(tiny_weights)
    assert (reader.header.major, reader.header.minor, reader.header.size_bytes) == (0, 2, 20)
    reader.check_size(load_network(TINY))
    assert reader.float_count == 8_858_734


def test_sixteen_byte_header_of_old_files(tmp_path, tiny_weights):
    data = tiny_weights.read_bytes()
    old = tmp_path / "old.weights"
    old.write_bytes(struct.pack("<3ii", 0, 1, 0, 7) + data[20:])
    reader = DarknetWeights(old)
    assert reader.header.size_bytes == 16 and reader.header.seen == 7
    reader.check_size(load_network(TINY))
    new = DarknetWeights(tiny_weights)
    np.testing.assert_array_equal(reader.take(100), new.take(100))


def test_take_is_a_view_into_the_mapped_file(tiny_weights):
    block = DarknetWeights(tiny_weights).take(1000)
    assert not block.flags.owndata and not block.flags.writeable


def test_truncated_weights_name_the_layer(tmp_path, tiny_weights):
    cut = tmp_path / "cut.weights"
    cut.write_bytes(tiny_weights.read_bytes()[:4_000_000])
    with pytest.raises(ConversionError) as caught:
        convert_darknet(TINY, cut, tmp_path / "x.onnx", verify_backends=[])
    message = str(caught.value)
    assert (
        "weights 'cut.weights' | too short for 'yolov3-tiny.cfg': layer 10 [convolutional] (line 85) needs 1179648 floats for its weights, only 603851 remain"
        in message
    )
    assert "expected 35434956 bytes (header 20 + 4 × 8858734 floats), found 4000000" in message
    assert not (tmp_path / "x.onnx").exists()


def test_weights_for_another_cfg(tmp_path, tiny_weights):
    with pytest.raises(ConversionError, match=r"weights 'yolov3-tiny.weights' \| too short for 'yolov2-tiny.cfg'"):
        convert_darknet(V2, tiny_weights, tmp_path / "x.onnx", verify_backends=[])
    bigger = tmp_path / "more.weights"
    bigger.write_bytes(tiny_weights.read_bytes() + b"\x00" * 400)
    with pytest.raises(ConversionError, match=r"100 floats \(400 bytes\) left over after every layer.*another cfg"):
        convert_darknet(TINY, bigger, tmp_path / "x.onnx", verify_backends=[])


def test_empty_and_missing_weights(tmp_path):
    (tmp_path / "empty.weights").write_bytes(b"")
    with pytest.raises(
        ConversionError, match=r"is 0 bytes; a Darknet .weights file starts with a 16- or 20-byte header"
    ):
        DarknetWeights(tmp_path / "empty.weights")
    with pytest.raises(ConversionError, match=r"weights '.*nope.weights' \| no such file"):
        DarknetWeights(tmp_path / "nope.weights")


def test_failed_conversion_keeps_an_existing_model(tmp_path, tiny_weights):
    out = tmp_path / "model.onnx"
    out.write_bytes(b"yesterday's good model")
    cut = tmp_path / "cut.weights"
    cut.write_bytes(tiny_weights.read_bytes()[:1000])
    with pytest.raises(ConversionError):
        convert_darknet(TINY, cut, out, verify_backends=[])
    assert out.read_bytes() == b"yesterday's good model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.weights", "model.onnx"]


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_a_weight_that_is_nan_or_infinite_names_the_layer_even_unverified(tmp_path, tiny_weights, value):
    """Such a model computes NaN wherever the weight reaches: refused before writing, not only by a verification."""
    floats = np.fromfile(tiny_weights, "<f4", offset=20)
    floats[[2000, 2001]] = value  # layer 0 holds floats 0-495, layer 2 496-5231 (its weights from 624)
    bad = tmp_path / "bad.weights"
    bad.write_bytes(tiny_weights.read_bytes()[:20] + floats.tobytes())
    with pytest.raises(ConversionError) as caught:
        convert_darknet(TINY, bad, tmp_path / "x.onnx", verify_backends=[])
    assert str(caught.value).startswith(
        "weights 'bad.weights' | layer 2 [convolutional] (line 37): 2 of its 4608 weights are NaN or infinite."
    )
    assert not (tmp_path / "x.onnx").exists()
