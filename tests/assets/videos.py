"""Videos and streams made in the test from shipped photos: a pan/zoom clip written with OpenCV's own
encoder (what users have), and a loopback HTTP MJPEG server that sends such frames.

Nothing here downloads; every server binds 127.0.0.1 and stops with its context.
"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import cv2
import numpy as np

FOURCCS = {".mp4": "mp4v", ".avi": "MJPG", ".mkv": "mp4v"}


def pan_zoom_frames(photo: np.ndarray, count: int, size: tuple[int, int] = (1280, 720)) -> list[np.ndarray]:
    """``count`` frames of ``size`` (width, height): a window over the photo that zooms in while it pans."""
    height, width = photo.shape[:2]
    frames = []
    for index in range(count):
        progress = index / max(count - 1, 1)
        zoom = 1.0 - 0.3 * progress  # the window shrinks to 70 % of the photo
        window_w, window_h = int(width * zoom), int(height * zoom)
        left = int((width - window_w) * progress)
        top = int((height - window_h) * 0.5 * progress)
        crop = photo[top : top + window_h, left : left + window_w]
        frames.append(cv2.resize(crop, size, interpolation=cv2.INTER_LINEAR))
    return frames


def write_video(path: Path, frames: Sequence[np.ndarray], fps: float = 30.0) -> Path:
    """``frames`` written with cv2.VideoWriter, the codec chosen by the extension (mp4v for .mp4)."""
    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*FOURCCS[path.suffix]), fps, (width, height))
    assert writer.isOpened(), f"OpenCV cannot write {path.suffix} here"
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path


def read_video(path: Path) -> list[np.ndarray]:
    capture = cv2.VideoCapture(str(path), cv2.CAP_FFMPEG)
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames


def _handler(jpegs: Sequence[bytes], fps: float, content_type: str, after: str, stop: threading.Event,
             ) -> type[http.server.BaseHTTPRequestHandler]:  # fmt: skip
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            if content_type != "multipart/x-mixed-replace":
                body = jpegs[0] if content_type.startswith("image/") else b"<html>a camera's web page</html>"
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
            self.end_headers()
            for jpeg in jpegs:
                part = b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: %d\r\n\r\n%s\r\n" % (len(jpeg), jpeg)
                try:
                    self.wfile.write(part)
                    self.wfile.flush()
                except OSError:  # the client went away: the stream stops
                    return
                time.sleep(1 / fps)
            if after == "stall":  # the connection stays open and silent, as a camera that hangs
                stop.wait()

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def _file_handler(data: bytes, content_type: str) -> type[http.server.BaseHTTPRequestHandler]:
    """A video file as web servers send one: with its length, and byte ranges (FFmpeg seeks to an mp4's index)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            start, end = 0, len(data) - 1
            asked = self.headers.get("Range", "")
            if asked.startswith("bytes="):
                first, _, last = asked[6:].split(",")[0].partition("-")
                start, end = int(first or 0), min(int(last) if last else end, end)
            self.send_response(206 if asked else 200)
            self.send_header("Content-Type", content_type)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Length", str(end - start + 1))
            if asked:
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            self.end_headers()
            try:
                self.wfile.write(data[start : end + 1])
            except OSError:  # the client seeked elsewhere and closed this answer
                pass

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@contextlib.contextmanager
def _serving(handler: type[http.server.BaseHTTPRequestHandler], path: str) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{path}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def http_server(frames: Sequence[np.ndarray], *, fps: float = 30.0, content_type: str = "multipart/x-mixed-replace",
                after: str = "end") -> Iterator[str]:  # fmt: skip
    """A loopback HTTP server for the test's lifetime; yields its URL. It sends ``frames`` as an MJPEG
    stream (then ends it, or with ``after="stall"`` keeps the connection open and silent), or the first
    frame as one image, or an HTML page, by ``content_type``."""
    jpegs = [cv2.imencode(".jpg", f)[1].tobytes() for f in frames]
    stop = threading.Event()
    try:
        with _serving(_handler(jpegs, fps, content_type, after, stop), "stream") as url:
            yield url
    finally:
        stop.set()


@contextlib.contextmanager
def http_file_server(path: Path, content_type: str) -> Iterator[str]:
    """A loopback web server of one video file (with its length and byte ranges); yields the file's URL."""
    with _serving(_file_handler(path.read_bytes(), content_type), path.name) as url:
        yield url


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections and never answers: a stream URL that hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
