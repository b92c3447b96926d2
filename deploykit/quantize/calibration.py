"""Calibration and held-out data for quantization: images through the model's own pre-processing, or arrays.

Images come from a folder (``photos/*.jpg``, or ``photos/<class>/*.jpg`` where the folder name is
the true class) and become tensors exactly as the pipelines make them (the ``Preprocess`` of the
model's ``Detector`` or ``Classifier``, read from its metadata). A seeded split keeps a held-out
part for the accuracy delta: those images are never used to calibrate. Tensors are made when they
are read, so 100 calibration images do not sit in memory at once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import InputError, UsageError
from deploykit.io import file_sha256, hash_file
from deploykit.tensors import TensorSpec
from deploykit.vision.image import Preprocess, check_image_files, list_images, load_image

DEFAULT_CALIBRATION_SIZE = 100
DEFAULT_HELD_OUT = 0.2


@dataclass(frozen=True)
class Sample:
    """One calibration or evaluation item: an image file (with its class folder, if any) or one row of arrays."""

    image: Path | None = None
    label: str | None = None
    arrays: dict[str, np.ndarray] | None = None


@dataclass
class CalibrationData:
    """The calibration and held-out samples, how to turn one into feeds, and where they came from.

    Attributes:
        source: the folder or ``.npz`` file given.
        sha256: hash of the calibration files (names and bytes), stamped on the quantized model.
        calibration: samples used to calibrate.
        held_out: samples used only to measure the accuracy delta.
        input_name: the model input the images feed.
        preprocess: how images become tensors (None for arrays).
        notes: plain statements about the split (fewer images than asked ...).
    """

    source: str
    sha256: str
    calibration: list[Sample]
    held_out: list[Sample]
    input_name: str
    preprocess: Preprocess | None
    input_dtype: np.dtype[Any] = field(default_factory=lambda: np.dtype(np.float32))
    notes: list[str] = field(default_factory=list)

    def feeds(self, sample: Sample) -> dict[str, np.ndarray]:
        """The model's feeds for one sample (batch of one)."""
        if sample.arrays is not None:
            return sample.arrays
        assert sample.image is not None and self.preprocess is not None
        canvas, _ = self.preprocess.place(load_image(sample.image))
        return {self.input_name: self.preprocess.tensor([canvas]).astype(self.input_dtype, copy=False)}

    def iter_feeds(self, samples: Sequence[Sample]) -> Iterator[dict[str, np.ndarray]]:
        for sample in samples:
            yield self.feeds(sample)

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "sha256": self.sha256,
            "calibration_size": len(self.calibration),
            "held_out_size": len(self.held_out),
            "labelled": all(s.label is not None for s in self.held_out) and bool(self.held_out),
            "notes": list(self.notes),
        }


def labelled_images(folder: Path) -> list[tuple[Path, str | None]]:
    """Images of a folder and of its immediate sub-folders (whose names are the true classes).

    Raises:
        InputError: the folder is none, holds no images, or holds files that are no whole image
            (every one named: ``check_image_files``).
    """
    if not folder.is_dir():
        raise InputError(
            f"images '{folder}' | is not a folder.", hint="pass a folder of images (or folder/<class>/*.jpg)."
        )
    found: list[tuple[Path, str | None]] = [(p, None) for p in list_images(folder, screen=False)]
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        found += [(p, child.name) for p in list_images(child, screen=False)]
    check_image_files([path for path, _ in found], folder)
    if not found:
        raise InputError(
            f"images '{folder}' | the folder holds no images (looked for .jpg, .png, .bmp, .webp, .tif, "
            "directly and one folder down).",
            hint="put the calibration photos in the folder, or pass an .npz of input arrays.",
        )
    return found


