"""The ``segment`` task: semantic segmentation, a class for every pixel.

A segmenter answers (batch, classes, height, width) scores; its answer is the argmax mask. Two runs
agree by the mean intersection-over-union (mIoU) of their masks, over the classes the reference's
masks hold, all input sets together. The app pipeline (``Segmenter``) maps the mask back onto the
original image (letterbox or stretch) and answers a class histogram, largest class first (as JSON:
``label``, ``class_id``, ``pixels``, ``fraction``), holding the mask itself beside it for ``--draw``,
which blends each class's colour over the image.

A model is a segmenter when its metadata says so (``deploykit.task = "segment"``): its output looks
like any feature map, so the task is never guessed from shapes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from deploykit.backends.options import OptionValue
from deploykit.errors import UsageError
from deploykit.io import one_line
from deploykit.tasks.base import Outputs, ResultTable, Task
from deploykit.tensors import TensorSpec, normalize_precision
from deploykit.vision.image import Placement, Preprocess, TensorRing, as_image
from deploykit.vision.pipelines import _check_label_count, _input_size, _overrides, _Pipeline, _read_labels
from deploykit.vision.preprocess import PreprocessOverrides
from deploykit.vision.results import Timing, _colour

# The minimum mIoU by the candidate's precision. f32 runtimes differ in summation order only, which
# flips the argmax of a pixel only at a near tie; f16 and INT8 move class boundaries by a pixel or two.
MIN_MIOU = {"f64": 0.99, "f32": 0.98, "f16": 0.9, "bf16": 0.85, "int8": 0.75}
PIPELINE_MIOU = 0.9  # two backends' pipeline masks for one image are the same answer


@dataclass(frozen=True)
class SegmentClass:
    """One class of a mask: how many of the image's pixels it holds, and which fraction of them."""

    label: str
    class_id: int
    pixels: int
    fraction: float

    @property
    def score(self) -> float:
        return self.fraction

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Segmentation(list[SegmentClass]):
    """One image's class histogram, largest class first, and ``mask``: the class id of every pixel."""

    def __init__(self, classes: Sequence[SegmentClass], mask: np.ndarray) -> None:
        super().__init__(classes)
        self.mask = mask


def mean_iou(reference: np.ndarray, candidate: np.ndarray) -> tuple[float, dict[str, Any]]:
    """mIoU of two stacks of masks over the classes the reference holds, and its details."""
    if reference.shape != candidate.shape:
        return 0.0, {"problem": f"mask shapes differ: {candidate.shape} against the reference's {reference.shape}"}
    classes = np.unique(reference)
    ious = {}
    for value in classes:
        truth, found = reference == value, candidate == value
        ious[int(value)] = float(np.sum(truth & found) / np.sum(truth | found))
    return float(np.mean(list(ious.values()))), {
        "masks": int(reference.shape[0]),
        "pixels": int(reference.size),
        "pixel_agreement": float(np.mean(reference == candidate)),
        "iou_per_class": ious,
    }


