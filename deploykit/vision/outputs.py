"""Where annotated frames go: a video file (same fps and size as the source) or a folder of images.

A video is written to a temporary file beside its path and renamed over it when closed, also when the
run is interrupted (Ctrl-C, SIGTERM unwinding): the container is finalised by OpenCV's ``release()``, so
the frames written so far play. This module writes; it must not know about models.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import OutputError, ResourceError, UsageError
from deploykit.io import plain_write_mode, shown
from deploykit.signals import DeferredSignals
from deploykit.vision.image import IMAGE_SUFFIXES, _cv2

VIDEO_CODECS = {".mp4": "mp4v", ".avi": "MJPG", ".mkv": "mp4v"}
"""Video containers OpenCV's FFmpeg backend writes in every build, and the codec used for each."""
DEFAULT_FPS = 30.0


def check_video_output(path: Path, option: str = "--draw") -> None:
    """Refuse, before any work, a video path whose extension no writer here supports."""
    if path.suffix.lower() not in VIDEO_CODECS:
        raise UsageError(
            f"{option} '{shown(path)}' | a video source draws into a video file, and no writer here writes "
            f"'{path.suffix or '(no extension)'}'; expected {', '.join(VIDEO_CODECS)}.",
            hint="e.g. --draw out.mp4.",
        )


def check_image_folder_output(path: Path, option: str = "--draw") -> None:
    """Refuse a file (or a name with an image or video extension) where a folder of drawn images goes."""
    if path.exists() and not path.is_dir():
        raise UsageError(
            f"{option} '{shown(path)}' | is a file; several images are drawn into a folder.",
            hint="pass a folder, e.g. --draw drawn/.",
        )
    if path.suffix.lower() in IMAGE_SUFFIXES + tuple(VIDEO_CODECS):
        raise UsageError(
            f"{option} '{shown(path)}' | names a file, but several images are drawn into a folder, one image each.",
            hint="pass a folder, e.g. --draw drawn/ (one image, or a video source, draws into a file).",
        )


class VideoWriter:
    """Frames into a video file; opened on the first frame (its size), finalised by ``close()``."""

    def __init__(self, path: Path, fps: float | None) -> None:
        check_video_output(path)
        self.path = path
        self.fps = fps if fps and 0 < fps <= 1000 else DEFAULT_FPS
        self.frames = 0
        self._writer: Any = None
        self._temporary: Path | None = None
        self._size: tuple[int, int] | None = None

    def write(self, image: np.ndarray) -> None:
        cv2 = _cv2()
        size = (int(image.shape[1]), int(image.shape[0]))
        if self._writer is None:
            self._open(size)
        elif size != self._size:  # a writer takes one size; a stream that changes size is scaled to the first
            image = cv2.resize(image, self._size, interpolation=cv2.INTER_LINEAR)
        self._writer.write(image)
        self.frames += 1

    def _open(self, size: tuple[int, int]) -> None:
        cv2 = _cv2()
        directory = self.path.parent if str(self.path.parent) else Path(".")
        # a signal between the file's creation and its recording would leave it behind: held until recorded
        with DeferredSignals():
            try:
                handle, name = tempfile.mkstemp(prefix=f".{self.path.stem}.", suffix=self.path.suffix, dir=directory)
            except OSError as exc:
                raise OutputError(
                    f"--draw '{shown(self.path)}' | cannot create a file in '{directory}' ({exc.strerror}).",
                    hint="choose a folder you can write to.",
                ) from exc
            self._temporary = Path(name)  # an interrupt from here on is cleaned up by close()
        os.close(handle)
        fourcc = cv2.VideoWriter_fourcc(*VIDEO_CODECS[self.path.suffix.lower()])
        writer = cv2.VideoWriter(name, cv2.CAP_FFMPEG, fourcc, self.fps, size)
        if not writer.isOpened():
            self._temporary.unlink(missing_ok=True)
            raise OutputError(
                f"--draw '{shown(self.path)}' | OpenCV's FFmpeg backend cannot write this video.",
                hint="try .avi (MJPG) or .mp4.",
            )
        self._writer, self._size = writer, size

    def close(self) -> None:
        """Finalise the container and move it into place; nothing is left when no frame was written."""
        writer, self._writer = self._writer, None
        temporary, self._temporary = self._temporary, None
        if writer is not None:
            writer.release()
        if temporary is None:
            return
        if writer is None or self.frames == 0:  # interrupted while opening, or before the first frame
            temporary.unlink(missing_ok=True)
            return
        try:
            os.chmod(temporary, plain_write_mode(self.path))  # mkstemp made it 0600: the mode open() would give
            os.replace(temporary, self.path)
        except OSError as exc:
            raise ResourceError(
                f"--draw '{shown(self.path)}' | cannot be written ({exc.strerror or exc}); the video "
                f"so far is in '{temporary}'.",
                hint="choose another path.",
            ) from exc

    def __enter__(self) -> VideoWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def write_image(path: Path, image: np.ndarray) -> None:
    """One image file, written whole (a temporary beside it, renamed)."""
    from deploykit.io import atomic_path

    cv2 = _cv2()
    ok, encoded = cv2.imencode(path.suffix or ".jpg", image)
    if not ok:
        raise UsageError(f"--draw '{shown(path)}' | OpenCV cannot encode that format.", hint="use .jpg or .png.")
    with atomic_path(path) as temporary:
        temporary.write_bytes(encoded.tobytes())


def make_folder(path: Path) -> None:
    """The folder drawn images go into, created with its parents."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"--draw '{shown(path)}' | cannot create the folder ({exc.strerror or exc}).",
            hint="choose a folder you can write to.",
        ) from exc
