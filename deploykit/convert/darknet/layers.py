"""The layer table of a Darknet network: each section's parameters and output shape, computed
the way Darknet's ``parser.c`` computes them, and the order of its parameters in ``.weights``.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field
from typing import Any

from deploykit.convert.darknet.vocabulary import (
    ACTIVATIONS,
    CONV_TRAINING,
    KNOWN_UNCONVERTED,
    NET_KEYS,
    REGION_TRAINING,
    YOLO_TRAINING,
)
from deploykit.darknet_cfg import DarknetCfg, Section, check_unused, read_cfg
from deploykit.errors import ConversionError, UnsupportedLayerError

Shape = tuple[int, int, int]  # channels, height, width


@dataclass
class Layer:
    """One Darknet layer, resolved: its inputs (layer indices, -1 = the image), shapes and parameters."""

    index: int
    type: str
    section: Section
    inputs: list[int]
    in_shape: Shape
    out_shape: Shape
    params: dict[str, Any] = field(default_factory=dict)
    weight_blocks: list[tuple[str, int]] = field(default_factory=list)

    def where(self) -> str:
        return self.section.where()

    @property
    def parameter_count(self) -> int:
        return sum(count for _, count in self.weight_blocks)

    def detail(self) -> str:
        """What the layer does, in Darknet's own terms: ``32 3x3/2 leaky bn``, ``from -1,-8``, ``80 classes``."""
        p = self.params
        if self.type == "convolutional":
            text = f"{p['filters']} {p['size']}x{p['size']}/{p['stride'][0]}" + (
                f" g{p['groups']}" if p["groups"] > 1 else ""
            )
            return text + f" {p['activation']}" + (" bn" if p["batch_normalize"] else "")
        if self.type == "maxpool":
            return f"{p['size']}x{p['size']}/{p['stride'][0]} pad {p['padding']}"
        if self.type in ("route", "shortcut", "sam", "scale_channels"):
            text = "from " + ",".join(str(i) for i in self.inputs)
            if self.type == "route" and p["groups"] > 1:
                text += f" group {p['group_id']}/{p['groups']}"
            return text
        if self.type in ("yolo", "region"):
            return f"{p['classes']} classes, {len(p['anchors'])} anchors"
        return ""

    def to_dict(self) -> dict[str, Any]:
        """The layer as ``inspect`` shows it: index, type, shapes (C, H, W), parameters and detail."""
        return {
            "index": self.index,
            "type": self.type,
            "input": list(self.in_shape),
            "output": list(self.out_shape),
            "parameters": self.parameter_count,
            "detail": self.detail(),
        }


