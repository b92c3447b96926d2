"""Writes the Darknet cfgs of models/darknet/ from compact descriptions of the public architectures.

Run ``python models/darknet/generate.py`` to regenerate; the .cfg files are committed.
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).parent
COCO_CLASSES = 80
NET = """[net]
# Testing
batch=1
subdivisions=1
# Training
# batch=64
# subdivisions=16
width={width}
height={height}
channels=3
momentum=0.9
decay=0.0005
angle=0
saturation = 1.5
exposure = 1.5
hue=.1

learning_rate=0.001
burn_in=1000
max_batches = 500200
policy=steps
steps=400000,450000
scales=.1,.1
"""


class Cfg:
    def __init__(self, width: int, height: int) -> None:
        self.text = [NET.format(width=width, height=height)]
        self.count = 0

    def add(self, section: str, **options: object) -> int:
        lines = [f"[{section}]"] + [f"{k}={v}" for k, v in options.items()]
        self.text.append("\n".join(lines) + "\n")
        self.count += 1
        return self.count - 1

    def conv(self, filters: int, size: int = 3, stride: int = 1, activation: str = "leaky", bn: bool = True) -> int:
        options: dict[str, object] = {}
        if bn:
            options["batch_normalize"] = 1
        options.update(filters=filters, size=size, stride=stride, pad=1, activation=activation)
        return self.add("convolutional", **options)

    def head(self, filters: int = (COCO_CLASSES + 5) * 3, activation: str = "linear") -> int:
        return self.add("convolutional", size=1, stride=1, pad=1, filters=filters, activation=activation)

    def route(self, *layers: int, **options: object) -> int:
        return self.add("route", layers=",".join(str(x) for x in layers), **options)

    def shortcut(self, source: int = -3, activation: str = "linear") -> int:
        return self.add("shortcut", **{"from": source, "activation": activation})

    def maxpool(self, size: int = 2, stride: int = 2) -> int:
        return self.add("maxpool", size=size, stride=stride)

    def upsample(self, stride: int = 2) -> int:
        return self.add("upsample", stride=stride)

    def yolo(self, mask: str, anchors: str, num: int, **extra: object) -> int:
        return self.add(
            "yolo",
            mask=mask,
            anchors=anchors,
            classes=COCO_CLASSES,
            num=num,
            jitter=".3",
            ignore_thresh=".7",
            truth_thresh=1,
            random=1,
            **extra,
        )

    def write(self, name: str) -> None:
        (HERE / f"{name}.cfg").write_text("\n".join(self.text))


def yolov2_tiny() -> None:
    cfg = Cfg(416, 416)
    for filters in (16, 32, 64, 128, 256):
        cfg.conv(filters)
        cfg.maxpool()
    cfg.conv(512)
    cfg.maxpool(2, 1)
    cfg.conv(1024)
    cfg.conv(512)
    cfg.head(filters=425)
    cfg.add(
        "region",
        anchors="0.57273, 0.677385, 1.87446, 2.06253, 3.33843, 5.47434, 7.88282, 3.52778, 9.77052, 9.16828",
        bias_match=1,
        classes=COCO_CLASSES,
        coords=4,
        num=5,
        softmax=1,
        jitter=".2",
        rescore=0,
        object_scale=5,
        noobject_scale=1,
        class_scale=1,
        coord_scale=1,
        absolute=1,
        thresh=".6",
        random=1,
    )
    cfg.write("yolov2-tiny")


def yolov3_tiny() -> None:
    anchors = "10,14,  23,27,  37,58,  81,82,  135,169,  344,319"
    cfg = Cfg(416, 416)
    for filters in (16, 32, 64, 128, 256):
        layer = cfg.conv(filters)
        cfg.maxpool()
    cfg.conv(512)
    cfg.maxpool(2, 1)
    cfg.conv(1024)
    neck = cfg.conv(256, 1)
    cfg.conv(512)
    cfg.head()
    cfg.yolo("3,4,5", anchors, 6)
    cfg.route(neck - cfg.count)
    cfg.conv(128, 1)
    cfg.upsample()
    cfg.route(-1, layer)
    cfg.conv(256)
    cfg.head()
    cfg.yolo("0,1,2", anchors, 6)
    cfg.write("yolov3-tiny")


def yolov3() -> None:
    anchors = "10,13,  16,30,  33,23,  30,61,  62,45,  59,119,  116,90,  156,198,  373,326"
    cfg = Cfg(416, 416)
    cfg.conv(32)
    stage_ends = []
    for filters, blocks in ((64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)):
        cfg.conv(filters, 3, 2)
        for _ in range(blocks):
            cfg.conv(filters // 2, 1)
            cfg.conv(filters)
            last = cfg.shortcut()
        stage_ends.append(last)
    for index, (filters, mask) in enumerate(((512, "6,7,8"), (256, "3,4,5"), (128, "0,1,2"))):
        if index:
            cfg.route(-4)
            cfg.conv(filters, 1)
            cfg.upsample()
            cfg.route(-1, stage_ends[4 - index])
        for _ in range(2):
            cfg.conv(filters, 1)
            cfg.conv(filters * 2)
        cfg.conv(filters, 1)
        cfg.conv(filters * 2)
        cfg.head()
        cfg.yolo(mask, anchors, 9)
    cfg.write("yolov3")


def yolov4_tiny() -> None:
    anchors = "10,14,  23,27,  37,58,  81,82,  135,169,  344,319"
    cfg = Cfg(416, 416)
    cfg.conv(32, 3, 2)
    cfg.conv(64, 3, 2)
    for filters in (64, 128, 256):
        cfg.conv(filters)
        cfg.route(-1, groups=2, group_id=1)
        cfg.conv(filters // 2)
        cfg.conv(filters // 2)
        cfg.route(-1, -2)
        partial = cfg.conv(filters, 1)
        cfg.route(-6, -1)
        if filters < 256:
            cfg.maxpool()
    cfg.maxpool()
    cfg.conv(512)
    neck = cfg.conv(256, 1)
    cfg.conv(512)
    cfg.head()
    cfg.yolo(
        "3,4,5",
        anchors,
        6,
        scale_x_y="1.05",
        cls_normalizer="1.0",
        iou_normalizer="0.07",
        iou_loss="ciou",
        nms_kind="greedynms",
        beta_nms="0.6",
        resize="1.5",
    )
    cfg.route(neck - cfg.count)
    cfg.conv(128, 1)
    cfg.upsample()
    cfg.route(-1, partial)
    cfg.conv(256)
    cfg.head()
    cfg.yolo(
        "1,2,3",
        anchors,
        6,
        scale_x_y="1.05",
        cls_normalizer="1.0",
        iou_normalizer="0.07",
        iou_loss="ciou",
        nms_kind="greedynms",
        beta_nms="0.6",
        resize="1.5",
    )
    cfg.write("yolov4-tiny")


def yolov4() -> None:
    anchors = "12, 16, 19, 36, 40, 28, 36, 75, 76, 55, 72, 146, 142, 110, 192, 243, 459, 401"
    cfg = Cfg(608, 608)
    cfg.conv(32, activation="mish")
    cfg.conv(64, 3, 2, "mish")
    cfg.conv(64, 1, activation="mish")
    cfg.route(-2)
    cfg.conv(64, 1, activation="mish")
    cfg.conv(32, 1, activation="mish")
    cfg.conv(64, activation="mish")
    cfg.shortcut()
    cfg.conv(64, 1, activation="mish")
    cfg.route(-1, -7)
    cfg.conv(64, 1, activation="mish")
    csp_outputs = []
    for filters, blocks in ((128, 2), (256, 8), (512, 8), (1024, 4)):
        cfg.conv(filters, 3, 2, "mish")
        cfg.conv(filters // 2, 1, activation="mish")
        cfg.route(-2)
        cfg.conv(filters // 2, 1, activation="mish")
        for _ in range(blocks):
            cfg.conv(filters // 2, 1, activation="mish")
            cfg.conv(filters // 2, activation="mish")
            cfg.shortcut()
        cfg.conv(filters // 2, 1, activation="mish")
        cfg.route(-1, -(3 * blocks + 4))
        csp_outputs.append(cfg.conv(filters, 1, activation="mish"))
    cfg.conv(512, 1)
    cfg.conv(1024)
    cfg.conv(512, 1)
    cfg.maxpool(5, 1)
    cfg.route(-2)
    cfg.maxpool(9, 1)
    cfg.route(-4)
    cfg.maxpool(13, 1)
    cfg.route(-1, -3, -5, -6)
    cfg.conv(512, 1)
    cfg.conv(1024)
    top = cfg.conv(512, 1)
    laterals = []
    for filters, lateral in ((256, csp_outputs[2]), (128, csp_outputs[1])):
        cfg.conv(filters, 1)
        cfg.upsample()
        cfg.route(lateral)
        cfg.conv(filters, 1)
        cfg.route(-1, -3)
        for _ in range(2):
            cfg.conv(filters, 1)
            cfg.conv(filters * 2)
        laterals.append(cfg.conv(filters, 1))
    previous = [top, laterals[0]]
    for index, (filters, mask, scale) in enumerate(
        ((128, "0,1,2", "1.2"), (256, "3,4,5", "1.1"), (512, "6,7,8", "1.05"))
    ):
        if index:
            cfg.route(-4)
            cfg.conv(filters, 3, 2)
            cfg.route(-1, previous.pop() - cfg.count)
            for _ in range(2):
                cfg.conv(filters, 1)
                cfg.conv(filters * 2)
            cfg.conv(filters, 1)
        cfg.conv(filters * 2)
        cfg.head()
        cfg.yolo(
            mask,
            anchors,
            9,
            scale_x_y=scale,
            iou_thresh="0.213",
            cls_normalizer="1.0",
            iou_normalizer="0.07",
            iou_loss="ciou",
            nms_kind="greedynms",
            beta_nms="0.6",
            max_delta=5,
        )
    cfg.write("yolov4")


def yolov7_tiny() -> None:
    anchors = "12,16, 19,36, 40,28, 36,75, 76,55, 72,146, 142,110, 192,243, 459,401"
    cfg = Cfg(416, 416)

    def elan(filters: int) -> int:
        cfg.conv(filters, 1)
        cfg.route(-2)
        cfg.conv(filters, 1)
        cfg.conv(filters)
        cfg.conv(filters)
        cfg.route(-1, -2, -3, -5)
        return cfg.conv(filters * 2, 1)

    cfg.conv(32, 3, 2)
    cfg.conv(64, 3, 2)
    p2 = elan(32)
    cfg.maxpool()
    p3 = elan(64)
    cfg.maxpool()
    p4 = elan(128)
    cfg.maxpool()
    elan(256)
    cfg.conv(256, 1)
    cfg.route(-2)
    cfg.conv(256, 1)
    cfg.maxpool(5, 1)
    cfg.route(-2)
    cfg.maxpool(9, 1)
    cfg.route(-4)
    cfg.maxpool(13, 1)
    cfg.route(-1, -3, -5, -6)
    cfg.conv(256, 1)
    cfg.route(-1, -10)
    sppcspc = cfg.conv(256, 1)
    cfg.conv(128, 1)
    cfg.upsample()
    cfg.route(p4)
    cfg.conv(128, 1)
    cfg.route(-1, -3)
    top_down_p4 = elan(64)
    cfg.conv(64, 1)
    cfg.upsample()
    cfg.route(p3)
    cfg.conv(64, 1)
    cfg.route(-1, -3)
    out_p3 = elan(32)
    cfg.conv(128, 3, 2)
    cfg.route(-1, top_down_p4)
    out_p4 = elan(64)
    cfg.conv(256, 3, 2)
    cfg.route(-1, sppcspc)
    out_p5 = elan(128)
    del p2
    for source, filters, mask in ((out_p3, 128, "0,1,2"), (out_p4, 256, "3,4,5"), (out_p5, 512, "6,7,8")):
        cfg.route(source)
        cfg.conv(filters)
        cfg.head(activation="logistic")
        cfg.yolo(
            mask,
            anchors,
            9,
            scale_x_y="2.0",
            new_coords=1,
            iou_normalizer="0.05",
            cls_normalizer="0.5",
            iou_loss="ciou",
            nms_kind="diounms",
            beta_nms="0.6",
        )
    cfg.write("yolov7-tiny")


if __name__ == "__main__":
    for build in (yolov2_tiny, yolov3_tiny, yolov3, yolov4_tiny, yolov4, yolov7_tiny):
        build()
