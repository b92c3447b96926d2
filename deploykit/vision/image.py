"""Images in, tensors out: loading and checking images, letterbox/resize, normalisation, NCHW batches.

OpenCV and vectorised numpy only; no per-pixel Python loops. Images are HWC uint8 in BGR order,
as ``cv2.imread`` returns them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from deploykit.errors import InputError
from deploykit.io import regular_file_problem, shown
from deploykit.metadata import RESIZES
from deploykit.validation import check_number
from deploykit.vision.preprocess import PreprocessOverrides

if TYPE_CHECKING:
    from deploykit.model import Model

MIN_SIDE = 2


def _cv2() -> Any:
    try:
        import cv2
    except ImportError as exc:
        raise InputError(
            "images | OpenCV is needed for image pre-processing.", hint="pip install 'deploykit[opencv]'."
        ) from exc
    return cv2


def load_image(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an image file as HWC uint8 BGR.

    Raises:
        InputError: the path does not exist or is not an image OpenCV can decode.
    """
    file = Path(path)
    if file.is_dir():
        raise InputError(
            f"image '{file}' | is a folder, expected an image file.",
            hint="pass one image file (bench/compare --inputs take a folder).",
        )
    problem = regular_file_problem(file)
    if problem is not None:
        expected = "" if problem == "no such file" else "; expected an image file"
        raise InputError(f"image '{shown(file)}' | {problem}{expected}.", hint="check the path of the image.")
    return decode_image(file.read_bytes(), file)


def decode_image(data: bytes, name: str | os.PathLike[str]) -> np.ndarray:
    """Decode an image file's bytes as HWC uint8 BGR, refusing truncated and huge images first.

    Raises:
        InputError: the bytes are empty, truncated, too large, or not an image OpenCV can decode.
    """
    if not data:
        raise InputError(f"image '{name}' | is empty (0 bytes).", hint="remove or re-export the file.")
    check_image_bytes(Path(name), data)
    cv2 = _cv2()
    try:
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    except cv2.error as exc:
        raise InputError(
            f"image '{name}' | OpenCV cannot decode it: {' '.join(str(exc).split())[-200:]}",
            hint="pass a JPEG, PNG, BMP, TIFF or WebP file of a sane size.",
        ) from exc
    if image is None:
        raise InputError(
            f"image '{name}' | is not an image OpenCV can read.",
            hint="pass a JPEG, PNG, BMP, TIFF or WebP file.",
        )
    return check_image(image, str(name))


MAX_IMAGE_PIXELS = 2**28
"""Images are refused past this many pixels (16384 × 16384) before they are decoded."""


def _header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, JPEG or BMP header without decoding, or None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    if data[:2] == b"BM" and len(data) >= 26:
        return abs(int.from_bytes(data[18:22], "little", signed=True)), abs(
            int.from_bytes(data[22:26], "little", signed=True)
        )
    if data[:2] == b"\xff\xd8":
        position = 2
        while position + 9 < len(data):
            if data[position] != 0xFF:
                return None
            marker = data[position + 1]
            if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
                position += 2
                continue
            length = int.from_bytes(data[position + 2 : position + 4], "big")
            # SOF0-SOF15, except DHT (C4), JPG (C8) and DAC (CC), carry the frame size.
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                height = int.from_bytes(data[position + 5 : position + 7], "big")
                width = int.from_bytes(data[position + 7 : position + 9], "big")
                return width, height
            position += 2 + length
    return None


def _truncation(data: bytes) -> str | None:
    """Why a JPEG or PNG is cut short (decoders then fill the rest with grey, silently), or None."""
    if data[:2] == b"\xff\xd8":
        # The image's last scan (after any thumbnail in the EXIF block) must end with EOI.
        last_scan = data.rfind(b"\xff\xda")
        if last_scan < 0 or data.rfind(b"\xff\xd9") < last_scan:
            return "the JPEG data ends before its end-of-image marker (the file is truncated)"
    elif data[:8] == b"\x89PNG\r\n\x1a\n" and data.rfind(b"IEND", max(0, len(data) - 4096)) < 0:
        return "the PNG has no IEND chunk (the file is truncated)"
    return None


