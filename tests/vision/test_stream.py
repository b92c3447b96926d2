"""``Detector.stream`` / ``Classifier.stream``: the same answers as single calls, frame by frame, in
overlapping stages with bounded queues, stopped cleanly when the consumer leaves."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import cv2
import numpy as np
import onnx
import pytest

import deploykit
from deploykit.errors import InputError
from deploykit.vision.preprocess import PreprocessOverrides
from deploykit.vision.sources import Frame, Source
from deploykit.vision.stream import QUEUE_SIZE, STAGES
from tests.assets.paths import darknet_image, nudenet_model
from tests.assets.tiny import classifier_model
from tests.assets.videos import pan_zoom_frames, read_video, write_video

# nudenet's YOLOv8n finds people in person.jpg when fed BGR (see tests/vision/test_vision.py)
SETTINGS = {"conf": 0.25, "iou": 0.45, "agnostic": True, "preprocess": PreprocessOverrides(channel_order="BGR")}


@pytest.fixture(scope="module")
def person_clip(tmp_path_factory):
    """90 frames of 1280×720 panning and zooming over person.jpg, mp4v as cv2.VideoWriter writes it."""
    photo = cv2.imread(str(darknet_image("person.jpg")))
    return write_video(tmp_path_factory.mktemp("clip") / "person.mp4", pan_zoom_frames(photo, 90))


def _stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("deploykit-")]


def test_streamed_detections_equal_single_calls_frame_by_frame(person_clip):
    with deploykit.Detector(nudenet_model(), **SETTINGS) as detector:
        stream = detector.stream(person_clip)
        results = list(stream)
        frames = read_video(person_clip)
        assert len(results) == len(frames) == 90
        for result, frame in zip(results, frames, strict=True):
            assert result.results == detector(frame), f"frame {result.frame.index}"
    assert sum(1 for r in results if r.results) >= 45  # the comparison is about boxes, not about nothing
    assert [r.frame.index for r in results] == list(range(90))
    assert all(b.frame.timestamp_s > a.frame.timestamp_s for a, b in itertools.pairwise(results))
    summary = stream.stats.summary()
    assert summary["frames"] == 90 and summary["dropped"] == 0 and summary["fps"] > 0
    assert set(summary["stages"]) == {*STAGES, "wait"}
    assert all(r.timing.infer_ms > 0 and r.timing.decode_ms > 0 for r in results)
    row = results[0].to_dict()
    assert row["source"] == str(person_clip) and row["frame"] == 0 and "image" not in row
    assert row["results"] == [d.to_dict() for d in results[0].results]


def test_every_and_max_frames_pick_frames_by_index(person_clip):
    with deploykit.Detector(nudenet_model(), **SETTINGS) as detector:
        picked = [r.frame.index for r in detector.stream(person_clip, every=4, max_frames=10)]
        assert picked == list(range(0, 40, 4))
        with pytest.raises(deploykit.UsageError, match="every"):
            detector.stream(person_clip, every=0)


def test_streamed_classes_equal_single_calls(tmp_path):
    model = tmp_path / "classifier.onnx"
    onnx.save(classifier_model(), model)
    photo = cv2.imread(str(darknet_image("dog.jpg")))
    frames = pan_zoom_frames(photo, 12, (320, 240))
    video = write_video(tmp_path / "dog.avi", frames)
    with deploykit.Classifier(model) as classifier:
        results = list(classifier.stream(video, top_k=3))
        decoded = read_video(video)
        assert [r.results for r in results] == [classifier(f, top_k=3) for f in decoded]
        assert len(results[0].results) == 3


class _SlowFrames(Source):
    """Frames that take ``delay_s`` each to 'decode' (a stand-in for a slow camera or codec), counted as made."""

    kind = "test frames"

    def __init__(self, image: np.ndarray, count: int, delay_s: float = 0.0) -> None:
        super().__init__("slow")
        self.image, self.count, self.delay_s = image, count, delay_s
        self.made = 0
        self.closed = False

    def frames(self) -> Iterator[Frame]:
        for index in range(self.count):
            time.sleep(self.delay_s)
            self.made += 1
            yield Frame(self.image, index, index / 30, self.spec, f"frame-{index:06d}")

    def close(self) -> None:
        self.closed = True


class _SlowDetector(deploykit.Detector):
    """A real detector whose pre- and post-processing stages each also wait ``delay_s``: stages made
    measurably slow, so that overlap shows whatever else loads the machine."""

    delay_s = 0.1

    def _prepare(self, image, ring=None):
        time.sleep(self.delay_s)
        return super()._prepare(image, ring)

    def _postprocess(self, *args, **kwargs):
        time.sleep(self.delay_s)
        return super()._postprocess(*args, **kwargs)


def test_stages_overlap_so_wall_time_is_well_under_the_sum_of_stage_times():
    """Decode, pre and post each take at least 0.1 s per frame. Run one after another, a frame costs their sum;
    overlapped, the slowest stage. Overlap hides at least two of the three sleeps per frame once the pipeline
    is full, so wall < sum - (frames - 4) × 0.2 s holds however slow inference is on a loaded machine."""
    image = cv2.imread(str(darknet_image("person.jpg")))
    frames, delay = 12, _SlowDetector.delay_s
    with _SlowDetector(nudenet_model(), **SETTINGS) as detector:
        stream = detector.stream(_SlowFrames(image, frames, delay))
        results = list(stream)
    assert len(results) == frames
    stage_sum_s = stream.stats.stage_sum_ms() / 1e3
    assert stage_sum_s >= frames * 3 * delay
    assert stream.stats.wall_s < stage_sum_s - (frames - 4) * 2 * delay, stream.stats.summary()


def test_a_slow_consumer_holds_back_the_decoder_with_bounded_queues():
    image = np.zeros((64, 64, 3), np.uint8)
    source = _SlowFrames(image, 500)
    with deploykit.Detector(nudenet_model(), **SETTINGS) as detector:
        stream = detector.stream(source)
        iterator = iter(stream)
        next(iterator)
        time.sleep(1.0)  # a consumer busy elsewhere: the decoder must wait, not run ahead 500 frames
        ahead = source.made
        stream.close()
    # one item in each stage's hands, QUEUE_SIZE in each of the four queues, one handed out
    assert ahead <= 4 + 4 * QUEUE_SIZE + 2, ahead
    assert source.closed


def test_leaving_the_loop_stops_every_stage_thread(person_clip):
    with deploykit.Detector(nudenet_model(), **SETTINGS) as detector:
        for result in detector.stream(person_clip):
            if result.frame.index == 3:
                break
    deadline = time.monotonic() + 30
    while _stream_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _stream_threads()


def test_a_damaged_video_streams_the_frames_before_the_damage_then_raises(tmp_path, person_clip):
    photo = cv2.imread(str(darknet_image("person.jpg")))
    whole = write_video(tmp_path / "whole.mkv", pan_zoom_frames(photo, 40, (640, 360)))
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    received = []
    with deploykit.Detector(nudenet_model(), **SETTINGS) as detector:
        with pytest.raises(InputError, match=r"decoding stopped at frame (\d+) of the 40") as caught:
            for result in detector.stream(cut):
                received.append(result)
    assert received and f"frame {len(received)} of the 40" in str(caught.value)


class _SlowInference(deploykit.Detector):
    """A Detector whose inference stage waits before running, so pre-processing runs ahead and fills every
    queue; it records whether the tensor it was handed changed while it waited."""

    changed: list[int]

    def _infer(self, tensor: np.ndarray) -> dict[str, np.ndarray]:
        before = tensor.copy()
        time.sleep(0.03)
        self.changed.append(int(not np.array_equal(before, tensor)))
        return super()._infer(tensor)


def _slow_stream(clip, slots: int, monkeypatch) -> tuple[list, list[int], list]:
    monkeypatch.setattr("deploykit.vision.stream.TENSOR_SLOTS", slots)
    with _SlowInference(nudenet_model(), **SETTINGS) as detector:
        detector.changed = []
        results = list(detector.stream(clip, max_frames=16))
        changed = list(detector.changed)
        singles = [detector(frame) for frame in read_video(clip)[:16]]
    return results, changed, singles


def test_reused_input_tensors_are_never_written_while_inference_reads_them(person_clip, monkeypatch):
    results, changed, singles = _slow_stream(person_clip, QUEUE_SIZE + 2, monkeypatch)
    assert changed == [0] * 16
    assert [r.results for r in results] == singles
    assert sum(1 for r in results if r.results) >= 8


def test_a_ring_smaller_than_the_queues_allow_would_overwrite_a_tensor_in_use(person_clip, monkeypatch):
    """The test above can fail: with one slot fewer, pre-processing overwrites tensors before or while the
    runtime reads them, and frames get another frame's answer."""
    results, changed, singles = _slow_stream(person_clip, QUEUE_SIZE + 1, monkeypatch)
    wrong = [int(r.results != single) for r, single in zip(results, singles, strict=True)]
    assert sum(max(pair) for pair in zip(changed, wrong, strict=True)) >= 8
