"""Task pipelines on top of any backend: ``Detector`` (YOLO families) and ``Classifier``.

A pipeline reads what it needs (input size, channel order, normalisation, labels, head layout)
from the model's metadata, so a model converted by deploykit needs no arguments. Pipelines hold no
per-call state, so one pipeline can be called from many threads.
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.backends.base import Session
from deploykit.backends.options import OptionValue
from deploykit.errors import BackendError, MetadataError, UsageError
from deploykit.labels import read_labels
from deploykit.metadata import read_metadata
from deploykit.model import Model
from deploykit.tensors import TensorSpec
from deploykit.validation import check_number
from deploykit.vision.decode import candidates, require_layout, select
from deploykit.vision.image import Placement, Preprocess, TensorRing, as_image
from deploykit.vision.preprocess import FIELDS, PreprocessOverrides
from deploykit.vision.results import Classification, Detection, Timing


def _read_labels(
    labels: str | os.PathLike[str] | Sequence[str] | None, metadata: Mapping[str, str], model: str = "the model"
) -> list[str] | None:
    if labels is None:
        stored = read_metadata(metadata, model).labels
        return list(stored) if stored is not None else None
    if isinstance(labels, (str, os.PathLike)):
        return read_labels(labels)
    return list(labels)


def _check_label_count(labels: list[str] | None, classes: int, source: Any) -> list[str]:
    if labels is None:
        return [f"class_{i}" for i in range(classes)]
    if len(labels) != classes:
        raise UsageError(
            f"labels {source!s:.80} | has {len(labels)} names, the model has {classes} classes.",
            hint="pass the names file the model was trained with.",
        )
    return labels


def _input_spec(session: Any) -> TensorSpec:
    if len(session.inputs) != 1:
        raise UsageError(
            f"model '{session.model_path.name}' | has {len(session.inputs)} inputs; image pipelines take one "
            "image input (N, C, H, W).",
            hint="use deploykit.load() and session.run() for multi-input models.",
        )
    spec: TensorSpec = next(iter(session.inputs.values()))
    if spec.shape is None or len(spec.shape) != 4:
        raise UsageError(
            f"model '{session.model_path.name}' | input '{spec.name}' has shape {spec.shape_text()}, "
            "expected (batch, channels, height, width).",
            hint="image pipelines take NCHW image models.",
        )
    return spec


def _check_against_graph(spec: TensorSpec, stored: Any, model: str) -> None:
    """``deploykit.input`` must describe the graph's own image input: a name, channel count or fixed size that
    the graph contradicts says the metadata belongs to another model, and would be silently ignored."""
    assert spec.shape is not None
    fixed = tuple(spec.shape[2:]) if all(isinstance(d, int) for d in spec.shape[2:]) else None
    contradictions = [
        (key, said, actual)
        for key, said, actual in (
            ("name", stored.name, spec.name),
            ("channels", stored.channels, spec.shape[1] if isinstance(spec.shape[1], int) else None),
            ("size", list(stored.size) if stored.size else None, list(fixed) if fixed else None),
        )
        if said is not None and actual is not None and said != actual
    ]
    if contradictions:
        key, said, actual = contradictions[0]
        raise MetadataError(
            f"model '{model}' metadata 'deploykit.input' | says {key} {said!r}, but the graph's image input "
            f"'{spec.name}' has {key} {actual!r} ({spec.shape_text()}); the metadata describes another model.",
            hint="re-export the model with its own metadata, or remove deploykit.input's wrong field.",
        )


def _input_size(
    spec: TensorSpec, metadata: Mapping[str, str], given: tuple[int, int] | None, model: str
) -> tuple[int, int]:
    assert spec.shape is not None
    height, width = spec.shape[2], spec.shape[3]
    if isinstance(height, int) and isinstance(width, int):
        return height, width
    if given:
        return given
    stored = read_metadata(metadata, model)
    if stored.size is not None:
        return stored.size
    if "imgsz" in metadata:  # there is a size, but not one that can be used: say which, not that it is absent
        from deploykit.io import one_line
        from deploykit.metadata import MAX_SIDE

        raise MetadataError(
            f"model '{model}' metadata 'imgsz' | is {one_line(metadata['imgsz'], 60)!r}; expected the input size "
            f"as Ultralytics writes it, [height, width] (or one side), integers from 1 to {MAX_SIDE}.",
            hint="pass preprocess=PreprocessOverrides(input_size=(height, width)) (--input-size HxW), or "
            "re-export the model.",
        )
    raise UsageError(
        f"model '{model}' | has a dynamic input size and no size in its metadata.",
        hint="pass preprocess=PreprocessOverrides(input_size=(height, width)) (--input-size HxW).",
    )


def _overrides(
    preprocess: PreprocessOverrides | Mapping[str, object] | None, options: dict[str, OptionValue], pipeline: str
) -> PreprocessOverrides:
    """``preprocess`` as a value; the pre-processing keywords of 0.1 (``input_size=``, ``mean=`` ...), which
    arrive among the backend options, still work for this release, with a DeprecationWarning."""
    old = {name: options.pop(name) for name in FIELDS if name in options}
    overrides = PreprocessOverrides.of(preprocess)
    if not old:
        return overrides
    if overrides.given():
        raise UsageError(
            f"{pipeline} | got both preprocess= and {', '.join(f'{name}=' for name in old)}.",
            hint="put every pre-processing override in preprocess=PreprocessOverrides(...).",
        )
    warnings.warn(
        f"{pipeline}({', '.join(f'{name}=' for name in old)}) is deprecated and goes in the next release; pass "
        f"preprocess=deploykit.PreprocessOverrides({', '.join(f'{name}=...' for name in old)}).",
        DeprecationWarning,
        stacklevel=3,
    )
    return PreprocessOverrides.from_dict({name: value for name, value in old.items() if value is not None})


def check_thresholds(*, conf: float | None, iou: float | None, prefix: str = "") -> None:
    """Detection thresholds are scores and overlaps: numbers from 0 to 1 (``None``: unchanged)."""
    check_number(f"{prefix}conf", conf, low=0.0, high=1.0, hint="a minimum score from 0 to 1, e.g. 0.25.")
    check_number(f"{prefix}iou", iou, low=0.0, high=1.0, hint="an NMS IoU threshold from 0 to 1, e.g. 0.45.")


class _Pipeline:
    def __init__(
        self,
        model: Model | str | os.PathLike[str] | Session,
        backend: str | None,
        device: str | None,
        options: dict[str, OptionValue],
    ) -> None:
        from deploykit.sessions import load

        if isinstance(model, Session):  # an open session (the server's queued one): backend and options are its own
            self.model_path = model.model_path
            self.session = model
        else:
            options = dict(options)
            fallback = bool(options.pop("allow_fallback", False))
            self.session = load(
                model if isinstance(model, Model) else Path(model), backend, device, allow_fallback=fallback, **options
            )
            self.model_path = Path(self.session.model_path)  # a bundle's model file, not its folder
        self.metadata = self.session.metadata
        self.input = _input_spec(self.session)
        _check_against_graph(self.input, read_metadata(self.metadata, self.model_path.name).input, self.model_path.name)
        self._local = threading.local()

    @property
    def last_timing(self) -> Timing | None:
        """The pre/infer/post split of this thread's last call."""
        timing: Timing | None = getattr(self._local, "timing", None)
        return timing

    def _run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The session's outputs, refused when one holds NaN or infinity: no ranking or box can be read from
        them, and ranking NaNs (or dropping every box as below the threshold) would be a wrong answer."""
        return self._checked(self.session.run(feeds))

    def _checked(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name, value in outputs.items():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and not np.isfinite(value).all():
                bad = int(value.size - np.isfinite(value).sum())
                raise BackendError(
                    f"model '{self.model_path.name}' output '{name}' | holds NaN or infinity ({bad} of {value.size} "
                    "elements) for this input; no class or box can be read from it.",
                    hint="check the model's preprocessing metadata (deploykit.input: scale, mean, std) and "
                    "run 'deploykit compare' on the model to see whether the runtime or the model is at fault.",
                )
        return outputs

    def _infer(self, tensor: np.ndarray) -> dict[str, np.ndarray]:
        """The inference stage: one pre-processed tensor through the session."""
        return self._run({self.input.name: tensor})

    def _stream(
        self,
        source: Any,
        finish: Any,
        max_frames: int | None,
        every: int,
        timeout_s: float,
        skip: Any,
        stages: Any = None,
    ) -> Any:
        from deploykit.vision.stream import Stream, as_sources

        return Stream(
            stages or self, as_sources(source, timeout_s), finish, max_frames=max_frames, every=every, skip=skip
        )

    def _dynamic_batch(self) -> bool:
        assert self.input.shape is not None
        return not isinstance(self.input.shape[0], int)

    def close(self) -> None:
        fused = getattr(self, "_fused", None)
        if fused is not None:
            fused.close()
        self.session.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Detector(_Pipeline):
    """YOLO-family detection: image → boxes in original pixels, after confidence filter and NMS.

    Args:
        model: the ``.onnx`` file (or its ``Model``), a bundle folder (``deploykit optimize -o``: its chosen
            configuration), or an open ``Session`` (then backend, device and options are its own).
        backend, device: where it runs (``deploykit.load``; default ONNX Runtime on the CPU).
        labels: names file or list; default from the model's metadata.
        conf: minimum class score (objectness × class probability where the model has objectness).
        iou: NMS IoU threshold.
        agnostic: suppress across classes instead of within each class.
        max_detections: at most this many boxes per image.
        preprocess: overrides of the model's pre-processing (``PreprocessOverrides``, or its ``to_dict``
            form): ``input_size`` for a dynamic input with no size in the metadata, ``resize``
            (``letterbox`` or ``stretch``), ``channel_order``, ``scale``, ``mean``, ``std``; by default all
            from the metadata (letterbox, RGB, 1/255).
        **options: backend options.
    """

    def __init__(
        self,
        model: Model | str | os.PathLike[str] | Session,
        backend: str | None = None,
        device: str | None = None,
        *,
        labels: str | os.PathLike[str] | Sequence[str] | None = None,
        conf: float = 0.25,
        iou: float = 0.45,
        agnostic: bool = False,
        max_detections: int = 300,
        preprocess: PreprocessOverrides | Mapping[str, object] | None = None,
        **options: OptionValue,
    ) -> None:
        check_thresholds(conf=conf, iou=iou)
        check_number("max_detections", max_detections, low=1, integer=True)
        overrides = _overrides(preprocess, options, "Detector")
        super().__init__(model, backend, device, options)
        self.conf, self.iou, self.agnostic, self.max_detections = conf, iou, agnostic, max_detections
        self._fused: Any = None
        self._fused_lock = threading.Lock()
        self.size = _input_size(self.input, self.metadata, overrides.input_size, self.model_path.name)
        self.layout, classes = self._layout()
        stored_labels = _read_labels(labels, self.metadata, self.model_path.name)
        self.labels = _check_label_count(stored_labels, classes, labels or "in the metadata")
        self.preprocess = Preprocess.from_metadata(
            self.metadata, self.size, "letterbox", self.model_path.name, overrides
        )
        if self.preprocess.resize not in ("letterbox", "stretch"):
            raise UsageError(
                f"resize '{self.preprocess.resize}' | is not letterbox or stretch.",
                hint="letterbox keeps the aspect ratio; stretch does not.",
            )

    def _layout(self) -> tuple[str, int]:
        found = require_layout(self.session.outputs, self.metadata, self.model_path.name)
        self._decoding = found
        self.heads = found.heads
        return found.name, found.classes

    def _candidates(self, outputs: dict[str, np.ndarray], conf: float) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per image: boxes (cx, cy, w, h in input pixels) and class scores, of the rows that can pass ``conf``."""
        return candidates(self._decoding, outputs, self.size, conf)

    def _postprocess(
        self, boxes: np.ndarray, scores: np.ndarray, placement: Placement | None, conf: float, iou: float
    ) -> list[Detection]:
        assert placement is not None, "a Detector letterboxes or stretches, so boxes can be mapped back"
        xyxy, best, class_ids = select(
            boxes, scores, conf=conf, iou=iou, agnostic=self.agnostic, max_detections=self.max_detections
        )
        original = placement.to_original(xyxy)
        return [
            Detection(self.labels[int(c)], int(c), float(s), tuple(float(v) for v in box))  # type: ignore[arg-type]
            for box, s, c in zip(original, best, class_ids, strict=True)
        ]

    def _prepare(self, image: Any, ring: TensorRing | None = None) -> tuple[np.ndarray, Placement | None]:
        """The pre-processing stage: one image → its input tensor (the ring's next one, if given) and where the
        image sits in it."""
        return self.preprocess.prepare(as_image(image), ring)

    def __call__(self, image: Any, *, conf: float | None = None, iou: float | None = None) -> list[Detection]:
        """Detect objects in one BGR image (array or path); boxes in the image's own pixels."""
        return self.batch([image], conf=conf, iou=iou)[0]

    def stream(
        self,
        source: Any,
        *,
        conf: float | None = None,
        iou: float | None = None,
        max_frames: int | None = None,
        every: int = 1,
        timeout_s: float = 10.0,
        fused: bool = False,
        skip: Mapping[str, Collection[str]] | None = None,
    ) -> Any:
        """Detections frame by frame on a video, camera, stream URL, images, glob or folder, in overlapping stages.

        Args:
            source: what ``deploykit predict`` takes (a path, glob, folder, camera index such as 0 or
                ``/dev/video0``, ``rtsp://`` or ``http(s)://`` URL), a list of them, or ``Source`` objects.
            conf, iou: thresholds for this stream (default: the detector's).
            max_frames: stop after this many frames.
            every: take every N-th frame of each source.
            timeout_s: how long a URL or camera may take to open or to send its next frame.
            fused: run the pre-processing inside the runtime (an ONNX graph prepended to the model, one per
                frame size, on this detector's backend and device); ``deploykit.vision.fused.check_fused``
                measures it against the Python path.
            skip: per source (as given), names of frames not to run again (``frame-000123``, ``dog.jpg``):
                what a resumed output already holds; they count toward ``max_frames``.

        Returns:
            A ``Stream``: iterate it for ``FrameResult`` values (the same detections ``__call__`` gives for each
            frame); ``stream.stats`` holds per-stage timings and FPS. Leaving the loop stops it.
        """
        check_thresholds(conf=conf, iou=iou)
        chosen_conf = self.conf if conf is None else conf
        chosen_iou = self.iou if iou is None else iou

        def finish(outputs: dict[str, np.ndarray], placement: Placement | None) -> list[Detection]:
            ((boxes, scores),) = self._candidates(outputs, chosen_conf)
            return self._postprocess(boxes, scores, placement, chosen_conf, chosen_iou)

        if not fused:
            return self._stream(source, finish, max_frames, every, timeout_s, skip)
        from deploykit.vision.fused import FusedStages

        with self._fused_lock:  # the fused sessions (one per frame size) serve every stream of this detector
            if self._fused is None:
                self._fused = FusedStages(self)
        return self._stream(source, finish, max_frames, every, timeout_s, skip, self._fused)

    def batch(
        self, images: Sequence[Any], *, conf: float | None = None, iou: float | None = None
    ) -> list[list[Detection]]:
        """Several images; one forward pass when the model's batch axis is dynamic."""
        check_thresholds(conf=conf, iou=iou)
        start = time.perf_counter()
        prepared = [self._prepare(image) for image in images]
        tensors = [tensor for tensor, _ in prepared]
        pre = time.perf_counter()
        if self._dynamic_batch() and len(tensors) > 1:
            outputs_list = [self._infer(np.concatenate(tensors))]
        else:
            outputs_list = [self._infer(tensor) for tensor in tensors]
        infer = time.perf_counter()
        chosen_conf, chosen_iou = self.conf if conf is None else conf, self.iou if iou is None else iou
        candidates = [c for outputs in outputs_list for c in self._candidates(outputs, chosen_conf)]
        results = [
            self._postprocess(boxes, scores, placement, chosen_conf, chosen_iou)
            for (boxes, scores), (_, placement) in zip(candidates, prepared, strict=True)
        ]
        self._local.timing = Timing((pre - start) * 1e3, (infer - pre) * 1e3, (time.perf_counter() - infer) * 1e3)
        return results


