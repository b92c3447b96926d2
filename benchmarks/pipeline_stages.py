"""Where the Detector's time around inference goes: YOLOv4-tiny 416 with the official Darknet weights on
Darknet's seven photos, each resized to 1280×720, stage by stage, next to OpenVINO INT8 inference.

Per frame, interleaved in each round, the pre-processing paths in turning order (wall ms, and this thread's CPU
ms; medians over frames × rounds; a stage written ``a − b`` is the difference of two medians measured on
the same inputs):

- pre, as before (``Preprocess.place`` + ``tensor``): resize, the padding copy (``copyMakeBorder``),
  colour/layout/normalise (``blobFromImages`` over the whole padded canvas);
- pre, as now (``Preprocess.prepare``): resize, then colour/layout/normalise of the resized pixels only,
  straight into the tensor, and the padding as a constant (prepare − resize); no canvas copy;
- pre, as the stream runs it (``Preprocess.prepare(frame, ring)``): the same into a reused tensor of a
  ``TensorRing`` (no allocation, the padding already there), bit for bit the same tensor;
- inference: with ``--bundle DIR`` (a ``deploykit optimize`` bundle of this model: the configuration
  optimize chose) the bundle's session, as ``Detector(DIR)`` opens it; without, OpenVINO INT8
  (``deploykit.quantize``'s default: ONNX Runtime static QDQ, calibrated on the same seven photos, not the
  configuration optimize chooses) with float layers f32 and with OpenVINO's default; ONNX Runtime f32 for
  scale; the line's ``int8`` says which;
- reading outputs (the Detector's NaN/inf check of every output);
- post, as before: full decode of every anchor per head (``decode_head_as_before``, the former
  ``decode_head`` for ``[yolo]`` heads, kept here as the baseline), the confidence filter over every row
  (``select`` − NMS), NMS, result building (what ``_postprocess`` does after ``select``);
- post, as now: per head the anchors whose best score can pass (``reachable_anchors``: the pre-filter),
  decoding only those (``decode_anchors``), filter (``select`` − NMS), NMS, result building.

Results of the two paths are compared frame by frame (same boxes, scores, classes, bit for bit). Prints
one JSON line. Run: ``.venv/bin/python benchmarks/pipeline_stages.py [--rounds 20] [--bundle DIR]``, where
``deploykit optimize yolov4-tiny.onnx --images photos/ -o DIR`` made ``DIR`` from the official YOLOv4-tiny
converted with ``--head raw``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import deploykit  # noqa: E402
from deploykit.optimize.bundle import read_bundle  # noqa: E402
from deploykit.vision.decode import select  # noqa: E402
from deploykit.vision.image import TensorRing, letterbox_geometry  # noqa: E402
from deploykit.vision.nms import nms  # noqa: E402
from deploykit.vision.yolo import decode_anchors, head_grid, reachable_anchors  # noqa: E402
from tests.assets.paths import darknet_image, official_darknet  # noqa: E402

PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "kite.jpg", "person.jpg", "scream.jpg")
CONF, IOU = 0.25, 0.45


def _models(folder: Path) -> tuple[Path, Path]:
    """The official YOLOv4-tiny (raw heads) and its INT8 model, calibrated on the seven photos."""
    from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet

    cfg, weights, _ = official_darknet("yolov4-tiny")
    f32 = folder / "yolov4-tiny.onnx"
    convert_darknet(cfg, weights, f32, verify_backends=[], export=DarknetExportSettings(head="raw"))
    photos = folder / "photos"
    photos.mkdir()
    for name in PHOTOS:
        shutil.copy(darknet_image(name), photos / name)
    int8 = folder / "yolov4-tiny.int8.onnx"
    deploykit.quantize(f32, int8, deploykit.QuantizeSettings(measure_speed=False, held_out=0.3), calibrate=photos)
    return f32, int8


def decode_head_as_before(raw: np.ndarray, head: dict[str, Any]) -> np.ndarray:
    """The baseline: ``decode_head`` as the Detector ran it on every frame before candidates came first
    (every anchor, whole-grid numpy, a float32 copy of the output)."""
    batch, _, h, w = raw.shape
    anchors = np.asarray(head["anchors"], dtype=np.float32)
    count, classes = len(anchors), int(head["classes"])
    grid = raw.reshape(batch, count, 5 + classes, h, w).astype(np.float32)
    cols, rows = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    cx, cy = (grid[:, :, 0] + cols) / w, (grid[:, :, 1] + rows) / h
    net_h, net_w = head["input_size"]
    bw = np.exp(grid[:, :, 2]) * (anchors[:, 0] / net_w)[None, :, None, None]
    bh = np.exp(grid[:, :, 3]) * (anchors[:, 1] / net_h)[None, :, None, None]
    objectness = grid[:, :, 4]
    scores = grid[:, :, 5:] * objectness[:, :, None]
    decoded = np.concatenate([np.stack([cx, cy, bw, bh, objectness], axis=2), scores], axis=2)
    return decoded.transpose(0, 3, 4, 1, 2).reshape(batch, h * w * count, 5 + classes)


class _Clock:
    """Per stage name: wall ms, and this thread's CPU ms (what a busy machine inflates less); the call's value."""

    def __init__(self) -> None:
        self.ms: dict[str, dict[str, list[float]]] = {"wall": defaultdict(list), "thread_cpu": defaultdict(list)}
        self.kind = "wall"

    def time(self, stage: str, call: Callable[[], Any]) -> Any:
        start, cpu_start = time.perf_counter(), time.thread_time()
        value = call()
        self.ms["thread_cpu"][stage].append((time.thread_time() - cpu_start) * 1e3)
        self.ms["wall"][stage].append((time.perf_counter() - start) * 1e3)
        return value

    def median(self, stage: str) -> float:
        return statistics.median(self.ms[self.kind][stage])


def _pre(
    clock: _Clock, detector: deploykit.Detector, frame: np.ndarray, turn: int, ring: TensorRing
) -> tuple[np.ndarray, Any]:
    """The three paths on one frame; which goes first turns round (the first one meets colder caches, OpenCV's
    thread pool asleep and the runtime's threads still spinning after inference)."""
    preprocess = detector.preprocess
    new_w, new_h, left, top, _ = letterbox_geometry(*frame.shape[:2], preprocess.size)
    (height, width), pad = preprocess.size, (preprocess.pad_value,) * 3
    borders = (top, height - new_h - top, left, width - new_w - left)

    def before() -> np.ndarray:
        resized = clock.time("resize", lambda: cv2.resize(frame, (new_w, new_h), interpolation=cv2.INTER_LINEAR))
        canvas = clock.time("pad_copy", lambda: cv2.copyMakeBorder(resized, *borders, cv2.BORDER_CONSTANT, value=pad))
        return clock.time("before_blob", lambda: preprocess.tensor([canvas]))

    paths = {
        "before": before,
        "now": lambda: clock.time("now_prepare", lambda: preprocess.prepare(frame)),
        "stream": lambda: clock.time("ring_prepare", lambda: preprocess.prepare(frame, ring)),
    }
    names = list(paths)
    order = names[turn % 3 :] + names[: turn % 3]
    made = {name: paths[name]() for name in order}
    (tensor, placement), (reused, _) = made["now"], made["stream"]
    assert np.array_equal(made["before"], tensor), "the two pre-processing paths differ"
    assert np.array_equal(reused, tensor), "a reused tensor differs from a new one"
    return reused, placement


def _post(clock: _Clock, detector: deploykit.Detector, outputs: dict[str, np.ndarray], placement: Any) -> None:
    clock.time("read_outputs", lambda: detector._checked(outputs))
    size = np.array([416, 416, 416, 416], np.float32)
    full, chosen = [], []
    for index, head in enumerate(detector.heads):
        raw = outputs[head["output"]]
        full.append(
            clock.time(f"before_decode_head{index}", lambda raw=raw, head=head: decode_head_as_before(raw, head)[0])
        )
        grid = head_grid(raw, head)[0]
        anchors = clock.time(f"now_prefilter_head{index}", lambda grid=grid: reachable_anchors(grid, CONF))
        chosen.append(clock.time(f"now_decode_head{index}", lambda g=grid, h=head, a=anchors: decode_anchors(g, h, *a)))
    results = {}
    for path, rows in (("before", np.concatenate(full)), ("now", np.concatenate(chosen))):
        boxes, scores = rows[:, :4] * size, rows[:, 5:]
        kept = clock.time(f"{path}_select", lambda b=boxes, s=scores: select(b, s, conf=CONF, iou=IOU))
        best = scores.max(axis=1)
        keep = best > CONF
        corners = np.concatenate([boxes[keep, :2] - boxes[keep, 2:] / 2, boxes[keep, :2] + boxes[keep, 2:] / 2], axis=1)
        classes = scores[keep].argmax(axis=1)
        clock.time(f"{path}_nms", lambda c=corners, s=best[keep], k=classes: nms(c, s, k, iou=IOU))
        results[path] = clock.time(f"{path}_results", lambda kept=kept: _detections(detector, placement, *kept))
    assert results["before"] == results["now"], "the two post-processing paths differ"


def _detections(detector: deploykit.Detector, placement: Any, xyxy: Any, scores: Any, class_ids: Any) -> list:
    """What ``Detector._postprocess`` does after ``select``: boxes back to the frame, ``Detection`` values."""
    from deploykit.vision.results import Detection

    original = placement.to_original(xyxy)
    return [
        Detection(detector.labels[int(c)], int(c), float(s), tuple(float(v) for v in box))
        for box, s, c in zip(original, scores, class_ids, strict=True)
    ]


def _detectors(folder: Path, bundle: Path | None) -> dict[str, deploykit.Detector]:
    """The timed sessions: ``int8`` first (the bundle's configuration, or ``quantize``'s default INT8 model on
    OpenVINO with float layers f32), then the others, by the name their inference row gets."""
    f32 = folder / "yolov4-tiny.onnx"
    if bundle is not None:
        from deploykit.convert.darknet.convert import DarknetExportSettings, convert_darknet

        cfg, weights, _ = official_darknet("yolov4-tiny")
        convert_darknet(cfg, weights, f32, verify_backends=[], export=DarknetExportSettings(head="raw"))
        chosen = deploykit.Detector(bundle, conf=CONF, iou=IOU)
        if chosen._decoding.name != "darknet-raw":
            raise SystemExit(f"--bundle {bundle}: its model has a {chosen._decoding.name} layout, not raw heads")
        return {"int8": chosen, "onnxruntime_f32": deploykit.Detector(f32, "onnxruntime", conf=CONF, iou=IOU)}
    f32, int8 = _models(folder)
    return {
        "int8": deploykit.Detector(int8, "openvino", conf=CONF, iou=IOU, precision="f32"),
        "onnxruntime_f32": deploykit.Detector(f32, "onnxruntime", conf=CONF, iou=IOU),
        "int8_default_float_layers": deploykit.Detector(int8, "openvino", conf=CONF, iou=IOU),  # OpenVINO's own
    }


def _describe(detectors: dict[str, deploykit.Detector], bundle: Path | None) -> dict[str, str]:
    """Which INT8 ran: the bundle's configuration, or ``quantize``'s default model (said so)."""
    info = detectors["int8"].session.info
    ran = f"{info.backend} {info.device} {info.precision_label}, threads {info.options.get('threads', 'default')}"
    if bundle is not None:
        variant = read_bundle(bundle).manifest.variant
        return {"int8": f"bundle {bundle} ({variant}): the configuration deploykit optimize chose", "int8_ran": ran}
    also = detectors["int8_default_float_layers"].session.info.precision_label
    return {
        "int8": "deploykit.quantize's default INT8 model (ONNX Runtime static QDQ), not the configuration "
        "deploykit optimize chooses: pass --bundle DIR for that",
        "int8_ran": ran, "int8_default_ran": also,
    }  # fmt: skip


def measure(rounds: int, bundle: Path | None) -> dict[str, Any]:
    photos = [cv2.resize(cv2.imread(str(darknet_image(name))), (1280, 720)) for name in PHOTOS]
    clock, ring = _Clock(), TensorRing(4)
    with tempfile.TemporaryDirectory() as directory:
        detectors = _detectors(Path(directory), bundle)
        detector = detectors["int8"]
        try:
            for frame in photos:  # warm-up
                for warm in detectors.values():
                    warm(frame)
            for round_index in range(rounds):
                for index, frame in enumerate(photos):
                    tensor, placement = _pre(clock, detector, frame, round_index + index, ring)
                    runs = {
                        name: clock.time(f"infer_{name}", lambda t=tensor, d=timed: d.session.run({d.input.name: t}))
                        for name, timed in detectors.items()
                    }
                    outputs = runs["int8"]
                    _post(clock, detector, outputs, placement)
            described = _describe(detectors, bundle)
        finally:
            for each in detectors.values():
                each.close()
    return _line(clock, rounds, described, list(detectors))


def _line(clock: _Clock, rounds: int, described: dict[str, str], timed: list[str]) -> dict[str, Any]:
    line = {
        "benchmark": "pipeline_stages", "model": "yolov4-tiny 416 (official weights, raw heads)",
        "frames": f"{len(PHOTOS)} Darknet photos resized to 1280x720", "rounds": rounds, "conf": CONF, "iou": IOU,
        **described, "cpus": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2),
        "results_identical": True, "target": 0.15,
    }  # fmt: skip
    clock.kind = "wall"
    infer = {name: clock.median(f"infer_{name}") for name in timed}
    line["infer_wall_ms"] = {k: round(v, 3) for k, v in infer.items()}
    for kind in ("wall", "thread_cpu"):
        clock.kind = kind
        line[kind] = _stages(clock, infer["int8"])
        if "int8_default_float_layers" in infer:
            pre_post = line[kind]["pre_ms"]["stream"] + line[kind]["post_ms"]["now"]
            line[kind]["pre_post_over_int8_default_infer"] = round(pre_post / infer["int8_default_float_layers"], 3)
    return line


