"""Each Darknet layer's ONNX form against Darknet's C loops transcribed in tests/assets/darknet/reference.py."""

from __future__ import annotations

import struct

import numpy as np
import onnx
import pytest

import deploykit
from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet, load_network
from deploykit.convert.darknet.weights import write_random_weights
from deploykit.errors import ConversionError
from tests.assets.darknet import reference


def _convert(tmp_path, body, width=8, height=8, channels=4, weights=None, **options):
    cfg = tmp_path / "net.cfg"
    cfg.write_text(f"[net]\nwidth={width}\nheight={height}\nchannels={channels}\n{body}")
    blob = tmp_path / "net.weights"
    if weights is None:
        write_random_weights(load_network(cfg), blob, seed=5)
    else:
        blob.write_bytes(struct.pack("<3iQ", 0, 2, 0, 0) + np.asarray(weights, "<f4").tobytes())
    out = tmp_path / "net.onnx"
    report = convert_darknet(cfg, blob, out, DarknetExportSettings(**options), verify_backends=[])
    return out, report


def _run(path, x):
    with deploykit.load(path) as session:
        (output,) = session.run({"images": x[None]}).values()
    return output[0]


@pytest.mark.parametrize(("size", "stride", "side"), [(2, 1, 13), (2, 2, 13), (3, 2, 9), (5, 1, 7), (2, 2, 8)])
def test_maxpool_padding_as_darknet(tmp_path, size, stride, side):
    path, _ = _convert(tmp_path, f"[maxpool]\nsize={size}\nstride={stride}\n", side, side, 2)
    x = np.random.default_rng(0).standard_normal((2, side, side)).astype(np.float32)
    np.testing.assert_array_equal(_run(path, x), reference.maxpool(x, size, stride, size - 1))


def test_reorg_is_darknets_own_not_space_to_depth(tmp_path):
    path, _ = _convert(tmp_path, "[reorg]\nstride=2\n", 6, 4, 8)
    x = np.random.default_rng(1).standard_normal((8, 4, 6)).astype(np.float32)
    expected = reference.reorg_cpu(x, 6, 4, 8, 2, forward=0).reshape(32, 2, 3)
    np.testing.assert_array_equal(_run(path, x), expected)


def test_reorg3d_is_space_to_depth_in_darknet_channel_order(tmp_path):
    path, _ = _convert(tmp_path, "[reorg3d]\nstride=2\n", 6, 4, 3)
    x = np.random.default_rng(2).standard_normal((3, 4, 6)).astype(np.float32)
    # AlexeyAB's [reorg3d] runs reorg_cpu on the output dims (w/s, h/s, c·s²), forward=0
    expected = reference.reorg_cpu(x, 3, 2, 12, 2, forward=0).reshape(12, 2, 3)
    np.testing.assert_array_equal(_run(path, x), expected)


@pytest.mark.parametrize(
    "activation",
    [
        "linear",
        "logistic",
        "leaky",
        "relu",
        "relu6",
        "relie",
        "ramp",
        "loggy",
        "tanh",
        "hardtan",
        "elu",
        "selu",
        "gelu",
        "swish",
        "mish",
        "hard_mish",
        "hardswish",
    ],
)
def test_activations_use_darknets_formulas(tmp_path, activation):
    # a 1x1 convolution with weight 1, bias 0 on one channel: the layer is the activation alone
    path, _ = _convert(
        tmp_path,
        f"[convolutional]\nfilters=1\nsize=1\nactivation={activation}\n",
        8,
        8,
        1,
        weights=[0.0, 1.0],
    )
    x = np.linspace(-6, 6, 64, dtype=np.float32).reshape(1, 8, 8)
    expected = np.array([reference.activate(float(v), activation) for v in x.ravel()], np.float32).reshape(x.shape)
    np.testing.assert_allclose(_run(path, x), expected, atol=2e-6, rtol=1e-5)


def test_shortcut_with_fewer_channels_and_weights(tmp_path):
    body = (
        "[convolutional]\nfilters=3\nsize=1\nactivation=linear\n"
        "[convolutional]\nfilters=5\nsize=1\nactivation=linear\n"
        "[shortcut]\nfrom=-2\nalpha=0.5\nbeta=2\nactivation=leaky\n"
    )
    path, _ = _convert(tmp_path, body, 4, 4, 2)
    net = load_network(tmp_path / "net.cfg")
    weights = np.fromfile(tmp_path / "net.weights", dtype="<f4", offset=20)
    b0, w0 = weights[:3], weights[3:9].reshape(3, 2)
    b1, w1 = weights[9:14], weights[14:29].reshape(5, 3)
    x = np.random.default_rng(3).standard_normal((2, 4, 4)).astype(np.float32)
    first = np.einsum("oc,chw->ohw", w0, x) + b0[:, None, None]
    second = np.einsum("oc,chw->ohw", w1, first) + b1[:, None, None]
    summed = reference.shortcut(second, first, 0.5, 2.0)
    expected = np.vectorize(lambda v: reference.activate(v, "leaky"))(summed).astype(np.float32)
    assert net.layers[2].out_shape == (5, 4, 4)
    np.testing.assert_allclose(_run(path, x), expected, atol=1e-5)