def check_image_bytes(file: Path, data: bytes) -> None:
    """Refuse, before decoding, an image that is truncated or would decode to a huge array.

    Raises:
        InputError: naming the file, its size in pixels, or what is cut short.
    """
    size = _header_size(data)
    if size is not None and size[0] * size[1] > MAX_IMAGE_PIXELS:
        width, height = size
        raise InputError(
            f"image '{file}' | is {width}x{height} ({width * height / 1e6:,.0f} megapixels, "
            f"{width * height * 3 / 2**30:.1f} GiB decoded); deploykit decodes images up to "
            f"{MAX_IMAGE_PIXELS / 1e6:.0f} megapixels.",
            hint="downscale it first (e.g. to the model's input size).",
        )
    problem = _truncation(data)
    if problem:
        raise InputError(f"image '{file}' | {problem}.", hint="download or copy the image again.")


def check_image(image: Any, name: str = "image") -> np.ndarray:
    """Accept HWC BGR uint8; convert grayscale and BGRA (and 16-bit) images; refuse what cannot be used."""
    if not isinstance(image, np.ndarray):
        raise InputError(
            f"{name} | got {type(image).__name__}, expected a numpy image (H, W, 3) in BGR order.",
            hint="read images with cv2.imread or deploykit.vision.image.load_image.",
        )
    if image.ndim not in (2, 3) or image.size == 0:
        raise InputError(
            f"{name} | has shape {image.shape}, expected (height, width) or (height, width, channels).",
            hint="pass one image at a time; use pipeline.batch([...]) for several.",
        )
    height, width = image.shape[:2]
    if height < MIN_SIDE or width < MIN_SIDE:
        raise InputError(
            f"{name} | is {width}x{height} pixels; at least {MIN_SIDE}x{MIN_SIDE} is needed.",
            hint="the image is empty or a single pixel; check how it was produced.",
        )
    if image.dtype == np.uint16:
        image = (image / 257).astype(np.uint8)
    elif image.dtype != np.uint8:
        raise InputError(
            f"{name} | has dtype {image.dtype}, expected uint8 (0-255).",
            hint="convert with (image * 255).clip(0, 255).astype(np.uint8) if it holds floats in [0, 1].",
        )
    cv2 = _cv2()
    if image.ndim == 2 or image.shape[2] == 1:
        return cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
    if image.shape[2] == 4:
        return cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    if image.shape[2] != 3:
        raise InputError(
            f"{name} | has {image.shape[2]} channels; expected 1 (gray), 3 (BGR) or 4 (BGRA).",
            hint="convert the image to BGR first.",
        )
    return image


@dataclass(frozen=True)
class Placement:
    """Where an original image sits inside the network input: scale and padding per axis."""

    scale_x: float
    scale_y: float
    pad_x: float
    pad_y: float
    original_size: tuple[int, int]  # (height, width)

    def to_original(self, boxes_xyxy: np.ndarray) -> np.ndarray:
        """Boxes in network-input pixels → boxes in original-image pixels, clipped to the image."""
        boxes = np.asarray(boxes_xyxy, dtype=np.float32).reshape(-1, 4).copy()
        boxes[:, [0, 2]] = (boxes[:, [0, 2]] - self.pad_x) / self.scale_x
        boxes[:, [1, 3]] = (boxes[:, [1, 3]] - self.pad_y) / self.scale_y
        height, width = self.original_size
        boxes[:, [0, 2]] = boxes[:, [0, 2]].clip(0, width)
        boxes[:, [1, 3]] = boxes[:, [1, 3]].clip(0, height)
        return boxes


