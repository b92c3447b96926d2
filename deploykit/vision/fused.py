"""Pre-processing inside the runtime: an ONNX graph (Cast, Transpose, Resize, Round, Pad, Gather, Mul, Sub,
Div) prepended to the model, so a frame goes in as it was decoded (uint8 HWC BGR) and the runtime does
letterbox or stretch, channel order and normalisation in its own threads.

One fused model per frame size (a video has one): the resize and padding amounts are constants of it.
The graph runs on every backend that reads ONNX. ``check_fused`` holds its tensor against the Python
path (``Preprocess.place`` + ``tensor``) on a real image and says the largest difference in pixel levels;
``Resize`` in float differs from OpenCV's fixed-point ``INTER_LINEAR`` by about one level.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import BackendError, UsageError
from deploykit.vision.image import Placement, Preprocess, as_image, letterbox_geometry

FRAME_INPUT = "frame"
MAX_PIXEL_ERROR = 2.0
"""Largest difference (in 0-255 pixel levels) allowed between the fused and the Python pre-processing."""


def _geometry(preprocess: Preprocess, height: int, width: int) -> tuple[int, int, int, int, Placement]:
    """(new_h, new_w, top, left) of the resized image inside the input, and its placement."""
    if preprocess.resize == "letterbox":
        new_w, new_h, left, top, placement = letterbox_geometry(height, width, preprocess.size)
        return new_h, new_w, top, left, placement
    if preprocess.resize == "stretch":
        target_h, target_w = preprocess.size
        return target_h, target_w, 0, 0, Placement(target_w / width, target_h / height, 0.0, 0.0, (height, width))
    raise UsageError(
        f"resize '{preprocess.resize}' | cannot be fused into the runtime; letterbox and stretch can.",
        hint="stream without fused=True.",
    )


def preprocess_nodes(preprocess: Preprocess, height: int, width: int, output: str, opset: int) -> tuple[list, list]:
    """The nodes and initializers that turn ``frame`` (1, height, width, 3) uint8 BGR into ``output``."""
    from onnx import TensorProto, helper, numpy_helper

    new_h, new_w, top, left, _ = _geometry(preprocess, height, width)
    target_h, target_w = preprocess.size
    constants: dict[str, np.ndarray] = {
        "dk_sizes": np.array([1, 3, new_h, new_w], np.int64),
        "dk_pads": np.array([0, 0, top, left, 0, 0, target_h - new_h - top, target_w - new_w - left], np.int64),
        "dk_pad_value": np.array(float(preprocess.pad_value), np.float32),
        "dk_channels": np.array([2, 1, 0] if preprocess.channel_order.upper() == "RGB" else [0, 1, 2], np.int64),
        "dk_scale": np.array(preprocess.scale, np.float32),
        "dk_mean": np.asarray(preprocess.mean, np.float32).reshape(1, -1, 1, 1),
        "dk_std": np.asarray(preprocess.std, np.float32).reshape(1, -1, 1, 1),
        "dk_empty": np.zeros(0, np.float32),
    }
    resize_inputs = ["dk_nchw", "", "", "dk_sizes"] if opset >= 13 else ["dk_nchw", "dk_empty", "dk_empty", "dk_sizes"]
    nodes = [
        helper.make_node("Cast", [FRAME_INPUT], ["dk_float"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["dk_float"], ["dk_nchw"], perm=[0, 3, 1, 2]),
        # half-pixel centres and no antialiasing: what cv2.resize INTER_LINEAR computes; Round as its uint8 does
        helper.make_node(
            "Resize", resize_inputs, ["dk_resized"], mode="linear", coordinate_transformation_mode="half_pixel"
        ),
        helper.make_node("Round", ["dk_resized"], ["dk_rounded"]),
        helper.make_node("Pad", ["dk_rounded", "dk_pads", "dk_pad_value"], ["dk_padded"], mode="constant"),
        helper.make_node("Gather", ["dk_padded", "dk_channels"], ["dk_ordered"], axis=1),
        helper.make_node("Mul", ["dk_ordered", "dk_scale"], ["dk_scaled"]),
        helper.make_node("Sub", ["dk_scaled", "dk_mean"], ["dk_centred"]),
        helper.make_node("Div", ["dk_centred", "dk_std"], [output]),
    ]
    return nodes, [numpy_helper.from_array(value, name) for name, value in constants.items()]


def fuse(model_path: Path, input_name: str, preprocess: Preprocess, height: int, width: int) -> Any:
    """The model with the pre-processing graph in front of its image input ``input_name`` (an ``onnx.ModelProto``)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(model_path))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    if opset < 11:
        raise UsageError(
            f"model '{model_path.name}' | uses ONNX opset {opset}; fusing pre-processing needs 11+.",
            hint="stream without fused=True, or re-export the model with a newer opset.",
        )
    graph = model.graph
    nodes, initializers = preprocess_nodes(preprocess, height, width, input_name, opset)
    original = [i for i in graph.input if i.name == input_name]
    for entry in original:
        graph.input.remove(entry)
    frame = helper.make_tensor_value_info(FRAME_INPUT, TensorProto.UINT8, [1, height, width, 3])
    graph.input.insert(0, frame)
    graph.initializer.extend(initializers)
    existing = list(graph.node)
    del graph.node[:]
    graph.node.extend([*nodes, *existing])
    return model


