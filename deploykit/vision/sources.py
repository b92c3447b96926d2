"""Where frames come from: image files, globs, folders, video files, cameras and stream or image URLs.

``open_sources`` turns what a user typed into ``Source`` objects without ever passing a URL through
``Path`` (which would fold ``rtsp://`` into ``rtsp:/``). A source yields ``Frame`` values with an index
and a timestamp. Files never drop a frame; a live source (camera, stream URL) is read by its own thread
that keeps only the latest frame, so a slow consumer sees fresh frames, and every frame it replaced is
counted in ``dropped``.

Decoding is OpenCV's: its FFmpeg backend reads every container FFmpeg reads (mp4, avi, mkv, webm) and
RTSP/HTTP with open and read timeouts, its V4L2 backend reads cameras, and the frames arrive as the BGR
arrays the pipelines take, with no second decoder to install or keep in step. Multipart MJPEG over
HTTP (what IP cameras and test servers send) is parsed here, so its timeouts are plain socket timeouts.
This module decodes; it must not know about models.
"""

from __future__ import annotations

import glob
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from deploykit.errors import InputError
from deploykit.io import shown
from deploykit.vision.image import IMAGE_SUFFIXES, _cv2, check_image_files, decode_image, list_images, load_image

VIDEO_SUFFIXES = (".mp4", ".avi", ".mkv", ".webm", ".mov", ".m4v", ".mpg", ".mpeg", ".ts", ".wmv", ".flv")
STREAM_SCHEMES = ("rtsp://", "rtsps://", "rtmp://", "http://", "https://", "udp://", "tcp://")
DEFAULT_TIMEOUT_S = 10.0
"""How long a URL or camera may take to open or to deliver its next frame."""
TRUNCATION_SLACK = 0.02
"""A video file that yields fewer frames than its header says, by more than this share (or one frame), is damaged."""


@dataclass(frozen=True)
class Frame:
    """One image of a source.

    Attributes:
        image: HWC uint8 BGR.
        index: position in its source, from 0 (every frame decoded counts, also those skipped or dropped).
        timestamp_s: position in a video file (its presentation time), or seconds since a live source opened;
            0 for image files.
        source: the source as it was given.
        name: the image file's name, or ``frame-000123`` for a frame of a video or stream.
    """

    image: np.ndarray
    index: int
    timestamp_s: float
    source: str
    name: str


class Source:
    """A sequence of frames. ``frames()`` yields them once; ``close()`` releases the device or file."""

    kind: ClassVar[str] = "source"
    live: ClassVar[bool] = False

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.dropped = 0
        self.fps: float | None = None
        self.size: tuple[int, int] | None = None  # (width, height) where the container says it

    def frames(self, skip: Container[str] = frozenset()) -> Iterator[Frame]:
        """Every frame once, in order; those named in ``skip`` (what a resumed output already holds) are passed
        over without decoding where the source allows, and not yielded. A live source ignores ``skip``."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the source holds; safe to call twice and from another thread."""

    def describe(self) -> str:
        return f"{self.kind} '{shown(self.spec)}'"


class ImageFiles(Source):
    """Image files (one, several, a glob's or a folder's), read in order; never drops."""

    kind = "images"

    def __init__(self, spec: str, files: Sequence[Path]) -> None:
        super().__init__(spec)
        self.files = list(files)

    def frames(self, skip: Container[str] = frozenset()) -> Iterator[Frame]:
        for index, file in enumerate(self.files):
            if file.name not in skip:
                yield Frame(load_image(file), index, 0.0, self.spec, file.name)


class ImageURL(Source):
    """One image fetched over HTTP(S)."""

    kind = "image URL"

    def __init__(self, spec: str, data: bytes) -> None:
        super().__init__(spec)
        self.data = data

    def frames(self, skip: Container[str] = frozenset()) -> Iterator[Frame]:
        name = self.spec.rstrip("/").rsplit("/", 1)[-1].split("?")[0] or "image"
        if name not in skip:
            yield Frame(decode_image(self.data, name), 0, 0.0, self.spec, name)