def _hash_files(paths: Sequence[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode())
        hash_file(digest, path)
    return digest.hexdigest()


def _split(count: int, held_out: float, seed: int) -> tuple[list[int], list[int]]:
    order = np.random.default_rng(seed).permutation(count).tolist()
    if held_out <= 0:
        return order, []
    held = min(count - 1, max(1, round(count * held_out)))
    return order[held:], order[:held]


def _check_fraction(held_out: float, calibration_size: int) -> None:
    if not 0 <= held_out < 1:
        raise UsageError(
            f"--held-out {held_out:g} | expected a fraction in [0, 1).",
            hint="e.g. --held-out 0.2 keeps a fifth of the images for the accuracy delta.",
        )
    if calibration_size < 1:
        raise UsageError(
            f"--calibration-size {calibration_size} | at least 1 calibration sample is needed.",
            hint="100 is the default; a few dozen real images usually suffice.",
        )


def image_data(
    folder: str | os.PathLike[str],
    *,
    input_name: str,
    input_dtype: np.dtype[Any],
    channels: Any,
    preprocess: Preprocess,
    calibration_size: int = DEFAULT_CALIBRATION_SIZE,
    held_out: float = DEFAULT_HELD_OUT,
    evaluate: str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> CalibrationData:
    """Split a folder of images into calibration and held-out samples.

    Args:
        folder: calibration images (``folder/*.jpg`` or ``folder/<class>/*.jpg``).
        input_name, input_dtype, channels: the model's image input (channels from its shape).
        preprocess: the pipeline's pre-processing.
        calibration_size: at most this many calibration images.
        held_out: fraction of ``folder`` kept for the accuracy delta, unless ``evaluate`` is given.
        evaluate: a separate folder of evaluation images; then all of ``folder`` calibrates.
        seed: the split's shuffle.

    Raises:
        InputError: no images, too few to split, or a model whose input is not 3-channel.
        UsageError: a fraction or size out of range.
    """
    _check_fraction(held_out, calibration_size)
    root = Path(folder)
    if isinstance(channels, int) and channels != 3:
        raise InputError(
            f"images '{root}' | images give 3 channels (BGR → the model's order); the model's input "
            f"'{input_name}' takes {channels}.",
            hint="pass calibration data as an .npz of arrays shaped like the input.",
        )
    found = labelled_images(root)
    notes: list[str] = []
    if evaluate is not None:
        chosen = list(range(len(found)))
        evaluation = labelled_images(Path(evaluate))
        held = [Sample(image=p, label=label) for p, label in evaluation]
        notes.append(f"held-out images: the {len(held)} images of {evaluate}")
    else:
        if held_out > 0 and len(found) < 2:
            raise InputError(
                f"images '{root}' | holds {len(found)} image; a calibration and a held-out part need at least 2.",
                hint="add images, pass --eval FOLDER for evaluation images, or --held-out 0.",
            )
        chosen, held_indices = _split(len(found), held_out, seed)
        held = [Sample(image=found[i][0], label=found[i][1]) for i in sorted(held_indices)]
        notes.append(f"held out {len(held)} of {len(found)} images ({held_out:.0%}) for the accuracy delta")
    calibration_indices = sorted(chosen[:calibration_size])
    if len(chosen) < calibration_size:
        notes.append(
            f"calibrated on {len(chosen)} images, fewer than the {calibration_size} asked: the folder has no more"
        )
    calibration = [Sample(image=found[i][0], label=found[i][1]) for i in calibration_indices]
    return CalibrationData(
        source=str(root),
        sha256=_hash_files([s.image for s in calibration if s.image is not None], root),
        calibration=calibration,
        held_out=held,
        input_name=input_name,
        preprocess=preprocess,
        input_dtype=input_dtype,
        notes=notes,
    )


def array_data(
    path: str | os.PathLike[str],
    inputs: Sequence[TensorSpec],
    *,
    calibration_size: int = DEFAULT_CALIBRATION_SIZE,
    held_out: float = DEFAULT_HELD_OUT,
    seed: int = 0,
) -> CalibrationData:
    """Calibration samples from an ``.npz`` holding one array per model input, samples along axis 0.

    An array of the input's rank gives one sample per row (a batch of one each); an array of one
    more rank gives one sample per entry of its first axis (a whole batch each).

    Raises:
        UsageError: the file cannot be read, misses an input, or its arrays differ in length.
        InputError: a sample does not fit the model's input (dtype, rank, size).
    """
    from deploykit.backends.base import validate_feeds
    from deploykit.inputs import load_arrays

    _check_fraction(held_out, calibration_size)
    file = Path(path)
    arrays = load_arrays(file)
    input_names = [spec.name for spec in inputs]
    missing = [n for n in input_names if n not in arrays]
    if missing:
        raise UsageError(
            f"calibration file '{file}' | has {', '.join(arrays) or 'no arrays'}; missing model input(s) "
            f"{', '.join(missing)}.",
            hint="save one array per input, samples along the first axis: np.savez(path, images=x).",
        )
    lengths = {n: arrays[n].shape[0] if arrays[n].ndim else 0 for n in input_names}
    if len(set(lengths.values())) != 1 or 0 in lengths.values():
        raise UsageError(
            f"calibration file '{file}' | arrays have {lengths} samples; expected the same number (≥ 1) in each.",
            hint="stack the samples of every input along axis 0.",
        )
    count = next(iter(lengths.values()))
    if held_out > 0 and count < 2:
        raise UsageError(
            f"calibration file '{file}' | holds 1 sample; a calibration and a held-out part need at least 2.",
            hint="add samples, or pass --held-out 0.",
        )
    chosen, held_indices = _split(count, held_out, seed)
    ranks = {spec.name: len(spec.shape) if spec.shape is not None else arrays[spec.name].ndim for spec in inputs}
    rows = [
        {n: arrays[n][i] if arrays[n].ndim == ranks[n] + 1 else arrays[n][i : i + 1] for n in input_names}
        for i in range(count)
    ]
    validate_feeds({spec.name: spec for spec in inputs}, rows[0])
    notes = [f"held out {len(held_indices)} of {count} samples for the accuracy delta"]
    if len(chosen) < calibration_size:
        notes.append(f"calibrated on {len(chosen)} samples, fewer than the {calibration_size} asked")
    digest = file_sha256(file)
    return CalibrationData(
        source=str(file),
        sha256=digest,
        calibration=[Sample(arrays=rows[i]) for i in sorted(chosen[:calibration_size])],
        held_out=[Sample(arrays=rows[i]) for i in sorted(held_indices)],
        input_name=input_names[0],
        preprocess=None,
        notes=notes,
    )


def ort_reader(data: CalibrationData) -> Any:
    """An ONNX Runtime ``CalibrationDataReader`` over the calibration samples."""
    from onnxruntime.quantization import CalibrationDataReader

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._items = data.iter_feeds(data.calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._items, None)

        def rewind(self) -> None:
            self._items = data.iter_feeds(data.calibration)

    return _Reader()