class FusedStages:
    """The pre-processing and inference stages of a ``Detector`` with its pre-processing in the runtime.

    ``_prepare`` only checks the frame and picks (building on first use) the fused session of its size;
    ``_infer`` runs it. The post-processing stage is the detector's own.
    """

    def __init__(self, detector: Any) -> None:
        self.detector = detector
        info = detector.session.info
        self._open = (info.backend, info.device_requested, dict(info.options))
        self._sessions: dict[tuple[int, int], tuple[Any, Placement]] = {}
        self._folder = tempfile.TemporaryDirectory(prefix="deploykit-fused-")
        self._lock = threading.Lock()

    def session_for(self, height: int, width: int) -> tuple[Any, Placement]:
        from deploykit.sessions import load

        with self._lock:
            if (height, width) not in self._sessions:
                detector = self.detector
                model = fuse(detector.model_path, detector.input.name, detector.preprocess, height, width)
                path = Path(self._folder.name) / f"fused-{height}x{width}.onnx"
                import onnx

                onnx.save(model, str(path))
                backend, device, options = self._open
                session = load(path, backend, device, **options)
                placement = _geometry(detector.preprocess, height, width)[4]
                self._sessions[(height, width)] = (session, placement)
            return self._sessions[(height, width)]

    def _prepare(self, image: Any, ring: Any = None) -> tuple[Any, Placement]:
        """The frame itself (``ring`` is unused: the runtime writes the input tensor)."""
        frame = np.ascontiguousarray(as_image(image))
        session, placement = self.session_for(frame.shape[0], frame.shape[1])
        return (session, frame[None]), placement

    def _infer(self, prepared: tuple[Any, np.ndarray]) -> dict[str, np.ndarray]:
        session, frame = prepared
        return self.detector._checked(session.run({FRAME_INPUT: frame}))

    def close(self) -> None:
        with self._lock:
            for session, _ in self._sessions.values():
                session.close()
            self._sessions.clear()
        self._folder.cleanup()


def check_fused(detector: Any, image: np.ndarray) -> float:
    """The largest difference, in pixel levels, between the fused graph's input tensor and the Python path's.

    Raises:
        BackendError: it exceeds ``MAX_PIXEL_ERROR`` (the fused pre-processing is not the model's).
    """
    import onnx
    from onnx import TensorProto, helper

    from deploykit.sessions import load

    height, width = image.shape[:2]
    nodes, initializers = preprocess_nodes(detector.preprocess, height, width, "tensor", 17)
    graph = helper.make_graph(
        nodes,
        "preprocess",
        [helper.make_tensor_value_info(FRAME_INPUT, TensorProto.UINT8, [1, height, width, 3])],
        [helper.make_tensor_value_info("tensor", TensorProto.FLOAT, [1, 3, *detector.preprocess.size])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # runtimes of 2022 on
    with tempfile.TemporaryDirectory(prefix="deploykit-fused-") as folder:
        path = Path(folder) / "preprocess.onnx"
        onnx.save(model, str(path))
        info = detector.session.info
        with load(path, info.backend, info.device_requested) as session:
            fused = session.run({FRAME_INPUT: np.ascontiguousarray(image)[None]})["tensor"]
    python = detector.preprocess.tensor([detector.preprocess.place(image)[0]])
    std = np.asarray(detector.preprocess.std, np.float64).reshape(1, -1, 1, 1)
    error = float((np.abs(fused - python) * std).max() / detector.preprocess.scale)  # back in 0-255 levels
    if error > MAX_PIXEL_ERROR:  # the runtime computes the fused graph otherwise: not the caller's mistake
        raise BackendError(
            f"model '{detector.model_path.name}' fused pre-processing on {info.backend} | differs from the Python "
            f"path by {error:.2f} pixel levels (at most {MAX_PIXEL_ERROR:g} allowed).",
            hint="stream without fused=True.",
        )
    return error