class Classifier(_Pipeline):
    """Image classification: image → top-k labels with probabilities.

    Args:
        model: the ``.onnx`` file (or its ``Model``), or an open ``Session`` (then backend, device and options
            are its own).
        backend, device: where it runs.
        labels: names file or list; default from the metadata, else ``class_N``.
        softmax: ``auto`` (apply it unless outputs already are probabilities), ``always`` or ``never``.
        preprocess: overrides of the model's pre-processing (``PreprocessOverrides``, or its ``to_dict``
            form): ``mean``, ``std``, ``scale``, ``channel_order`` (default from the model's metadata,
            which recipes store, else none beyond scale 1/255, RGB; ImageNet models: mean
            (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225)); ``resize``: ``center-crop`` (shorter
            side to size/0.875, then the centre), ``stretch`` or ``letterbox`` (default from the
            metadata, else center-crop); ``input_size`` (height, width) for a dynamic input size.
        **options: backend options.
    """

    def __init__(
        self,
        model: Model | str | os.PathLike[str] | Session,
        backend: str | None = None,
        device: str | None = None,
        *,
        labels: str | os.PathLike[str] | Sequence[str] | None = None,
        softmax: str = "auto",
        preprocess: PreprocessOverrides | Mapping[str, object] | None = None,
        **options: OptionValue,
    ) -> None:
        overrides = _overrides(preprocess, options, "Classifier")
        super().__init__(model, backend, device, options)
        self.size = _input_size(self.input, self.metadata, overrides.input_size, self.model_path.name)
        output = next(iter(self.session.outputs.values()))
        dims = [d for d in (output.shape or ())[1:] if isinstance(d, int)]
        if not dims or len(dims) != len(output.shape or ()) - 1 or math.prod(dims) < 2:
            raise UsageError(
                f"model '{self.model_path.name}' | output {output} is not a classification layout.",
                hint="a classifier outputs (batch, classes) scores (or (batch, classes, 1, 1)).",
            )
        classes = math.prod(dims)
        stored_labels = _read_labels(labels, self.metadata, self.model_path.name)
        self.labels = _check_label_count(stored_labels, classes, labels or "in the metadata")
        self.preprocess = Preprocess.from_metadata(
            self.metadata, self.size, "center-crop", self.model_path.name, overrides
        )
        if softmax not in ("auto", "always", "never"):
            raise UsageError(
                f"softmax '{softmax}' | is not auto, always or never.",
                hint="auto applies it unless the outputs already are probabilities.",
            )
        self.softmax = softmax

    def _probabilities(self, scores: np.ndarray) -> np.ndarray:
        scores = scores.reshape(scores.shape[0], -1).astype(np.float64)
        already = np.all(scores >= 0) and np.all(scores <= 1) and np.allclose(scores.sum(axis=1), 1, atol=1e-3)
        if self.softmax == "never" or (self.softmax == "auto" and already):
            return scores
        shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)

    def _prepare(self, image: Any, ring: TensorRing | None = None) -> tuple[np.ndarray, None]:
        """The pre-processing stage: one image → its input tensor (the ring's next one, if given)."""
        return self.preprocess.prepare(as_image(image), ring)[0], None

    def _top(self, scores: np.ndarray, top_k: int) -> list[list[Classification]]:
        results = []
        for row in self._probabilities(scores):
            top = np.argsort(-row, kind="stable")[:top_k]
            results.append([Classification(self.labels[i], int(i), float(row[i])) for i in top])
        return results

    def __call__(self, image: Any, *, top_k: int = 5) -> list[Classification]:
        """The ``top_k`` classes of one BGR image (array or path), best first."""
        return self.batch([image], top_k=top_k)[0]

    def stream(
        self,
        source: Any,
        *,
        top_k: int = 5,
        max_frames: int | None = None,
        every: int = 1,
        timeout_s: float = 10.0,
        skip: Mapping[str, Collection[str]] | None = None,
    ) -> Any:
        """The ``top_k`` classes frame by frame, in overlapping stages; see ``Detector.stream`` for the arguments
        and what it returns."""
        check_number("top_k", top_k, low=1, integer=True, hint="ask for 1 or more classes, e.g. top_k=5.")

        def finish(outputs: dict[str, np.ndarray], state: None) -> list[Classification]:
            return self._top(next(iter(outputs.values())), top_k)[0]

        return self._stream(source, finish, max_frames, every, timeout_s, skip)

    def batch(self, images: Sequence[Any], *, top_k: int = 5) -> list[list[Classification]]:
        check_number("top_k", top_k, low=1, integer=True, hint="ask for 1 or more classes, e.g. top_k=5.")
        start = time.perf_counter()
        tensor = np.concatenate([self._prepare(image)[0] for image in images])
        pre = time.perf_counter()
        if self._dynamic_batch():
            scores = next(iter(self._infer(tensor).values()))
        else:
            scores = np.concatenate([next(iter(self._infer(t[None]).values())) for t in tensor])
        infer = time.perf_counter()
        results = self._top(scores, top_k)
        self._local.timing = Timing((pre - start) * 1e3, (infer - pre) * 1e3, (time.perf_counter() - infer) * 1e3)
        return results