def _silence_opencv() -> Any:
    cv2 = _cv2()
    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")  # FFmpeg's own lines on stderr would outlive the error
    try:
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
    except AttributeError:
        pass
    return cv2


class VideoFile(Source):
    """A video file decoded by OpenCV's FFmpeg backend; never drops. A file that ends before the frame count
    its header gives is damaged: the frames before the damage are yielded, then an ``InputError`` says so.
    ``path`` may be an http(s) URL of a video file (a server's answer with a length): read the same way,
    with ``timeout_s`` for opening and for each read."""

    kind = "video"

    def __init__(self, spec: str, path: Path | str, timeout_s: float | None = None) -> None:
        super().__init__(spec)
        cv2 = _silence_opencv()
        self.path = path
        if timeout_s is None:
            self._capture = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
        else:
            milliseconds = int(timeout_s * 1000)
            params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, milliseconds, cv2.CAP_PROP_READ_TIMEOUT_MSEC, milliseconds]
            self._capture = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG, params)
        if not self._capture.isOpened():
            self._capture.release()
            raise InputError(
                f"video '{shown(path)}' | OpenCV's FFmpeg backend cannot open it: the file is damaged, truncated "
                "(an mp4 cut short loses its index), or not a video.",
                hint="play it with another player to check it; re-encode it with ffmpeg -i IN -c:v libx264 OUT.mp4.",
            )
        self.fps = float(self._capture.get(cv2.CAP_PROP_FPS)) or None
        self.size = (
            int(self._capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
            int(self._capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        )
        count = int(self._capture.get(cv2.CAP_PROP_FRAME_COUNT))
        self.frame_count = count if count > 0 else None

    def frames(self, skip: Container[str] = frozenset()) -> Iterator[Frame]:
        cv2 = _cv2()
        index = 0
        while True:
            if f"frame-{index:06d}" in skip:  # demuxed and decoded, but not converted: seeking is not frame-exact
                if not self._capture.grab():
                    break
                index += 1
                continue
            ok, image = self._capture.read()
            if not ok or image is None:
                break
            timestamp = float(self._capture.get(cv2.CAP_PROP_POS_MSEC)) / 1e3
            if timestamp <= 0 and self.fps:
                timestamp = index / self.fps
            yield Frame(image, index, timestamp, self.spec, f"frame-{index:06d}")
            index += 1
        self._check_complete(index)

    def _check_complete(self, decoded: int) -> None:
        expected = self.frame_count
        if expected is None or decoded >= expected - max(1.0, expected * TRUNCATION_SLACK):
            return
        raise InputError(
            f"video '{shown(self.path)}' | decoding stopped at frame {decoded} of the {expected} its header gives: "
            f"the file is damaged or truncated; the {decoded} frames before the damage were processed.",
            hint="copy or download the video again; ffmpeg -i IN -c copy OUT.mp4 may salvage what is left.",
        )

    def close(self) -> None:
        self._capture.release()


class _LatestFrame:
    """A one-slot mailbox between a live source's reader thread and its consumer: a new frame replaces an
    unread one (counted as dropped), so the consumer always gets the freshest."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self.frame: Frame | None = None
        self.error: BaseException | None = None
        self.ended = False
        self.dropped = 0

    def put(self, frame: Frame) -> None:
        with self.condition:
            if self.frame is not None:
                self.dropped += 1
            self.frame = frame
            self.condition.notify()

    def finish(self, error: BaseException | None = None) -> None:
        with self.condition:
            self.ended, self.error = True, error
            self.condition.notify()

    def take(self, timeout_s: float) -> Frame | None:
        """The latest frame; None once the reader has ended and nothing is left. Raises TimeoutError."""
        with self.condition:
            if not self.condition.wait_for(lambda: self.frame is not None or self.ended, timeout_s):
                raise TimeoutError
            frame, self.frame = self.frame, None
            return frame


class LiveSource(Source):
    """A camera or stream read by its own thread, latest frame wins. A stream that ends (or stops sending
    for ``timeout_s``) mid-run is an ``InputError`` after the frames received were yielded."""

    live = True

    def __init__(self, spec: str, timeout_s: float) -> None:
        super().__init__(spec)
        self.timeout_s = timeout_s
        self._stop = threading.Event()
        self._mailbox = _LatestFrame()
        self._reader: threading.Thread | None = None

    def _read(self) -> Iterator[np.ndarray]:
        """The source's frames as fast as it sends them; returns when it ends."""
        raise NotImplementedError

    def _pump(self) -> None:
        start = time.monotonic()
        index = 0
        try:
            for image in self._read():
                if self._stop.is_set():
                    break
                self._mailbox.put(Frame(image, index, time.monotonic() - start, self.spec, f"frame-{index:06d}"))
                index += 1
        except BaseException as exc:  # handed to the consumer's thread, which raises it
            self._mailbox.finish(exc)
            return
        self._mailbox.finish()

    def frames(self, skip: Container[str] = frozenset()) -> Iterator[Frame]:
        self._reader = threading.Thread(target=self._pump, name=f"deploykit-{self.kind}-reader", daemon=True)
        self._reader.start()
        received = 0
        while True:
            try:
                frame = self._mailbox.take(self.timeout_s)
            except TimeoutError:
                raise self._ended(received, f"sent no frame for {self.timeout_s:g} s") from None
            self.dropped = self._mailbox.dropped
            if frame is None:
                break
            received += 1
            yield frame
        if self._mailbox.error is not None:
            error = self._mailbox.error
            if isinstance(error, InputError):
                raise error
            if isinstance(error, TimeoutError):  # the reader's own wait ran out first: the same stall
                raise self._ended(received, f"sent no frame for {self.timeout_s:g} s") from None
            raise self._ended(received, f"failed: {error}") from error
        if not self._stop.is_set():
            raise self._ended(received, "ended")

    def _ended(self, received: int, how: str) -> InputError:
        return InputError(
            f"{self.describe()} | {how} after {received} frames; the frames received were processed.",
            hint="check the camera or the server; pass --max-frames to stop before a stream ends.",
        )

    def close(self) -> None:
        self._stop.set()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(self.timeout_s)


class CaptureSource(LiveSource):
    """A camera (V4L2) or a stream URL (FFmpeg: RTSP, HTTP video) read through ``cv2.VideoCapture``."""

    def __init__(self, spec: str, target: int | str, timeout_s: float, kind: str) -> None:
        super().__init__(spec, timeout_s)
        self.kind = kind  # type: ignore[misc]
        cv2 = _silence_opencv()
        milliseconds = int(timeout_s * 1000)
        params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, milliseconds, cv2.CAP_PROP_READ_TIMEOUT_MSEC, milliseconds]
        api = cv2.CAP_V4L2 if kind == "camera" else cv2.CAP_FFMPEG
        self._capture = cv2.VideoCapture(target, api, params) if kind != "camera" else cv2.VideoCapture(target, api)
        if not self._capture.isOpened():
            self._capture.release()
            raise self._cannot_open()
        self.fps = float(self._capture.get(cv2.CAP_PROP_FPS)) or None
        if self.fps is not None and not 0 < self.fps <= 1000:
            self.fps = None
        self.size = (
            int(self._capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
            int(self._capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        )

    def _cannot_open(self) -> InputError:
        if self.kind == "camera":
            return InputError(
                f"camera '{self.spec}' | does not exist or is busy (OpenCV's V4L2 backend cannot open it).",
                hint="list cameras with 'v4l2-ctl --list-devices' (or ls /dev/video*); close other programs using it.",
            )
        return InputError(
            f"stream '{self.spec}' | did not open within {self.timeout_s:g} s (no answer, refused, or not a "
            "video stream OpenCV's FFmpeg backend reads).",
            hint="check the URL, that the server runs and is reachable; for RTSP try the camera's own player.",
        )

    def _read(self) -> Iterator[np.ndarray]:
        while not self._stop.is_set():
            began = time.monotonic()
            ok, image = self._capture.read()
            if not ok or image is None:
                if time.monotonic() - began >= 0.9 * self.timeout_s:  # FFmpeg's read timeout, not the stream's end
                    raise TimeoutError
                return
            yield image

    def close(self) -> None:
        super().close()
        self._capture.release()


class MJPEGStream(LiveSource):
    """Multipart JPEG over HTTP (``multipart/x-mixed-replace``), parsed from the response as it arrives."""

    kind = "stream"

    def __init__(self, spec: str, response: Any, boundary: bytes, timeout_s: float) -> None:
        super().__init__(spec, timeout_s)
        self._response = response
        self._boundary = b"--" + boundary.lstrip(b"-")

    def _read(self) -> Iterator[np.ndarray]:
        buffer = b""
        while not self._stop.is_set():
            try:
                chunk = self._response.read1(65536)
            except TimeoutError:
                if self._stop.is_set():
                    return
                raise
            except (OSError, ValueError):  # a reset, or the response closed by close()
                return
            if not chunk:
                return
            buffer += chunk
            while True:
                start = buffer.find(b"\xff\xd8")
                end = buffer.find(b"\xff\xd9", start + 2) if start >= 0 else -1
                if start < 0 or end < 0:
                    break
                data, buffer = buffer[start : end + 2], buffer[end + 2 :]
                yield decode_image(data, self.spec)
            if len(buffer) > 64 * 2**20:
                raise InputError(
                    f"stream '{self.spec}' | sent 64 MiB without a complete JPEG.",
                    hint="check that the URL serves MJPEG.",
                )

    def close(self) -> None:
        self._stop.set()
        try:
            self._response.close()
        except OSError:
            pass
        super().close()


def _open_http(spec: str, timeout_s: float) -> Source:
    """An image URL, an MJPEG stream, or (any other answer that is a video) a stream for FFmpeg."""
    request = urllib.request.Request(spec, headers={"User-Agent": "deploykit"})
    try:
        response = urllib.request.urlopen(request, timeout=timeout_s)
    except urllib.error.HTTPError as exc:
        raise InputError(f"URL '{spec}' | answered HTTP {exc.code} {exc.reason}.", hint="check the URL.") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        # a refused connection or an unknown host is an answer at once: only a silence is a timeout
        problem = f"did not answer within {timeout_s:g} s" if isinstance(reason, TimeoutError) else "cannot be reached"
        raise InputError(
            f"URL '{spec}' | {problem} ({reason}).",
            hint="check the URL, that the server runs and is reachable from here.",
        ) from exc
    content_type = response.headers.get_content_type()
    if content_type.startswith("image/"):
        with response:
            return ImageURL(spec, response.read())
    if content_type == "multipart/x-mixed-replace":
        boundary = response.headers.get_param("boundary") or "--"
        return MJPEGStream(spec, response, str(boundary).encode(), timeout_s)
    length = response.headers.get("Content-Length")
    response.close()
    if length is not None and content_type.startswith(("video/", "application/octet")):
        # an answer of known length is a video file served over HTTP, not a live feed: it is read whole,
        # never drops a frame, and its end is not a fault (a camera's HTTP video is sent without a length)
        return VideoFile(spec, spec, timeout_s)
    if content_type.startswith(("video/", "application/vnd.apple", "application/x-mpegurl", "application/octet")):
        return CaptureSource(spec, spec, timeout_s, "stream")
    raise InputError(
        f"URL '{spec}' | answered {content_type}, not an image or a video stream.",
        hint="pass the URL of an image, an MJPEG stream or a video (a camera's stream URL, not its web page).",
    )


def _is_camera(spec: str) -> bool:
    return spec.isdigit() or (spec.startswith("/dev/video") and spec[len("/dev/video") :].isdigit())


def _camera(spec: str, timeout_s: float) -> Source:
    if not spec.isdigit() and not os.path.exists(spec):
        raise InputError(f"camera '{spec}' | no such device.", hint="list cameras with ls /dev/video*.")
    target: int | str = int(spec) if spec.isdigit() else spec
    return CaptureSource(spec, target, timeout_s, "camera")


def _files(spec: str) -> list[Source]:
    """A file, a folder or a glob (a path is never a URL here)."""
    path = Path(spec)
    if path.is_dir():
        images = list_images(path, screen=False)  # open_sources screens the images of every source at once
        videos = sorted(p for p in path.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES and p.is_file())
        if not images and not videos:
            raise InputError(
                f"folder '{shown(path)}' | holds no images or videos.",
                hint=f"image files end in {', '.join(IMAGE_SUFFIXES)}.",
            )
        opened: list[Source] = [ImageFiles(spec, images)] if images else []
        return opened + [VideoFile(str(v), v) for v in videos]
    if path.exists():
        if path.suffix.lower() in VIDEO_SUFFIXES:
            return [VideoFile(spec, path)]
        return [ImageFiles(spec, [path])]
    if glob.has_magic(spec):
        matches = sorted(Path(p) for p in glob.glob(spec, recursive=True))
        files = [p for p in matches if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES + VIDEO_SUFFIXES]
        if not files:
            raise InputError(
                f"glob '{spec}' | matches no image or video files.",
                hint="quote the pattern so the shell leaves it to deploykit: 'photos/*.jpg'.",
            )
        found: list[Source] = [VideoFile(str(p), p) for p in files if p.suffix.lower() in VIDEO_SUFFIXES]
        images = [p for p in files if p.suffix.lower() in IMAGE_SUFFIXES]
        return ([ImageFiles(spec, images)] if images else []) + found
    raise InputError(
        f"source '{shown(path)}' | no such file, folder or camera.",
        hint="pass image or video files, a folder, a quoted glob, a camera index (0), or an rtsp:// or http(s):// URL.",
    )


def open_source(spec: str | os.PathLike[str] | int, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Source]:
    """What one source argument names, opened: a list, since a folder or a glob may hold videos too.

    Raises:
        InputError: a missing file, an unreadable video, a camera that does not exist or is busy, a URL
            that does not answer within ``timeout_s`` or answers something that is not an image or video.
    """
    if isinstance(spec, int):
        return [_camera(str(spec), timeout_s)]
    text = os.fspath(spec)
    lowered = text.lower()
    if lowered.startswith(("http://", "https://")):
        return [_open_http(text, timeout_s)]
    if lowered.startswith(STREAM_SCHEMES):
        return [CaptureSource(text, text, timeout_s, "stream")]
    if "://" in text:
        raise InputError(
            f"source '{text}' | uses a scheme deploykit does not read.",
            hint=f"use one of {', '.join(s[:-3] for s in STREAM_SCHEMES)}.",
        )
    if _is_camera(text):
        return [_camera(text, timeout_s)]
    return _files(text)


def open_sources(
    specs: Sequence[str | os.PathLike[str] | int], *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> list[Source]:
    """Every source of ``specs``, in order; what was opened is closed again when a later one fails.

    Raises:
        InputError: as ``open_source``; and image files that are no whole image, every one named
            (``check_image_files``) before any frame is read.
    """
    opened: list[Source] = []
    try:
        for spec in specs:
            opened.extend(open_source(spec, timeout_s=timeout_s))
        images = [source for source in opened if isinstance(source, ImageFiles)]
        folder = Path(images[0].spec) if len(images) == 1 and Path(images[0].spec).is_dir() else None
        check_image_files([file for source in images for file in source.files], folder)
    except BaseException:
        for source in opened:
            source.close()
        raise
    return opened
