"""A loopback RTSP server that sends frames as an IP camera does: Motion JPEG over RTP (RFC 2435), the
RTP packets interleaved on the RTSP connection (RTP/AVP/TCP, RFC 2326 §10.12).

Written here because nothing installable serves RTSP to a player: ffmpeg's ``-rtsp_flags listen`` receives
a stream pushed to it (ANNOUNCE/RECORD), it does not answer DESCRIBE/PLAY, and mediamtx is a Go binary on no
registry this project uses. A client that asks for UDP first (FFmpeg does) is answered 461, and takes TCP.
The frames are JPEG-encoded by OpenCV (baseline, 4:2:0, the standard Huffman tables RFC 2435 assumes);
each is split into RTP packets whose payload header carries the quantisation tables. After the frames, the
server ends the session (closes the connection) or stalls (keeps it open and sends nothing), by ``after``.
Everything binds 127.0.0.1 and stops with its context.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator, Sequence

import cv2
import numpy as np

PAYLOAD_TYPE = 26  # JPEG, RFC 3551
CLOCK_HZ = 90_000
CHUNK = 8_000  # JPEG bytes per RTP packet (interleaved TCP carries up to 65535)


def _jpeg_parts(jpeg: bytes) -> tuple[bytes, bytes]:
    """The two 8-bit quantisation tables (luma, chroma; zigzag order as in DQT) and the entropy-coded scan."""
    tables: dict[int, bytes] = {}
    position = 2
    while True:
        marker, length = jpeg[position + 1], struct.unpack(">H", jpeg[position + 2 : position + 4])[0]
        segment = jpeg[position + 4 : position + 2 + length]
        if marker == 0xDB:  # DQT: one or more tables of 1 + 64 bytes
            for offset in range(0, len(segment), 65):
                assert segment[offset] >> 4 == 0, "8-bit tables only"
                tables[segment[offset] & 0x0F] = segment[offset + 1 : offset + 65]
        elif marker == 0xC0:  # SOF0: baseline; the luma sampling must be 2x2 (4:2:0, RTP/JPEG type 1)
            assert segment[7] == 0x22, f"4:2:0 sampling expected, got {segment[7]:#x}"
        elif marker in (0xC1, 0xC2, 0xDD):
            raise AssertionError(f"marker {marker:#x}: not a baseline JPEG without restart markers")
        elif marker == 0xDA:  # SOS: the scan runs to the EOI marker, which the receiver writes itself
            scan = jpeg[position + 2 + length :]
            return tables[0] + tables[1], scan[: scan.rfind(b"\xff\xd9")]
        position += 2 + length


def rtp_packets(jpeg: bytes, width: int, height: int, sequence: int, timestamp: int) -> list[bytes]:
    """One JPEG frame as RTP packets (RFC 2435: type 1, Q 255 with in-band tables in the first packet)."""
    tables, scan = _jpeg_parts(jpeg)
    packets = []
    for offset in range(0, len(scan), CHUNK):
        last = offset + CHUNK >= len(scan)
        header = struct.pack(">BBHII", 0x80, (0x80 if last else 0) | PAYLOAD_TYPE, (sequence + len(packets)) & 0xFFFF,
                             timestamp & 0xFFFFFFFF, 0x5EED)  # fmt: skip
        jpeg_header = struct.pack(">I", offset)[1:]  # type-specific 0, then the 24-bit fragment offset
        jpeg_header = b"\x00" + jpeg_header + bytes([1, 255, width // 8, height // 8])
        if offset == 0:
            jpeg_header += struct.pack(">BBH", 0, 0, len(tables)) + tables
        packets.append(header + jpeg_header + scan[offset : offset + CHUNK])
    return packets


class _Session(threading.Thread):
    """One client: answers its RTSP requests and, once it plays, sends the frames."""

    def __init__(self, connection: socket.socket, jpegs: Sequence[bytes], size: tuple[int, int], fps: float,
                 after: str, closing: threading.Event) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.connection, self.jpegs, self.size, self.fps, self.after = connection, jpegs, size, fps, after
        self.closing = closing
        self.send_lock = threading.Lock()
        self.sender: threading.Thread | None = None

    def run(self) -> None:
        buffer = b""
        try:
            while not self.closing.is_set():
                chunk = self.connection.recv(65536)
                if not chunk:
                    return
                buffer += chunk
                buffer = self._handle(buffer)
        except OSError:
            return
        finally:
            if self.sender is None or self.after == "end":
                with contextlib.suppress(OSError):
                    self.connection.close()

    def _handle(self, buffer: bytes) -> bytes:
        while buffer:
            if buffer[:1] == b"$":  # the client's RTCP reports, interleaved: skipped
                if len(buffer) < 4 or len(buffer) < 4 + struct.unpack(">H", buffer[2:4])[0]:
                    return buffer
                buffer = buffer[4 + struct.unpack(">H", buffer[2:4])[0] :]
                continue
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return buffer
            head, buffer = buffer[:end].decode("latin-1"), buffer[end + 4 :]
            lines = head.split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
            buffer = buffer[int(headers.get("content-length", 0)) :]
            self._answer(lines[0].split(" ")[0], lines[0].split(" ")[1], headers)
        return buffer

    def _answer(self, method: str, url: str, headers: dict[str, str]) -> None:
        sequence = headers.get("cseq", "0")
        if method == "DESCRIBE":
            width, height = self.size
            sdp = ("v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=deploykit test camera\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                   f"m=video 0 RTP/AVP {PAYLOAD_TYPE}\r\na=control:track0\r\na=framerate:{self.fps:g}\r\n"
                   f"a=x-dimensions:{width},{height}\r\n")  # fmt: skip
            self._reply(sequence, f"Content-Base: {url.rstrip('/')}/\r\nContent-Type: application/sdp\r\n", sdp)
        elif method == "SETUP" and "TCP" not in headers.get("transport", ""):
            self._reply(sequence, "", status="461 Unsupported Transport")
        elif method == "SETUP":
            self._reply(sequence, "Transport: RTP/AVP/TCP;unicast;interleaved=0-1\r\nSession: 5EED\r\n")
        elif method == "PLAY":
            self._reply(sequence, "Session: 5EED\r\nRange: npt=0.000-\r\n")
            if self.sender is None:
                self.sender = threading.Thread(target=self._send_frames, daemon=True)
                self.sender.start()
        elif method == "TEARDOWN":
            self._reply(sequence, "Session: 5EED\r\n")
            self.closing.set()
        else:  # OPTIONS, GET_PARAMETER (keep-alive)
            self._reply(sequence, "Public: OPTIONS, DESCRIBE, SETUP, PLAY, TEARDOWN, GET_PARAMETER\r\n")

    def _reply(self, sequence: str, headers: str, body: str = "", status: str = "200 OK") -> None:
        length = f"Content-Length: {len(body)}\r\n" if body else ""
        self._send(f"RTSP/1.0 {status}\r\nCSeq: {sequence}\r\n{headers}{length}\r\n{body}".encode("latin-1"))

    def _send(self, data: bytes) -> None:
        with self.send_lock:
            self.connection.sendall(data)

    def _send_frames(self) -> None:
        width, height = self.size
        sequence = 0
        try:
            for index, jpeg in enumerate(self.jpegs):
                if self.closing.is_set():
                    return
                for packet in rtp_packets(jpeg, width, height, sequence, int(index * CLOCK_HZ / self.fps)):
                    self._send(b"$\x00" + struct.pack(">H", len(packet)) + packet)
                    sequence += 1
                time.sleep(1 / self.fps)
        except OSError:  # the client went away
            return
        if self.after == "end":
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        # "stall": the connection stays open and silent until the server stops


@contextlib.contextmanager
def rtsp_server(frames: Sequence[np.ndarray], *, fps: float = 25.0, after: str = "end") -> Iterator[str]:
    """An RTSP camera on 127.0.0.1 for the block's lifetime; yields its URL. It sends ``frames`` (all of
    one size, sides multiples of 8 up to 2040) to each client that plays, then ``after``: ``end`` closes
    the connection, ``stall`` keeps it open and silent."""
    height, width = frames[0].shape[:2]
    assert width % 8 == 0 and height % 8 == 0 and max(width, height) <= 2040, "RTP/JPEG sizes are multiples of 8"
    jpegs = [cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes() for frame in frames]
    listener = socket.create_server(("127.0.0.1", 0))
    closing = threading.Event()
    sessions: list[_Session] = []

    def accept() -> None:
        while not closing.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            session = _Session(connection, jpegs, (width, height), fps, after, closing)
            sessions.append(session)
            session.start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"rtsp://127.0.0.1:{listener.getsockname()[1]}/camera"
    finally:
        closing.set()
        listener.close()
        for session in sessions:
            with contextlib.suppress(OSError):
                session.connection.close()
