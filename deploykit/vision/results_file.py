"""A JSON-lines file of per-frame results that a stopped run resumes: ``predict -o FILE.jsonl``.

The first line is a header naming the run that writes the file (deploykit's format, the model's SHA-256,
task, backend, settings and sources); every other line is one frame (``FrameResult.to_dict()``). A line
is appended by one unbuffered write, so a run ended by Ctrl-C, SIGTERM, a crash or a full disk leaves
whole lines and at most one torn last line.

Opening a file that exists resumes it: a torn last line is cut off, and the frames already there are
handed to the stream, which passes over them. A file deploykit did not write, or wrote for another
model, settings or sources, is refused and left as it is: it is never overwritten. Resuming is
automatic, as ``predict -o FOLDER`` resumes its rows: the command that was stopped, typed again,
carries on where it stopped. This module writes; it must not know about models.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deploykit.errors import OutputError, ResourceError, UsageError
from deploykit.io import FULL_ERRNOS, shown

FORMAT = 1
"""The header's ``format``: a later layout of the lines gets a new number, and an old file is refused."""
HEADER = "deploykit"
KIND = "predict"


class ResultsFile:
    """Per-frame JSON lines appended to ``path`` for the run ``run`` (a JSON-able mapping that says which
    model, settings and sources make the lines). ``open()`` reads what a stopped run left; ``write()``
    appends one frame; ``close()`` ends it.

    Attributes:
        path: the file.
        done: per source (as given), the names of the frames already in the file.
        resumed: how many frames were already in the file.
        frames: how many frames the file holds now.
    """

    def __init__(self, path: Path, run: Mapping[str, Any], option: str = "--output") -> None:
        self.path = Path(path)
        self.run = json.loads(json.dumps(dict(run), default=str))  # as it reads back from the file
        self.option = option
        self.done: dict[str, set[str]] = {}
        self.resumed = 0
        self.frames = 0
        self._handle: int | None = None
        self._has_header = False

    def _subject(self) -> str:
        return f"{self.option} '{shown(self.path)}'"

    def open(self) -> ResultsFile:
        """Read the file a stopped run left (if any), cut off its torn last line, and get ready to append.

        Raises:
            UsageError: the file was not written by ``deploykit predict``, or for another run.
            OutputError: the file cannot be read or cut back.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return self
        except OSError as exc:
            raise OutputError(
                f"{self._subject()} | exists but cannot be read ({exc.strerror or exc}), so it cannot be resumed.",
                hint="check its permissions, or choose another file.",
            ) from exc
        whole = data.rfind(b"\n") + 1  # past the last complete line; what follows was torn by a stop
        if whole == 0 and data and not data.startswith(b'{"%s": "%s"' % (HEADER.encode(), KIND.encode())):
            raise self._foreign("its first line is not a deploykit header")
        lines = data[:whole].splitlines()
        if lines:
            self._check_header(lines[0])
            self._read_frames(lines[1:])
        if whole < len(data):
            self._cut(whole)
        return self

    def _check_header(self, line: bytes) -> None:
        try:
            header = json.loads(line)
        except ValueError:
            header = None
        if not isinstance(header, dict) or header.get(HEADER) != KIND:
            raise self._foreign("its first line is not a deploykit header")
        if header.get("format") != FORMAT:
            raise self._foreign(f"its header says format {header.get('format')!r}, and this deploykit reads {FORMAT}")
        recorded: dict[str, Any] = header["run"] if isinstance(header.get("run"), dict) else {}
        differ = sorted(k for k in set(self.run) | set(recorded) if recorded.get(k) != self.run.get(k))
        if differ:
            shown_keys = "; ".join(f"{k}: {recorded.get(k)!r} there, {self.run.get(k)!r} now" for k in differ[:3])
            raise UsageError(
                f"{self._subject()} | holds the results of another run ({shown_keys}); a resume appends only to "
                "lines the same model, settings and sources made, and this file is left as it is.",
                hint="write to a new file, or run the command that made this file to resume it.",
            )
        self._has_header = True

    def _read_frames(self, lines: list[bytes]) -> None:
        for number, line in enumerate(lines, start=2):
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if not isinstance(row, dict) or not isinstance(row.get("source"), str) or "name" not in row:
                raise self._foreign(f"its line {number} is not a frame's results")
            self.done.setdefault(row["source"], set()).add(str(row["name"]))
            self.resumed += 1
        self.frames = self.resumed

    def _foreign(self, why: str) -> UsageError:
        return UsageError(
            f"{self._subject()} | exists and was not written by deploykit predict ({why}); it is left as it is, "
            "never overwritten.",
            hint="choose another file, or move this one away first.",
        )

    def _cut(self, size: int) -> None:
        try:
            os.truncate(self.path, size)
        except OSError as exc:
            raise OutputError(
                f"{self._subject()} | its torn last line cannot be cut off ({exc.strerror or exc}).",
                hint="check its permissions, or choose another file.",
            ) from exc

    def write(self, row: Mapping[str, Any]) -> None:
        """Append one frame's line (the header first, on a new file), whole or not at all.

        Raises:
            OutputError: the file cannot be opened for writing.
            ResourceError: a write failed (the disk is full); the lines before stay whole.
        """
        text = json.dumps(row) + "\n"
        if not self._has_header:
            text = json.dumps({HEADER: KIND, "format": FORMAT, "run": self.run}) + "\n" + text
        data = text.encode("utf-8")
        if self._handle is None:
            try:
                self._handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            except OSError as exc:
                raise OutputError(
                    f"{self._subject()} | cannot be opened for writing ({exc.strerror or exc}).",
                    hint="choose a file you can write to.",
                ) from exc
        before = os.fstat(self._handle).st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(self._handle, data[written:])
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._handle, before)  # half a line is never left behind
            why = "the disk is full" if exc.errno in FULL_ERRNOS else "it cannot be written"
            raise ResourceError(
                f"{self._subject()} | {why} ({exc.strerror or exc}): the {self.frames} frames before are kept "
                "whole, and the rest was not written.",
                hint="free some space (or fix the cause), then run the same command again: it resumes after them.",
            ) from exc
        self._has_header = True
        self.frames += 1

    def close(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            os.close(handle)

    def __enter__(self) -> ResultsFile:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()