def letterbox(
    image: np.ndarray, size: tuple[int, int], *, pad_value: int = 114, center: bool = True
) -> tuple[np.ndarray, Placement]:
    """Resize keeping the aspect ratio into ``size`` (height, width), padding the rest with ``pad_value``."""
    cv2 = _cv2()
    height, width = image.shape[:2]
    target_h, target_w = size
    new_w, new_h, left, top, placement = letterbox_geometry(height, width, size, center=center)
    # bilinear both ways: INTER_AREA is ~15x slower on non-integer downscales (1280x720 → 416)
    resized = cv2.resize(image, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    canvas = cv2.copyMakeBorder(
        resized, top, target_h - new_h - top, left, target_w - new_w - left, cv2.BORDER_CONSTANT, value=(pad_value,) * 3
    )
    return canvas, placement


def letterbox_geometry(
    height: int, width: int, size: tuple[int, int], *, center: bool = True
) -> tuple[int, int, int, int, Placement]:
    """(new_w, new_h, left, top) of an image of ``height`` × ``width`` letterboxed into ``size``, and its placement."""
    target_h, target_w = size
    scale = min(target_h / height, target_w / width)
    new_w, new_h = max(1, round(width * scale)), max(1, round(height * scale))
    pad_x = (target_w - new_w) / 2 if center else 0.0
    pad_y = (target_h - new_h) / 2 if center else 0.0
    left, top = round(pad_x - 0.1), round(pad_y - 0.1)
    return new_w, new_h, left, top, Placement(new_w / width, new_h / height, float(left), float(top), (height, width))


def stretch(image: np.ndarray, size: tuple[int, int]) -> tuple[np.ndarray, Placement]:
    """Plain resize to ``size`` (height, width), not keeping the aspect ratio."""
    cv2 = _cv2()
    height, width = image.shape[:2]
    target_h, target_w = size
    resized = cv2.resize(image, (target_w, target_h), interpolation=cv2.INTER_LINEAR)
    return resized, Placement(target_w / width, target_h / height, 0.0, 0.0, (height, width))


def center_crop(image: np.ndarray, size: tuple[int, int], resize_ratio: float = 0.875) -> np.ndarray:
    """ImageNet-style evaluation crop: shorter side to size/ratio (224 → 256), then the centre."""
    cv2 = _cv2()
    height, width = image.shape[:2]
    target_h, target_w = size
    short = round(min(target_h, target_w) / resize_ratio)
    scale = short / min(height, width)
    resized = cv2.resize(
        image,
        (max(target_w, round(width * scale)), max(target_h, round(height * scale))),
        interpolation=cv2.INTER_LINEAR,
    )
    top = (resized.shape[0] - target_h) // 2
    left = (resized.shape[1] - target_w) // 2
    return resized[top : top + target_h, left : left + target_w]


def to_tensor(
    images: Sequence[np.ndarray],
    *,
    channel_order: str = "RGB",
    scale: float = 1 / 255,
    mean: Sequence[float] = (0.0, 0.0, 0.0),
    std: Sequence[float] = (1.0, 1.0, 1.0),
) -> np.ndarray:
    """HWC uint8 BGR images of one size → NCHW float32: channel order, ×scale, −mean, ÷std."""
    # OpenCV's blobFromImages does the swap, scale and transpose in one C++ pass
    tensor = _cv2().dnn.blobFromImages(list(images), scalefactor=scale, swapRB=channel_order.upper() == "RGB")
    return _normalise(tensor, mean, std)


def _normalise(tensor: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """−mean, ÷std per channel, in place where they are not the identity."""
    mean_array = np.asarray(mean, np.float32).reshape(1, -1, 1, 1)
    std_array = np.asarray(std, np.float32).reshape(1, -1, 1, 1)
    if np.any(mean_array):
        tensor -= mean_array
    if np.any(std_array != 1):
        tensor /= std_array
    return tensor


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def list_images(folder: Path, *, screen: bool = True) -> list[Path]:
    """The image files of a folder (by suffix), sorted by name, each screened by ``check_image_files``.

    Args:
        folder: the folder to list.
        screen: False leaves the screening to a caller that gathers files from several folders and
            screens them together (so one message names every bad file).

    Raises:
        InputError: one of them is not a regular file (a FIFO, a device such as a link to /dev/zero, a
            socket, a folder) or not a whole image: every such file named, before anything decodes one.
    """
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if screen:
        check_image_files(files, folder)
    return files


SCREEN_HEAD_BYTES = 64 * 1024
SCREEN_TAIL_BYTES = 4096
IMAGE_SIGNATURES = (b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"BM", b"II*\x00", b"MM\x00*")
MAX_NAMED_FILES = 20


def image_file_problem(file: Path) -> str | None:
    """Why ``file`` is no whole image, from its first and last bytes, without decoding it; None if it
    looks whole. It says what ``load_image`` would say of the file, in the same words, before any
    image of a set is decoded (a JPEG's end is read whole only when its tail holds no end marker)."""
    problem = regular_file_problem(file)
    if problem is not None:
        return problem
    try:
        with file.open("rb") as stream:
            head = stream.read(SCREEN_HEAD_BYTES + SCREEN_TAIL_BYTES)
            tail = head
            if len(head) == SCREEN_HEAD_BYTES + SCREEN_TAIL_BYTES:
                stream.seek(-SCREEN_TAIL_BYTES, os.SEEK_END)
                tail = stream.read()
    except OSError as exc:
        return f"cannot be read ({(exc.strerror or str(exc)).lower()})"
    if not head:
        return "is empty (0 bytes)"
    known = head.startswith(IMAGE_SIGNATURES) or (head[:4] == b"RIFF" and head[8:12] == b"WEBP")
    if not known and not _cv2().haveImageReader(str(file)):
        return "is not an image OpenCV can read"
    size = _header_size(head)
    if size is not None and size[0] * size[1] > MAX_IMAGE_PIXELS:
        return f"is {size[0]}x{size[1]} pixels, more than the {MAX_IMAGE_PIXELS / 1e6:.0f} megapixels deploykit decodes"
    if size is not None and min(size) < MIN_SIDE:
        return f"is {size[0]}x{size[1]} pixels; at least {MIN_SIDE}x{MIN_SIDE} is needed"
    if tail is head:
        return _truncation(head)
    if head[:2] == b"\xff\xd8" and tail.rfind(b"\xff\xd9") > tail.rfind(b"\xff\xda"):
        return None  # the last marker of the file is an end-of-image after every scan: whole
    if head[:2] == b"\xff\xd8":  # a trailer after the image (a motion photo's video): the whole file decides
        return _truncation(file.read_bytes())
    return _truncation(head[:8] + tail)


def check_image_files(files: Sequence[Path], folder: Path | None = None) -> None:
    """Refuse a set of photos when any of them cannot be read, naming every such file and why.

    A command that reads a user's photos (calibration, the accuracy split, ``compare``/``bench``
    inputs, ``predict`` over a folder) reads all of them or none: a photo left out in silence
    would change the calibration, the split and the verdict without a word, and one message that
    names every bad file lets them all be fixed at once.

    Raises:
        InputError: ``images 'FOLDER' | 2 of 40 files are not whole images: ...`` (a single file
            given alone keeps its own ``image 'FILE' | ...`` message).
    """
    bad = [(file, problem) for file in files if (problem := image_file_problem(file)) is not None]
    if not bad:
        return
    if folder is None and len(files) == 1:
        file, problem = bad[0]
        raise InputError(f"image '{shown(file)}' | {problem}.", hint="check the path of the image.")

    def name(file: Path) -> str:
        return shown(file.relative_to(folder) if folder is not None and file.is_relative_to(folder) else file)

    named = "; ".join(f"'{name(file)}': {problem}" for file, problem in bad[:MAX_NAMED_FILES])
    more = f"; and {len(bad) - MAX_NAMED_FILES} more" if len(bad) > MAX_NAMED_FILES else ""
    subject = f"images '{shown(folder)}'" if folder is not None else "images"
    verb = "is not a whole image" if len(bad) == 1 else "are not whole images"
    raise InputError(
        f"{subject} | {len(bad)} of {len(files)} files {verb} deploykit can read: {named}{more}.",
        hint="remove or replace them (re-copy a truncated file); deploykit reads every photo of a set or none, "
        "so a result never rests on fewer photos than you gave.",
    )


@dataclass(frozen=True)
class Preprocess:
    """How images become a model's input: resize mode, pad value, channel order and normalisation."""

    size: tuple[int, int]
    resize: str = "letterbox"
    pad_value: int = 114
    channel_order: str = "RGB"
    scale: float = 1 / 255
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)

    @classmethod
    def from_metadata(
        cls,
        metadata: Mapping[str, str],
        size: tuple[int, int],
        default_resize: str = "letterbox",
        model: str = "the model",
        overrides: PreprocessOverrides | None = None,
    ) -> Preprocess:
        """Settings from a model's ``deploykit.input`` metadata; the ``overrides`` that are set win (their
        ``input_size`` is the caller's: ``size`` is already the one chosen)."""
        from deploykit.metadata import read_metadata

        stored = read_metadata(metadata, model).input
        given = overrides.given() if overrides is not None else {}
        chosen = given.get("resize") or stored.resize or default_resize
        if chosen not in RESIZES:
            raise InputError(
                f"resize '{chosen}' | is not one of {', '.join(RESIZES)}.",
                hint="letterbox keeps the aspect ratio, stretch does not, center-crop crops it.",
            )
        return cls(
            size=size,
            resize=chosen,
            pad_value=round((114 / 255 if stored.pad_value is None else stored.pad_value) * 255),
            channel_order=given.get("channel_order") or stored.channel_order or "RGB",
            scale=float(given.get("scale", 1 / 255 if stored.scale is None else stored.scale)),
            mean=tuple(given.get("mean", stored.mean or (0.0, 0.0, 0.0))),
            std=tuple(given.get("std", stored.std or (1.0, 1.0, 1.0))),
        )

    def place(self, image: np.ndarray) -> tuple[np.ndarray, Placement | None]:
        """The resized image and where the original sits in it (None for a centre crop)."""
        if self.resize == "letterbox":
            return letterbox(image, self.size, pad_value=self.pad_value)
        if self.resize == "stretch":
            return stretch(image, self.size)
        return center_crop(image, self.size), None

    def tensor(self, canvases: Sequence[np.ndarray]) -> np.ndarray:
        return to_tensor(canvases, channel_order=self.channel_order, scale=self.scale, mean=self.mean, std=self.std)

    def prepare(self, image: np.ndarray, ring: TensorRing | None = None) -> tuple[np.ndarray, Placement | None]:
        """One image → its (1, 3, H, W) input tensor and placement: ``tensor([place(image)[0]])``, bit for bit.

        Letterbox and stretch write the resized pixels straight into the tensor, channel by channel, and the
        padding as one constant, instead of padding a canvas and converting all of it (a 1280×720 frame in a
        416×416 input: 44 % of the input is padding). With a ``ring``, the tensor and the resize buffers are
        the ring's next slot, reused: no allocation, and the padding is written only when the slot last held
        another geometry. The caller must be done with the tensor a slot handed out before it comes round
        again (see ``TensorRing``).
        """
        if self.resize == "center-crop":
            canvas, placement = self.place(image)
            return self.tensor([canvas]), placement
        cv2 = _cv2()
        height, width = image.shape[:2]
        target_h, target_w = self.size
        if self.resize == "letterbox":
            new_w, new_h, left, top, placement = letterbox_geometry(height, width, self.size)
        else:
            new_w, new_h, left, top = target_w, target_h, 0, 0
            placement = Placement(target_w / width, target_h / height, 0.0, 0.0, (height, width))
        slot = (ring or TensorRing(1)).take(self, (new_w, new_h, left, top))
        resized = cv2.resize(image, (new_w, new_h), dst=slot.resized, interpolation=cv2.INTER_LINEAR)
        planes = cv2.split(resized, slot.planes)  # contiguous planes: the multiply below runs over unit strides
        order = planes[::-1] if self.channel_order.upper() == "RGB" else planes
        region = slot.tensor[:, :, top : top + new_h, left : left + new_w]
        scale = np.float32(self.scale)
        for channel, plane in enumerate(order):
            np.multiply(plane, scale, out=region[0, channel], dtype=np.float32)
        _normalise(region, self.mean, self.std)
        return slot.tensor, placement

    def padding(self) -> np.ndarray:
        """The padding's value per channel, (1, 3, 1, 1) float32: the pad byte scaled and normalised as pixels are."""
        pad = np.multiply(np.uint8(self.pad_value), np.float32(self.scale), dtype=np.float32)
        return _normalise(np.full((1, 3, 1, 1), pad, np.float32), self.mean, self.std)


@dataclass
class TensorSlot:
    """One reusable input tensor, the geometry whose padding it holds, and the buffers its frames resize into."""

    geometry: tuple[Any, ...]
    tensor: np.ndarray
    resized: np.ndarray
    planes: tuple[np.ndarray, ...]


class TensorRing:
    """``slots`` input tensors handed out in turn (``Preprocess.prepare(image, ring)``), so a stream of frames
    allocates nothing per frame and writes the padding once per slot and frame size.

    A slot is written again ``slots`` calls after it was handed out: the caller must hold fewer than
    ``slots`` tensors at once (the stream bounds this by its queues: see ``deploykit.vision.stream``).
    One thread takes from a ring.
    """

    def __init__(self, slots: int) -> None:
        check_number("slots", slots, low=1, integer=True, hint="at least one tensor.")
        self._slots: list[TensorSlot | None] = [None] * slots
        self._next = 0

    def take(self, preprocess: Preprocess, placement: tuple[int, int, int, int]) -> TensorSlot:
        """The next slot, its padding filled for ``placement`` (new_w, new_h, left, top) in ``preprocess``."""
        index, self._next = self._next, (self._next + 1) % len(self._slots)
        geometry = (preprocess, *placement)
        slot = self._slots[index]
        if slot is None or slot.geometry != geometry:
            slot = self._slots[index] = _new_slot(preprocess, geometry)
        return slot


def _new_slot(preprocess: Preprocess, geometry: tuple[Any, ...]) -> TensorSlot:
    """A slot whose tensor holds the padding around the (new_w, new_h, left, top) region."""
    new_w, new_h, left, top = geometry[1:]
    target_h, target_w = preprocess.size
    tensor = np.empty((1, 3, target_h, target_w), np.float32)
    pad = preprocess.padding()
    tensor[:, :, :top] = pad
    tensor[:, :, top + new_h :] = pad
    tensor[:, :, top : top + new_h, :left] = pad
    tensor[:, :, top : top + new_h, left + new_w :] = pad
    planes = tuple(np.empty((new_h, new_w), np.uint8) for _ in range(3))
    return TensorSlot(geometry, tensor, np.empty((new_h, new_w, 3), np.uint8), planes)


def _image_source(
    model: Model | str | os.PathLike[str], source: str | os.PathLike[str], size: tuple[int, int] | None = None
) -> tuple[Any, Preprocess, list[Path]]:
    """The one NCHW image input of ``model``, its pre-processing from metadata, and the image files.

    A dynamic image size comes from ``size`` (--shape), deploykit's metadata, or Ultralytics' imgsz.
    """

    from deploykit.inputs import image_size_from_metadata
    from deploykit.model import as_model

    interface = as_model(model)
    if len(interface.inputs) != 1 or interface.inputs[0].shape is None or len(interface.inputs[0].shape) != 4:
        raise InputError(
            f"inputs '{source}' | images feed one (N, C, H, W) input; '{interface.name}' has "
            f"{', '.join(str(s) for s in interface.inputs)}.",
            hint="pass arrays in an .npz file instead.",
        )
    spec = interface.inputs[0]
    metadata = interface.metadata_props
    assert spec.shape is not None
    height, width = spec.shape[2], spec.shape[3]
    if not (isinstance(height, int) and isinstance(width, int)):
        found = size or (image_size_from_metadata(metadata) or (None, ""))[0]
        if found is None:
            raise InputError(
                f"inputs '{source}' | '{interface.name}' has a dynamic image size and no size in its metadata.",
                hint=f"give the size to pre-process to: --shape {spec.name}:1x3x640x640 (your model's size).",
            )
        height, width = found
    path = Path(source)
    if not path.exists():
        raise InputError(f"inputs '{path}' | no such file or folder.", hint="pass an image file or a folder of them.")
    files = list_images(path) if path.is_dir() else [path]
    if not files:
        raise InputError(
            f"inputs '{path}' | the folder holds no images.", hint="pass an image file or a folder of them."
        )
    return spec, Preprocess.from_metadata(metadata, (height, width)), files


def image_feeds(
    model: Model | str | os.PathLike[str], source: str | os.PathLike[str], batch: int = 1
) -> dict[str, np.ndarray]:
    """Real-image feeds for a one-input NCHW model: an image file (repeated to ``batch``) or a
    folder (its first ``batch`` images), pre-processed as the model's metadata says (letterbox,
    RGB, 1/255 by default) at the model's input size.

    Raises:
        InputError: the model does not take one NCHW image input, or the images cannot be read.
    """
    spec, preprocess, files = _image_source(model, source)
    tensor = preprocess.tensor([preprocess.place(load_image(files[i % len(files)]))[0] for i in range(batch)])
    return {spec.name: tensor.astype(spec.dtype, copy=False)}


def image_cases(
    model: Model | str | os.PathLike[str],
    source: str | os.PathLike[str],
    limit: int = 16,
    size: tuple[int, int] | None = None,
) -> tuple[list[dict[str, np.ndarray]], list[Path]]:
    """One feed per image (batch 1), for up to ``limit`` images of a file or folder, and their paths:
    what task metrics (top-1 agreement, detection mAP) are computed over."""
    spec, preprocess, files = _image_source(model, source, size)
    files = files[:limit]
    cases = [
        {spec.name: preprocess.tensor([preprocess.place(load_image(f))[0]]).astype(spec.dtype, copy=False)}
        for f in files
    ]
    return cases, files


def as_image(image: Any) -> np.ndarray:
    """An image as the pipelines take it: a path is read (``load_image``), an array is checked
    (``check_image``)."""
    if isinstance(image, str | os.PathLike):
        return load_image(image)
    return check_image(image)