@dataclass
class Network:
    """The resolved network: input size and the layers in order."""

    cfg: DarknetCfg
    channels: int
    height: int
    width: int
    layers: list[Layer]

    @property
    def parameter_count(self) -> int:
        return sum(layer.parameter_count for layer in self.layers)

    def heads(self) -> list[Layer]:
        return [layer for layer in self.layers if layer.type in ("yolo", "region")]

    def stride(self) -> int:
        """How much the deepest downsampling path shrinks the input (the size must be a multiple of it).

        Layers whose size does not follow the input are left out: a global [avgpool] (squeeze-excitation,
        classifier heads), a [connected] layer and the layers computed only from them; their 1x1 output is
        not a stride of the whole input.
        """
        fixed: set[int] = set()
        for layer in self.layers:
            if layer.type in ("avgpool", "connected") or all(i in fixed for i in layer.inputs):
                fixed.add(layer.index)
        strides = [
            max(self.height // layer.out_shape[1], self.width // layer.out_shape[2])
            for layer in self.layers
            if layer.index not in fixed and layer.out_shape[1] and layer.out_shape[2]
        ]
        return max(strides, default=1)


def _activation(section: Section, default: str) -> str:
    name = section.text("activation", default).lower()
    if name in KNOWN_UNCONVERTED:
        raise UnsupportedLayerError(
            f"{section.where()} | activation '{name}' is not converted to ONNX.",
            hint=f"supported activations: {', '.join(sorted(ACTIVATIONS))}.",
        )
    if name not in ACTIVATIONS:
        raise UnsupportedLayerError(
            f"{section.where()} | activation '{name}' (line {section.option_lines.get('activation')}) is not a "
            "Darknet activation.",
            hint=f"Darknet would silently use ReLU instead; fix the name. Known: {', '.join(sorted(ACTIVATIONS))}.",
        )
    return name


def _layer_index(section: Section, value: int, count: int) -> int:
    """Darknet's rule: negative indices are relative to this layer, others absolute."""
    target = section.index + value if value < 0 else value
    if not 0 <= target < section.index:
        raise ConversionError(
            f"{section.where()} | refers to layer {value}, which resolves to {target}; only earlier layers "
            f"0..{section.index - 1} can be used.",
            hint="negative indices count back from this layer; non-negative ones are absolute layer numbers.",
        )
    return target


# Larger inputs are typos: the verification image alone would need terabytes.
MAX_INPUT_SIDE = 16384
MAX_INPUT_CHANNELS = 4096


def resolve(cfg: DarknetCfg, width: int | None = None, height: int | None = None) -> Network:
    """Compute every layer's parameters and shapes; raise on anything unsupported or inconsistent."""
    net = cfg.net
    channels = net.integer("channels", 3)
    height = height or net.integer("height", 0)
    width = width or net.integer("width", 0)
    if height <= 0 or width <= 0 or channels <= 0:
        raise ConversionError(
            f"cfg '{cfg.path}' [net] | needs positive width, height and channels (got {width}x{height}x{channels}).",
            hint="set width= and height= in [net] or pass --input-size WxH.",
        )
    check_unused(net, NET_KEYS)
    layers: list[Layer] = []
    if max(height, width) > MAX_INPUT_SIDE or channels > MAX_INPUT_CHANNELS:
        raise ConversionError(
            f"cfg '{cfg.path}' [net] | input {width}x{height}x{channels} is too large; each side may be up to "
            f"{MAX_INPUT_SIDE} pixels and channels up to {MAX_INPUT_CHANNELS}.",
            hint="Darknet networks take inputs such as 416x416x3; check width=, height= and channels=.",
        )
    shape: Shape = (channels, height, width)
    for section in cfg.layers:
        builder = _BUILDERS.get(section.type)
        if builder is None:
            raise UnsupportedLayerError(
                f"{section.where()} | section [{section.type}] is not supported.",
                hint=f"supported sections: {', '.join(sorted(_BUILDERS))}.",
            )
        layer = builder(section, shape, layers)
        layers.append(layer)
        shape = layer.out_shape
    return Network(cfg, channels, height, width, layers)


def _previous(section: Section, shape: Shape) -> list[int]:
    return [section.index - 1]


def _check_positive(section: Section, **values: int) -> None:
    """Filters, groups, strides, sizes and dilations of 0 or less make no layer (Darknet divides by them)."""
    for key, value in values.items():
        if value <= 0:
            written = key if section.has(key) else ("stride" if key.startswith("stride") else key)
            halves = " (2 halves the feature map)" if written.startswith("stride") else ""
            raise ConversionError(
                f"{section.where()} | {written}={value} must be a positive integer.",
                hint=f"set {written}=1 or more{halves}.",
            )


def _conv_out(size: int, length: int, pad: int, stride: int, dilation: int) -> int:
    return (length + 2 * pad - dilation * (size - 1) - 1) // stride + 1


def _convolutional(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    c, h, w = shape
    filters = section.integer("filters", 1)
    size = section.integer("size", 1)
    stride = section.integer("stride", 1)
    stride_x = section.integer("stride_x", stride)
    stride_y = section.integer("stride_y", stride)
    dilation = section.integer("dilation", 1)
    groups = section.integer("groups", 1)
    pad = section.integer("pad", 0)
    padding = section.integer("padding", 0)
    if pad:
        padding = size // 2
    padding *= dilation
    batch_normalize = section.integer("batch_normalize", 0)
    activation = _activation(section, "logistic")
    for key in (
        "binary",
        "xnor",
        "dontload",
        "dontloadscales",
        "deform",
        "antialiasing",
        "share_index",
        "assisted_excitation",
        "coordconv",
    ):
        if section.has(key) and section.integer(key, 0):
            raise UnsupportedLayerError(
                f"{section.where()} | option {section.shown(key)} is not supported.",
                hint="it changes the computation or the weights layout.",
            )
    check_unused(section, CONV_TRAINING)
    _check_positive(
        section, filters=filters, size=size, groups=groups, stride_x=stride_x, stride_y=stride_y, dilation=dilation
    )
    if c % groups or filters % groups:
        raise ConversionError(
            f"{section.where()} | filters={filters}, size={size}, groups={groups} do not fit {c} input channels.",
            hint="groups must divide both the input channels and filters.",
        )
    out_h = _conv_out(size, h, padding, stride_y, dilation)
    out_w = _conv_out(size, w, padding, stride_x, dilation)
    if out_h <= 0 or out_w <= 0:
        raise ConversionError(
            f"{section.where()} | a {size}x{size} convolution does not fit its {h}x{w} input.",
            hint="the input size is too small for this network; use a larger --input-size.",
        )
    blocks = [("biases", filters)]
    if batch_normalize:
        blocks += [("scales", filters), ("rolling_mean", filters), ("rolling_variance", filters)]
    blocks.append(("weights", filters * (c // groups) * size * size))
    return Layer(
        section.index,
        "convolutional",
        section,
        _previous(section, shape),
        shape,
        (filters, out_h, out_w),
        {
            "filters": filters,
            "size": size,
            "stride": (stride_y, stride_x),
            "padding": padding,
            "groups": groups,
            "dilation": dilation,
            "batch_normalize": bool(batch_normalize),
            "activation": activation,
        },
        blocks,
    )


def _connected(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    inputs = shape[0] * shape[1] * shape[2]
    outputs = section.integer("output", 1)
    batch_normalize = section.integer("batch_normalize", 0)
    activation = _activation(section, "logistic")
    check_unused(section, frozenset({"learning_rate", "stopbackward"}))
    blocks = [("biases", outputs), ("weights", outputs * inputs)]
    if batch_normalize:  # after the weights in connected layers, unlike convolutions
        blocks += [("scales", outputs), ("rolling_mean", outputs), ("rolling_variance", outputs)]
    return Layer(
        section.index,
        "connected",
        section,
        _previous(section, shape),
        shape,
        (outputs, 1, 1),
        {"outputs": outputs, "batch_normalize": bool(batch_normalize), "activation": activation},
        blocks,
    )


def _maxpool(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    c, h, w = shape
    stride = section.integer("stride", 1)
    stride_x = section.integer("stride_x", stride)
    stride_y = section.integer("stride_y", stride)
    size = section.integer("size", stride)
    padding = section.integer("padding", size - 1)
    for key in ("maxpool_depth", "antialiasing"):
        if section.has(key) and section.integer(key, 0):
            raise UnsupportedLayerError(
                f"{section.where()} | option {key} is not supported.", hint="use a plain [maxpool]."
            )
    check_unused(section, frozenset({"out_channels"}))
    _check_positive(section, stride_x=stride_x, stride_y=stride_y, size=size)
    if padding < 0:
        raise ConversionError(
            f"{section.where()} | padding={padding} is negative.", hint="use padding=0 or more (default size-1)."
        )
    out_h = (h + padding - size) // stride_y + 1
    out_w = (w + padding - size) // stride_x + 1
    if out_h <= 0 or out_w <= 0:
        raise ConversionError(
            f"{section.where()} | a size-{size} pool does not fit its {h}x{w} input.", hint="use a larger --input-size."
        )
    return Layer(
        section.index,
        "maxpool",
        section,
        _previous(section, shape),
        shape,
        (c, out_h, out_w),
        {"size": size, "stride": (stride_y, stride_x), "padding": padding},
    )


def _avgpool(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    check_unused(section, frozenset())
    return Layer(section.index, "avgpool", section, _previous(section, shape), shape, (shape[0], 1, 1))


def _route(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    sources = [_layer_index(section, v, len(layers)) for v in section.integers("layers")]
    if not sources:
        raise ConversionError(f"{section.where()} | needs layers=...", hint="e.g. layers=-1,-4.")
    groups = section.integer("groups", 1)
    group_id = section.integer("group_id", 0)
    check_unused(section, frozenset({"stopbackward"}))
    if groups <= 0 or not 0 <= group_id < groups:
        raise ConversionError(
            f"{section.where()} | groups={groups}, group_id={group_id} is not a valid split.",
            hint="group_id must be in 0..groups-1.",
        )
    first = layers[sources[0]].out_shape
    channels = 0
    for source in sources:
        c, h, w = layers[source].out_shape
        if (h, w) != first[1:]:
            raise ConversionError(
                f"{section.where()} | joins layer {sources[0]} ({first[1]}x{first[2]}) with layer {source} ({h}x{w}); "
                "routed layers must have the same height and width.",
                hint="check the layers= indices.",
            )
        if c % groups:
            raise ConversionError(
                f"{section.where()} | layer {source} has {c} channels, not divisible by groups={groups}.",
                hint="check groups=.",
            )
        channels += c // groups
    return Layer(
        section.index,
        "route",
        section,
        sources,
        shape,
        (channels, first[1], first[2]),
        {"groups": groups, "group_id": group_id},
    )


def _shortcut(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    source = _layer_index(section, section.integers("from")[0], len(layers))
    activation = _activation(section, "linear")
    alpha = section.number("alpha", 1.0)
    beta = section.number("beta", 1.0)
    weights_type = section.text("weights_type", "none")
    if weights_type != "none":
        raise UnsupportedLayerError(
            f"{section.where()} | weights_type={weights_type} is not supported.",
            hint="only plain shortcuts (weights_type=none) are converted.",
        )
    check_unused(section, frozenset({"weights_normalization", "stopbackward"}))
    other = layers[source].out_shape
    # Darknet samples a larger source with a stride (ResNet's projection-free downsampling)
    stride = other[2] // shape[2] if shape[2] else 0
    if other[1:] != shape[1:] and not (stride > 1 and other[2] == shape[2] * stride and other[1] == shape[1] * stride):
        raise ConversionError(
            f"{section.where()} | adds layer {source} ({other[1]}x{other[2]}) to the previous layer "
            f"({shape[1]}x{shape[2]}); the sizes are incompatible.",
            hint="a shortcut joins layers of the same size (or a source an integer factor larger); check from=.",
        )
    return Layer(
        section.index,
        "shortcut",
        section,
        [section.index - 1, source],
        shape,
        shape,
        {"activation": activation, "alpha": alpha, "beta": beta, "stride": max(stride, 1)},
    )


def _upsample(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    stride = section.integer("stride", 2)
    scale = section.number("scale", 1.0)
    check_unused(section, frozenset())
    if stride <= 0:
        raise UnsupportedLayerError(
            f"{section.where()} | stride={stride} (downsampling) is not supported.", hint="use a positive stride."
        )
    c, h, w = shape
    return Layer(
        section.index,
        "upsample",
        section,
        _previous(section, shape),
        shape,
        (c, h * stride, w * stride),
        {"stride": stride, "scale": scale},
    )


def _reorg(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    stride = section.integer("stride", 1)
    for key in ("reverse", "flatten", "extra"):
        if section.has(key) and section.integer(key, 0):
            raise UnsupportedLayerError(
                f"{section.where()} | option {key} is not supported.",
                hint="only the forward reorg of YOLOv2 is converted.",
            )
    check_unused(section, frozenset())
    c, h, w = shape
    if stride <= 0 or h % stride or w % stride:
        raise ConversionError(
            f"{section.where()} | stride={stride} does not divide the {h}x{w} input.",
            hint="use an input size that is a multiple of the network stride.",
        )
    return Layer(
        section.index,
        section.type,
        section,
        _previous(section, shape),
        shape,
        (c * stride * stride, h // stride, w // stride),
        {"stride": stride},
    )


def _softmax(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    groups = section.integer("groups", 1)
    temperature = section.number("temperature", 1.0)
    check_unused(section, frozenset({"tree", "spatial", "noloss"}))
    total = shape[0] * shape[1] * shape[2]
    if groups <= 0 or total % groups:
        raise ConversionError(
            f"{section.where()} | groups={groups} does not divide its {total} inputs.", hint="check groups=."
        )
    return Layer(
        section.index,
        "softmax",
        section,
        _previous(section, shape),
        shape,
        shape,
        {"groups": groups, "temperature": temperature},
    )


def _dropout(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    section.number("probability", 0.5)
    check_unused(section, frozenset({"dropblock", "dropblock_size_rel", "dropblock_size_abs"}))
    return Layer(section.index, "dropout", section, _previous(section, shape), shape, shape)


def _batchnorm(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    check_unused(section, frozenset())
    c = shape[0]
    return Layer(
        section.index,
        "batchnorm",
        section,
        _previous(section, shape),
        shape,
        shape,
        {},
        [("scales", c), ("rolling_mean", c), ("rolling_variance", c)],
    )


def _sam(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    source = _layer_index(section, section.integers("from")[0], len(layers))
    activation = _activation(section, "linear")
    check_unused(section, frozenset())
    if layers[source].out_shape != shape:
        raise ConversionError(
            f"{section.where()} | multiplies shapes {shape} and {layers[source].out_shape}.",
            hint="[sam] needs layers of the same shape; check from=.",
        )
    return Layer(section.index, "sam", section, [section.index - 1, source], shape, shape, {"activation": activation})


def _scale_channels(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    source = _layer_index(section, section.integers("from")[0], len(layers))
    activation = _activation(section, "linear")
    if section.has("scale_wh") and section.integer("scale_wh", 0):
        raise UnsupportedLayerError(
            f"{section.where()} | scale_wh=1 is not supported.", hint="only channel scaling is converted."
        )
    check_unused(section, frozenset())
    target = layers[source].out_shape
    if shape[0] != target[0] or shape[1:] != (1, 1):
        raise ConversionError(
            f"{section.where()} | scales layer {source} {target} by {shape}; expected a ({target[0]}, 1, 1) input.",
            hint="[scale_channels] follows a squeeze (avgpool + 1x1 convs) with as many channels as from=.",
        )
    return Layer(
        section.index, "scale_channels", section, [section.index - 1, source], shape, target, {"activation": activation}
    )


MAX_ANCHOR_PIXELS = 16384
"""The largest anchor side accepted: Darknet's inputs are at most a few thousand pixels a side."""


def _anchors(section: Section, num: int) -> list[tuple[float, float]]:
    """The ``anchors=`` pairs, checked: an even count of finite, positive sizes, at least ``num`` pairs
    (Darknet would read zeros past the end; deploykit refuses instead). Pairs beyond ``num`` are
    ignored, as in Darknet."""
    values = section.numbers("anchors")
    bad = next((v for v in values if not (math.isfinite(v) and v > 0)), None)
    if bad is not None:
        raise ConversionError(
            f"{section.where()} | anchors= holds {bad:g}; expected anchor widths and heights, finite numbers above 0.",
            hint="copy the anchors of the cfg the weights were trained with.",
        )
    huge = next((v for v in values if v > MAX_ANCHOR_PIXELS), None)
    if huge is not None:  # anchors are pixels of the network input: 1e30 decodes every box to infinity
        raise ConversionError(
            f"{section.where()} | anchors= holds {huge:g}; expected anchor sizes in pixels of the network input "
            f"(at most {MAX_ANCHOR_PIXELS}).",
            hint="copy the anchors of the cfg the weights were trained with.",
        )
    if len(values) % 2:
        raise ConversionError(
            f"{section.where()} | anchors= holds {len(values)} numbers; expected width,height pairs (an even count).",
            hint="copy the anchors of the cfg the weights were trained with.",
        )
    if len(values) // 2 < num:
        raise ConversionError(
            f"{section.where()} | num={num} anchors, but anchors= gives {len(values) // 2} pairs.",
            hint="give num anchor pairs in anchors= (num is the count of all anchors, mask picks this head's).",
        )
    return [(values[i], values[i + 1]) for i in range(0, 2 * num, 2)]


def _yolo(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    classes = section.integer("classes", 20)
    total = section.integer("num", 1)
    mask = section.integers("mask", list(range(total)))
    anchors = _anchors(section, total)
    scale_x_y = section.number("scale_x_y", 1.0)
    new_coords = section.integer("new_coords", 0)
    check_unused(section, YOLO_TRAINING)
    if any(not 0 <= m < len(anchors) for m in mask):
        raise ConversionError(
            f"{section.where()} | mask {mask} refers to anchors beyond the {len(anchors)} given.",
            hint="give num anchor pairs in anchors=.",
        )
    expected = len(mask) * (classes + 5)
    if shape[0] != expected:
        raise ConversionError(
            f"{section.where()} | gets {shape[0]} channels, expected {len(mask)} masks × ({classes} classes + 5) "
            f"= {expected}.",
            hint="set filters= of the convolution before it to that number.",
        )
    return Layer(
        section.index,
        "yolo",
        section,
        _previous(section, shape),
        shape,
        shape,
        {
            "classes": classes,
            "anchors": [anchors[m] for m in mask],
            "scale_x_y": scale_x_y,
            "new_coords": bool(new_coords),
        },
    )


def _region(section: Section, shape: Shape, layers: list[Layer]) -> Layer:
    classes = section.integer("classes", 20)
    coords = section.integer("coords", 4)
    num = section.integer("num", 1)
    use_softmax = section.integer("softmax", 0)
    anchors = _anchors(section, num)
    threshold = section.number("thresh", 0.2)  # OpenCV's importer zeroes class scores at or below it
    check_unused(section, REGION_TRAINING)
    if coords != 4 or not use_softmax:
        raise UnsupportedLayerError(
            f"{section.where()} | only coords=4 with softmax=1 is converted.", hint="this is the YOLOv2 [region] layer."
        )
    if len(anchors) != num:
        raise ConversionError(
            f"{section.where()} | has {len(anchors)} anchor pairs for num={num}.",
            hint="give num anchor pairs in anchors=.",
        )
    expected = num * (coords + 1 + classes)
    if shape[0] != expected:
        raise ConversionError(
            f"{section.where()} | gets {shape[0]} channels, expected {num} × ({classes} classes + 5) = {expected}.",
            hint="set filters= of the convolution before it to that number.",
        )
    return Layer(
        section.index,
        "region",
        section,
        _previous(section, shape),
        shape,
        shape,
        {"classes": classes, "anchors": anchors, "opencv_threshold": threshold},
    )


_BUILDERS = {
    "convolutional": _convolutional,
    "conv": _convolutional,
    "connected": _connected,
    "conn": _connected,
    "maxpool": _maxpool,
    "max": _maxpool,
    "avgpool": _avgpool,
    "avg": _avgpool,
    "route": _route,
    "shortcut": _shortcut,
    "upsample": _upsample,
    "reorg": _reorg,
    "reorg3d": _reorg,
    "softmax": _softmax,
    "soft": _softmax,
    "dropout": _dropout,
    "batchnorm": _batchnorm,
    "sam": _sam,
    "scale_channels": _scale_channels,
    "yolo": _yolo,
    "region": _region,
}


def load_network(cfg: str | os.PathLike[str], input_size: tuple[int, int] | None = None) -> Network:
    """Parse and resolve a cfg, at its own input size or ``input_size`` (width, height)."""
    return load_networks(cfg, input_size)[0]


def load_networks(cfg: str | os.PathLike[str], input_size: tuple[int, int] | None = None) -> tuple[Network, Network]:
    """The network at ``input_size`` (width, height; default the cfg's own) and at the cfg's own
    size, from one read of the cfg (the same object twice when the sizes are the same)."""
    parsed = read_cfg(cfg)
    # resolving marks the options it read; a second resolve at another size starts from a clean copy
    clean = copy.deepcopy(parsed) if input_size is not None else parsed
    native = resolve(parsed)
    if input_size is None or input_size == (native.width, native.height):
        return native, native
    stride = native.stride()
    width, height = input_size
    if width % stride or height % stride:
        raise ConversionError(
            f"input size {width}x{height} | is not a multiple of the network stride {stride}.",
            hint=f"use multiples of {stride}, e.g. "
            f"{width // stride * stride or stride}x{height // stride * stride or stride}.",
        )
    return resolve(clean, width=width, height=height), native
