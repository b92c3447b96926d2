"""The cfg parser and layer table: Darknet's parsing rules, and every bad input a user can hit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deploykit.convert.darknet.convert import load_network
from deploykit.convert.darknet.layers import resolve
from deploykit.darknet_cfg import parse_cfg_text, read_cfg
from deploykit.errors import ConversionError, DeployKitError, UnsupportedLayerError

NET = "[net]\nwidth=32\nheight=32\nchannels=3\n"


def net_of(body: str, head: str = NET):
    return resolve(parse_cfg_text(head + body, "test.cfg"))


def test_whitespace_is_removed_and_comments_skipped():
    cfg = parse_cfg_text("[net]\n  width = 64 \n# a comment\n; another\nheight=32\n[convolutional]\nfilters=4\n")
    assert cfg.net.options == {"width": "64", "height": "32"}
    assert cfg.layers[0].type == "convolutional" and cfg.layers[0].line == 6


def test_inline_text_is_part_of_the_value():
    with pytest.raises(
        UnsupportedLayerError,
        match=r"activation 'leaky#note' \(line 8\) is not a Darknet activation.*silently use ReLU",
    ):
        net_of("[convolutional]\nfilters=4\nsize=3\nactivation=leaky  # note\n")


def test_repeated_key_keeps_the_first_value_as_darknet():
    net = net_of("[convolutional]\nfilters=4\nfilters=8\nsize=1\nactivation=linear\n")
    assert net.layers[0].out_shape == (4, 32, 32)


def test_convolution_without_activation_is_logistic():
    net = net_of("[convolutional]\nfilters=4\nsize=1\n")
    assert net.layers[0].params["activation"] == "logistic"


def test_pad_means_half_the_size_times_dilation():
    net = net_of("[convolutional]\nfilters=2\nsize=3\npad=1\ndilation=2\nactivation=linear\n")
    assert net.layers[0].params["padding"] == 2 and net.layers[0].out_shape == (2, 32, 32)


@pytest.mark.parametrize(
    ("pool", "size", "expected"),
    [
        ("size=2\nstride=1", 13, (13, 13)),
        ("size=2\nstride=2", 13, (7, 7)),
        ("size=5\nstride=1", 19, (19, 19)),
    ],
)
def test_maxpool_output_sizes(pool, size, expected):
    head = f"[net]\nwidth={size}\nheight={size}\nchannels=3\n"
    net = net_of(f"[maxpool]\n{pool}\n", head)
    assert net.layers[0].out_shape[1:] == expected


def test_relative_and_absolute_layer_indices():
    body = "[convolutional]\nfilters=2\nsize=1\nactivation=linear\n" * 3 + "[route]\nlayers=-1,0\n"
    net = net_of(body)
    assert net.layers[3].inputs == [2, 0] and net.layers[3].out_shape[0] == 4


def test_anchors_beyond_num_are_ignored():
    body = "[convolutional]\nfilters=18\nsize=1\nactivation=linear\n[yolo]\nmask=0,1,2\nanchors=1,2,3,4,5,6,7,8\nclasses=1\nnum=3\n"
    assert net_of(body).layers[1].params["anchors"] == [(1.0, 2.0), (3.0, 4.0), (5.0, 6.0)]


def test_training_keys_are_ignored_knowingly():
    body = "[convolutional]\nfilters=18\nsize=1\nactivation=linear\n[yolo]\nmask=0,1,2\nanchors=1,2,3,4,5,6\nclasses=1\nnum=3\njitter=.3\nignore_thresh=.7\nrandom=1\n"
    assert net_of(body).layers[1].type == "yolo"


def test_unknown_section_names_index_and_line():
    with pytest.raises(
        UnsupportedLayerError, match=r"layer 1 \[crop\] \(line 8\) \| section \[crop\] is not supported"
    ):
        net_of("[convolutional]\nfilters=2\nsize=1\n[crop]\ncrop_width=3\n")


def test_unknown_option_that_changes_math_is_an_error():
    with pytest.raises(UnsupportedLayerError, match=r"option 'xnor=1' \(line 8\)|option xnor=1 is not supported"):
        net_of("[convolutional]\nfilters=2\nsize=1\nxnor=1\n")
    with pytest.raises(UnsupportedLayerError, match=r"option 'wobble=3' \(line 8\) is not supported"):
        net_of("[convolutional]\nfilters=2\nsize=1\nwobble=3\n")


def test_route_to_a_layer_that_does_not_exist():
    with pytest.raises(
        ConversionError, match=r"layer 1 \[route\] \(line 8\) \| refers to layer -5, which resolves to -4"
    ):
        net_of("[convolutional]\nfilters=2\nsize=1\n[route]\nlayers=-5\n")
    with pytest.raises(ConversionError, match=r"refers to layer 7, which resolves to 7; only earlier layers 0..0"):
        net_of("[convolutional]\nfilters=2\nsize=1\n[route]\nlayers=7\n")


def test_shortcut_between_incompatible_shapes():
    body = "[convolutional]\nfilters=2\nsize=1\n[upsample]\nstride=2\n[shortcut]\nfrom=-2\n"
    with pytest.raises(
        ConversionError,
        match=r"layer 2 \[shortcut\] \(line 10\) \| adds layer 0 \(32x32\) to the previous layer \(64x64\); the sizes are incompatible",
    ):
        net_of(body)


def test_shortcut_from_a_larger_layer_samples_with_a_stride():
    body = (
        "[convolutional]\nfilters=2\nsize=1\n[convolutional]\nfilters=2\nsize=3\nstride=2\npad=1\n[shortcut]\nfrom=-2\n"
    )
    assert net_of(body).layers[2].params["stride"] == 2


def test_yolo_channel_count_must_fit():
    with pytest.raises(ConversionError, match=r"gets 20 channels, expected 3 masks × \(1 classes \+ 5\) = 18"):
        net_of("[convolutional]\nfilters=20\nsize=1\n[yolo]\nmask=0,1,2\nanchors=1,2,3,4,5,6\nclasses=1\nnum=3\n")


def test_input_size_not_divisible_by_the_stride(tmp_path):
    cfg = tmp_path / "net.cfg"
    cfg.write_text(NET + "[convolutional]\nfilters=2\nsize=3\nstride=2\npad=1\n[maxpool]\nsize=2\nstride=2\n")
    assert load_network(cfg, (64, 32)).layers[-1].out_shape == (2, 8, 16)
    with pytest.raises(ConversionError, match=r"input size 66x32 \| is not a multiple of the network stride 4"):
        load_network(cfg, (66, 32))


def test_empty_file(tmp_path):
    (tmp_path / "empty.cfg").write_text("")
    with pytest.raises(ConversionError, match=r"has no sections: it is empty or not a Darknet cfg"):
        read_cfg(tmp_path / "empty.cfg")


def test_binary_file_as_cfg(tmp_path):
    (tmp_path / "model.weights").write_bytes(b"\x00\x00\x00\x00\x02\x00\x00\x00" + bytes(range(256)) * 4)
    with pytest.raises(ConversionError, match=r"is a binary file, not a Darknet .cfg.*\.cfg text file first"):
        read_cfg(tmp_path / "model.weights")


def test_missing_cfg(tmp_path):
    with pytest.raises(ConversionError, match=r"cfg '.*nope.cfg' \| no such file"):
        read_cfg(tmp_path / "nope.cfg")


def test_first_section_must_be_net():
    with pytest.raises(ConversionError, match=r"starts with \[convolutional\] \(line 1\), expected \[net\]"):
        parse_cfg_text("[convolutional]\nfilters=2\n")


def test_garbage_line():
    with pytest.raises(ConversionError, match=r"line 5 \| 'filters 2' is neither key=value"):
        parse_cfg_text(NET + "filters 2\n")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("[]=#;,.-\n abcdefghilmnoprstuvwxyz0123456789")), max_size=300))
def test_fuzz_parser_raises_only_deploykit_errors(text):
    try:
        resolve(parse_cfg_text(text))
    except DeployKitError:
        pass


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "[convolutional]",
                "[maxpool]",
                "[route]",
                "[shortcut]",
                "[upsample]",
                "[yolo]",
                "[region]",
                "[reorg]",
                "[avgpool]",
                "[softmax]",
                "[connected]",
                "[dropout]",
                "[sam]",
                "[scale_channels]",
                "[batchnorm]",
                "filters=4",
                "size=3",
                "stride=2",
                "pad=1",
                "layers=-1,-2",
                "from=-2",
                "mask=0",
                "anchors=1,2",
                "classes=1",
                "num=1",
                "groups=2",
                "group_id=1",
                "activation=mish",
                "output=3",
                "stride=-1",
                "size=0",
            ]
        ),
        max_size=25,
    )
)
def test_fuzz_layer_tables_raise_only_deploykit_errors(lines):
    try:
        resolve(parse_cfg_text(NET + "\n".join(lines)))
    except DeployKitError:
        pass