class Segmenter(_Pipeline):
    """Semantic segmentation: image → class histogram and mask in the image's own pixels.

    Args:
        model: the ``.onnx`` file (or its ``Model``), a bundle folder, or an open ``Session``.
        backend, device: where it runs.
        labels: names file or list; default from the metadata, else ``class_N``.
        preprocess: overrides of the model's pre-processing (``PreprocessOverrides`` or its ``to_dict``
            form); ``resize`` is ``stretch`` (the default) or ``letterbox``: a centre crop loses the
            image's border, which a mask must cover.
        **options: backend options.
    """

    def __init__(
        self,
        model: Any,
        backend: str | None = None,
        device: str | None = None,
        *,
        labels: str | os.PathLike[str] | Sequence[str] | None = None,
        preprocess: PreprocessOverrides | Mapping[str, object] | None = None,
        **options: OptionValue,
    ) -> None:
        overrides = _overrides(preprocess, options, "Segmenter")
        super().__init__(model, backend, device, options)
        name = self.model_path.name
        self.size = _input_size(self.input, self.metadata, overrides.input_size, name)
        output = next(iter(self.session.outputs.values()))
        shape = output.shape or ()
        if len(shape) != 4 or not isinstance(shape[1], int) or shape[1] < 2:
            raise UsageError(
                f"model '{name}' | output {output} is not a segmentation layout.",
                hint="a segmenter outputs (batch, classes, height, width) scores.",
            )
        self.labels = _check_label_count(
            _read_labels(labels, self.metadata, name), shape[1], labels or "in the metadata"
        )
        self.preprocess = Preprocess.from_metadata(self.metadata, self.size, "stretch", name, overrides)
        if self.preprocess.resize not in ("stretch", "letterbox"):
            raise UsageError(
                f"resize '{self.preprocess.resize}' | is not stretch or letterbox.",
                hint="a mask covers the whole image; a centre crop would lose its border.",
            )

    def _prepare(self, image: Any, ring: TensorRing | None = None) -> tuple[np.ndarray, Placement | None]:
        return self.preprocess.prepare(as_image(image), ring)

    def _finish(self, outputs: dict[str, np.ndarray], placement: Placement | None) -> Segmentation:
        assert placement is not None, "a Segmenter stretches or letterboxes, so the mask maps back"
        mask = self._original_mask(np.argmax(next(iter(outputs.values()))[0], axis=0), placement)
        counts = np.bincount(mask.ravel(), minlength=len(self.labels))
        order = sorted(np.flatnonzero(counts), key=lambda c: (-counts[c], c))
        classes = [SegmentClass(self.labels[c], int(c), int(counts[c]), float(counts[c] / mask.size)) for c in order]
        return Segmentation(classes, mask)

    def _original_mask(self, mask: np.ndarray, placement: Placement) -> np.ndarray:
        """The output's mask cropped to where the image sits in the input, then nearest-resized to its size."""
        rows, columns = mask.shape
        step_y, step_x = rows / self.size[0], columns / self.size[1]
        height, width = placement.original_size
        top, left = placement.pad_y * step_y, placement.pad_x * step_x
        bottom, right = top + height * placement.scale_y * step_y, left + width * placement.scale_x * step_x
        y = np.clip((top + (np.arange(height) + 0.5) * (bottom - top) / height).astype(int), 0, rows - 1)
        x = np.clip((left + (np.arange(width) + 0.5) * (right - left) / width).astype(int), 0, columns - 1)
        return mask[y][:, x]

    def __call__(self, image: Any) -> Segmentation:
        """The class histogram and mask of one BGR image (array or path)."""
        start = time.perf_counter()
        tensor, placement = self._prepare(image)
        pre = time.perf_counter()
        outputs = self._infer(tensor)
        infer = time.perf_counter()
        result = self._finish(outputs, placement)
        self._local.timing = Timing((pre - start) * 1e3, (infer - pre) * 1e3, (time.perf_counter() - infer) * 1e3)
        return result

    def stream(
        self,
        source: Any,
        *,
        max_frames: int | None = None,
        every: int = 1,
        timeout_s: float = 10.0,
        skip: Mapping[str, Collection[str]] | None = None,
    ) -> Any:
        """Segmentations frame by frame, in overlapping stages; see ``Detector.stream`` for the arguments."""
        return self._stream(source, self._finish, max_frames, every, timeout_s, skip)


class SegmentTask(Task):
    """Segmenters: mIoU of the candidate's argmax masks with the reference's, at least ``MIN_MIOU``."""

    name = "segment"
    metric = "mIoU"
    pipeline = "deploykit.tasks.segment:Segmenter"
    json_key = "classes"
    drawing = "a mask overlay"

    def __init__(self, output: str) -> None:
        self.output = output

    @classmethod
    def recognise(
        cls, outputs: Mapping[str, TensorSpec], metadata: Mapping[str, str], stated: str | None
    ) -> Task | None:
        if stated != cls.name:
            return None
        maps = [spec for spec in outputs.values() if spec.shape is not None and len(spec.shape) == 4]
        return cls(maps[0].name) if maps else None

    def decode(self, outputs: Outputs, feeds: Outputs, *, reference: bool) -> np.ndarray:
        return np.argmax(outputs[self.output], axis=1)

    def agreement(self, reference: Sequence[Any], candidate: Sequence[Any]) -> tuple[float, dict[str, Any]]:
        return mean_iou(np.concatenate(reference), np.concatenate(candidate))

    def threshold(self, thresholds: Any, precision: str | None) -> float:
        return MIN_MIOU.get(normalize_precision(precision), MIN_MIOU["f16"])

    @classmethod
    def results_agree(cls, ours: Sequence[Any], theirs: Sequence[Any]) -> bool:
        ours_mask, theirs_mask = getattr(ours, "mask", None), getattr(theirs, "mask", None)
        if ours_mask is None or theirs_mask is None:
            return False
        return mean_iou(theirs_mask[None], ours_mask[None])[0] >= PIPELINE_MIOU

    @classmethod
    def table(cls, results: Sequence[Any], source: str, settings: Mapping[str, Any]) -> ResultTable:
        rows = tuple((one_line(c.label), str(c.class_id), str(c.pixels), f"{c.fraction:.4f}") for c in results)
        return ResultTable(f"{len(results)} classes in {source}", ("label", "class", "pixels", "fraction"), rows)

    @classmethod
    def draw(cls, image: np.ndarray, results: Sequence[Any]) -> np.ndarray:
        mask = results.mask  # type: ignore[attr-defined]
        colours = np.array([_colour(c) for c in range(int(mask.max()) + 1)], dtype=np.float32)
        return (0.5 * image.astype(np.float32) + 0.5 * colours[mask]).round().astype(np.uint8)
