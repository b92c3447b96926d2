"""One image in, one result row out: the unit of work both engines (local and Ray) share.

A row is a JSON-serialisable dict::

    {"path": ..., "status": "ok" | "error", "error": None | reason, "task": "detect" | "classify",
     "results": [detections or top-k classes], "timing_ms": {"pre_ms", "infer_ms", "post_ms", "total_ms"},
     "backend": ..., "device": ..., "worker": {"node", "pid", "restarted"}}

A bad input (not an image, empty, truncated, odd channels) becomes an error row with the reason;
it never stops the job. Both engines build rows here, so they produce the same rows.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import DeployKitError, InputError, UsageError
from deploykit.vision.pipelines import Classifier, Detector

TASKS = ("detect", "classify")


def decode_image(data: bytes, name: str) -> np.ndarray:
    """Decode an image file's bytes to HWC uint8 BGR, with the checks ``load_image`` makes on a file
    (workers get bytes from Ray, not paths).

    Raises:
        InputError: the bytes are empty, truncated, too large, or not an image OpenCV can decode.
    """
    from deploykit.vision.image import _cv2, check_image, check_image_bytes

    if not data:
        raise InputError(f"image '{name}' | is empty (0 bytes).", hint="remove or re-export the file.")
    check_image_bytes(Path(name), data)
    cv2 = _cv2()
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:
        raise InputError(f"image '{name}' | OpenCV cannot decode it: {' '.join(str(exc).split())[-200:]}",
                         hint="pass a JPEG, PNG, BMP, TIFF or WebP file of a sane size.") from exc  # fmt: skip
    if image is None:
        raise InputError(
            f"image '{name}' | is not an image OpenCV can decode.", hint="pass a JPEG, PNG, BMP, TIFF or WebP file."
        )
    return check_image(image, f"image '{name}'")


class ImagePredictor:
    """A pipeline (Detector or Classifier) that turns (path, bytes) into result rows.

    Args:
        model: the ``.onnx`` file (already on this machine).
        task: ``detect`` or ``classify``.
        backend, device: where it runs.
        threads: the backend's thread count (the CPUs this worker may use).
        pipeline_options: keyword arguments of the pipeline (labels, conf, iou, mean, std ...).
        top_k: classification: how many classes per row.
        backend_options: further backend options.
        restarted: whether this worker replaces one that crashed (recorded in every row).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        task: str,
        backend: str = "onnxruntime",
        device: str | None = None,
        *,
        threads: int | None = None,
        pipeline_options: dict[str, Any] | None = None,
        top_k: int = 5,
        backend_options: dict[str, Any] | None = None,
        restarted: bool = False,
    ) -> None:
        if task not in TASKS:
            raise UsageError(f"task '{task}' | is not detect or classify.", hint="e.g. task='detect'.")
        options = dict(backend_options or {})
        if threads:
            options["threads"] = threads
        pipeline_class = Detector if task == "detect" else Classifier
        options.update(pipeline_options or {})
        self.pipeline: Detector | Classifier = pipeline_class(model, backend, device, **options)
        self.task, self.top_k = task, top_k
        info = self.pipeline.session.info
        self.backend, self.device = info.backend, info.device
        self.worker = {"node": platform.node(), "pid": os.getpid(), "restarted": restarted}

    def row(self, path: str, data: bytes) -> dict[str, Any]:
        """The result row of one encoded image."""
        base = {"path": path, "task": self.task, "backend": self.backend, "device": self.device, "worker": self.worker}
        try:
            image = decode_image(data, path)
            if isinstance(self.pipeline, Detector):
                results = [d.to_dict() for d in self.pipeline(image)]
            else:
                results = [c.to_dict() for c in self.pipeline(image, top_k=self.top_k)]
        except DeployKitError as exc:
            return {**base, "status": "error", "error": str(exc), "results": [], "timing_ms": None}
        timing = self.pipeline.last_timing
        return {**base, "status": "ok", "error": None, "results": results,
                "timing_ms": timing.to_dict() if timing else None}  # fmt: skip

    def rows(self, paths: Sequence[str], blobs: Sequence[bytes]) -> list[dict[str, Any]]:
        return [self.row(path, data) for path, data in zip(paths, blobs, strict=True)]

    def close(self) -> None:
        self.pipeline.close()