def test_shortcut_from_a_larger_layer(tmp_path):
    body = (
        "[convolutional]\nfilters=2\nsize=1\nactivation=linear\n"
        "[convolutional]\nfilters=2\nsize=3\nstride=2\npad=1\nactivation=linear\n"
        "[shortcut]\nfrom=-2\n"
    )
    path, _ = _convert(tmp_path, body, 8, 8, 2)
    with deploykit.load(path) as session:
        x = np.random.default_rng(4).standard_normal((1, 2, 8, 8)).astype(np.float32)
        assert session.run({"images": x})["shortcut_2"].shape == (1, 2, 4, 4)


def test_upsample_with_scale(tmp_path):
    path, _ = _convert(tmp_path, "[upsample]\nstride=3\nscale=0.5\n", 4, 3, 2)
    x = np.random.default_rng(5).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(_run(path, x), reference.upsample(x, 3, 0.5))


def test_connected_with_batch_norm_after_the_weights(tmp_path):
    # biases(2), weights(2x3), then scales, mean, variance: Darknet's order for [connected]
    biases, weights = [0.5, -1.0], [1, 2, 3, 4, 5, 6]
    scales, mean, variance = [2.0, 1.0], [0.25, -0.5], [4.0, 1.0]
    path, report = _convert(
        tmp_path,
        "[connected]\noutput=2\nbatch_normalize=1\nactivation=linear\n",
        1,
        1,
        3,
        weights=biases + weights + scales + mean + variance,
    )
    x = np.array([1.0, -2.0, 0.5], np.float32).reshape(3, 1, 1)
    product = np.array(weights, np.float64).reshape(2, 3) @ x.ravel()
    expected = np.array(scales) * (product - np.array(mean)) / (np.sqrt(variance) + 1e-6) + np.array(biases)
    np.testing.assert_allclose(_run(path, x).ravel(), expected, rtol=1e-6)
    assert report.parameter_count == 14


def test_softmax_groups_and_temperature(tmp_path):
    path, _ = _convert(tmp_path, "[softmax]\ngroups=2\ntemperature=2\n", 2, 1, 2)
    x = np.array([1.0, 2.0, 3.0, 5.0], np.float32).reshape(2, 1, 2)
    groups = x.ravel().reshape(2, 2) / 2
    expected = (np.exp(groups) / np.exp(groups).sum(axis=1, keepdims=True)).reshape(2, 1, 2)
    np.testing.assert_allclose(_run(path, x), expected, rtol=1e-6)


def test_sam_and_scale_channels(tmp_path):
    body = (
        "[convolutional]\nfilters=3\nsize=1\nactivation=linear\n[sam]\nfrom=-1\n[avgpool]\n[scale_channels]\nfrom=-2\n"
    )
    path, _ = _convert(tmp_path, body, 4, 4, 3)
    weights = np.fromfile(tmp_path / "net.weights", dtype="<f4", offset=20)
    x = np.random.default_rng(6).standard_normal((3, 4, 4)).astype(np.float32)
    conv = np.einsum("oc,chw->ohw", weights[3:12].reshape(3, 3), x) + weights[:3, None, None]
    squared = conv * conv
    expected = squared * squared.mean(axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(_run(path, x), expected, rtol=1e-5, atol=1e-6)


def test_route_groups_take_the_group_id_slice(tmp_path):
    body = "[convolutional]\nfilters=4\nsize=1\nactivation=linear\n[route]\nlayers=-1\ngroups=2\ngroup_id=1\n"
    path, _ = _convert(tmp_path, body, 2, 2, 1, weights=[0, 0, 0, 0, 1, 2, 3, 4])
    x = np.ones((1, 2, 2), np.float32)
    np.testing.assert_array_equal(_run(path, x), np.stack([np.full((2, 2), 3.0), np.full((2, 2), 4.0)]))


def test_dynamic_batch_and_opset(tmp_path):
    path, _ = _convert(
        tmp_path, "[convolutional]\nfilters=2\nsize=3\npad=1\nbatch_normalize=1\n", batch="dynamic", opset=17
    )
    model = onnx.load(str(path))
    assert model.opset_import[0].version == 17
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    with deploykit.load(path, "openvino", precision="f32") as session:
        assert session.run({"images": np.zeros((3, 4, 8, 8), np.float32)})["convolutional_0"].shape == (
            3,
            2,
            8,
            8,
        )


def test_bad_options(tmp_path):
    with pytest.raises(ConversionError, match=r"head 'boxes' \| is not one of raw, decoded"):
        _convert(tmp_path, "[maxpool]\nsize=2\nstride=2\n", head="boxes")
    with pytest.raises(ConversionError, match=r"opset 11 \| the Darknet converter writes opsets 13 to 21"):
        _convert(tmp_path, "[maxpool]\nsize=2\nstride=2\n", opset=11)
    with pytest.raises(ConversionError, match=r"batch 'many' \| expected an integer from 1 to 1024, or 'dynamic'"):
        _convert(tmp_path, "[maxpool]\nsize=2\nstride=2\n", batch="many")
    with pytest.raises(ConversionError, match=r"input size 'big' \| expected WIDTHxHEIGHT"):
        _convert(tmp_path, "[maxpool]\nsize=2\nstride=2\n", input_size="big")