def _stages(clock: _Clock, infer: float) -> dict[str, Any]:
    """Stage medians of one kind (wall or thread CPU), the totals, and their share of INT8 inference (wall)."""
    m = clock.median
    heads = sorted({stage.rsplit("head", 1)[1] for stage in clock.ms["wall"] if "_head" in stage})
    before = {
        "resize": m("resize"), "pad_copy": m("pad_copy"), "colour_layout_normalise": m("before_blob"),
        "read_outputs": m("read_outputs"), **{f"decode_head{h}": m(f"before_decode_head{h}") for h in heads},
        "filter": m("before_select") - m("before_nms"), "nms": m("before_nms"),
        "results": m("before_results"),
    }  # fmt: skip
    now = {
        "resize": m("resize"), "colour_layout_normalise_pad": m("now_prepare") - m("resize"),
        "stream_colour_layout_normalise": m("ring_prepare") - m("resize"),
        "read_outputs": m("read_outputs"), **{f"prefilter_head{h}": m(f"now_prefilter_head{h}") for h in heads},
        **{f"decode_head{h}": m(f"now_decode_head{h}") for h in heads},
        "filter": m("now_select") - m("now_nms"), "nms": m("now_nms"), "results": m("now_results"),
    }  # fmt: skip
    pre_before = m("resize") + m("pad_copy") + m("before_blob")
    pre_now = m("now_prepare")
    post_before = (
        m("read_outputs") + sum(m(f"before_decode_head{h}") for h in heads) + m("before_select") + m("before_results")
    )
    post_now = m("read_outputs") + sum(m(f"now_prefilter_head{h}") + m(f"now_decode_head{h}") for h in heads)
    post_now += m("now_select") + m("now_results")
    return {
        "before_ms": {k: round(v, 3) for k, v in before.items()}, "now_ms": {k: round(v, 3) for k, v in now.items()},
        "pre_ms": {"before": round(pre_before, 3), "now": round(pre_now, 3), "stream": round(m("ring_prepare"), 3)},
        "post_ms": {"before": round(post_before, 3), "now": round(post_now, 3)},
        "pre_post_over_int8_infer": {"before": round((pre_before + post_before) / infer, 3),
                                     "now": round((pre_now + post_now) / infer, 3),
                                     "stream": round((m("ring_prepare") + post_now) / infer, 3)},
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--bundle", type=Path, help="a deploykit optimize bundle of YOLOv4-tiny (raw heads)")
    arguments = parser.parse_args()
    print(json.dumps(measure(arguments.rounds, arguments.bundle)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
