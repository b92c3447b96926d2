"""Pre-processing inside the runtime: the prepended ONNX graph against the Python path on real photos (max
pixel error), and a fused stream's detections against the Python path's, on every backend that reads it."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

import deploykit
from deploykit.errors import UsageError
from deploykit.tasks.detect import detection_agreement
from deploykit.vision.fused import MAX_PIXEL_ERROR, check_fused, preprocess_nodes
from deploykit.vision.image import Preprocess
from deploykit.vision.preprocess import PreprocessOverrides
from tests.assets.paths import darknet_image, nudenet_model
from tests.assets.videos import pan_zoom_frames, write_video

BACKENDS = ("onnxruntime", "openvino")
SETTINGS = {"conf": 0.25, "iou": 0.45, "agnostic": True}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("resize", ["letterbox", "stretch"])
@pytest.mark.parametrize("channel_order", ["RGB", "BGR"])
def test_the_fused_graph_gives_the_python_tensor_within_one_pixel_level(backend, resize, channel_order):
    """OpenCV resizes uint8 in fixed point, the graph in float then rounds: one level apart at most, on photos of
    three sizes; the bound the library enforces (MAX_PIXEL_ERROR) is looser than what is measured here."""
    overrides = PreprocessOverrides(
        resize=resize, channel_order=channel_order, mean=(0.1, 0.2, 0.3), std=(0.5, 0.6, 0.7)
    )
    with deploykit.Detector(nudenet_model(), backend, **SETTINGS, preprocess=overrides) as detector:
        for name in ("dog.jpg", "person.jpg", "horses.jpg"):
            photo = cv2.imread(str(darknet_image(name)))
            for image in (photo, cv2.resize(photo, (1280, 720))):
                error = check_fused(detector, image)
                assert error <= 1.0 + 1e-3 < MAX_PIXEL_ERROR, f"{name} {image.shape} on {backend}: {error}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fused_stream_finds_what_the_python_path_finds(backend, tmp_path):
    photo = cv2.imread(str(darknet_image("person.jpg")))
    video = write_video(tmp_path / "person.mp4", pan_zoom_frames(photo, 24))
    bgr = PreprocessOverrides(channel_order="BGR")  # how nudenet's model was trained: it finds people then
    with deploykit.Detector(nudenet_model(), backend, **SETTINGS, preprocess=bgr) as detector:
        plain = [r.results for r in detector.stream(video)]
        stream = detector.stream(video, fused=True)
        fused = [r.results for r in stream]
    assert sum(map(len, plain)) >= 24  # boxes to agree on
    agreement = detection_agreement(plain, fused)
    assert agreement.map50 >= 0.9 and agreement.recall >= 0.9, agreement
    assert stream.stats.frames == 24


def test_what_cannot_be_fused_is_refused_with_a_reason():
    crop = Preprocess(size=(224, 224), resize="center-crop")
    with pytest.raises(UsageError, match=r"resize 'center-crop' \| cannot be fused into the runtime.*Hint: stream"):
        preprocess_nodes(crop, 480, 640, "images", 17)


def test_the_graph_pads_with_the_models_pad_value():
    nodes, initializers = preprocess_nodes(Preprocess(size=(416, 416), pad_value=114), 720, 1280, "images", 17)
    values = {i.name: i for i in initializers}
    from onnx import numpy_helper

    assert float(numpy_helper.to_array(values["dk_pad_value"])) == 114.0
    pads = numpy_helper.to_array(values["dk_pads"])
    assert list(pads) == [0, 0, 91, 0, 0, 0, 91, 0] and np.all(pads >= 0)  # 1280×720 → 416×234, centred
    assert [n.op_type for n in nodes][:3] == ["Cast", "Transpose", "Resize"]
