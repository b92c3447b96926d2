"""Where batch inference reads its images and writes its rows: a local folder or any URI pyarrow opens.

Rows are JSON lines in ``part-*.jsonl`` files inside the output folder. Each run adds new part files
and never rewrites old ones, so re-running with the same output skips every path already there
(resumable). Part files are written line by line rather than atomically on purpose: a job killed
after an hour keeps the hour's rows; a torn last line is ignored when the folder is read back.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import secrets
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from deploykit.errors import InputError, ResourceError, UsageError
from deploykit.io import FULL_ERRNOS, atomic_path, full_disk_error

PART_GLOB = "part-*.jsonl"
_URI = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")


def is_uri(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names a remote store (``s3://``, ``gs://`` ...) rather than a local path."""
    return bool(_URI.match(str(location))) and not str(location).startswith("file://")


def _filesystem(uri: str) -> tuple[Any, str]:
    try:
        from pyarrow import fs
    except ImportError as exc:
        raise ResourceError(
            f"'{uri}' | a URI needs pyarrow to be read or written.", hint="pip install 'deploykit[ray]'."
        ) from exc
    try:
        return fs.FileSystem.from_uri(uri)
    except Exception as exc:  # pyarrow raises ArrowInvalid, OSError ... for unknown schemes and credentials
        raise UsageError(f"'{uri}' | pyarrow cannot open it: {exc}", hint="check the scheme and credentials.") from exc


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0] + "://"


def list_sources(source: str | os.PathLike[str], suffixes: tuple[str, ...] | None = None) -> list[str]:
    """The input files of ``source`` (a file, a folder, or a folder URI), sorted.

    Args:
        suffixes: the file suffixes that are inputs; default image files.

    Raises:
        InputError: the source does not exist or holds no input file.
    """
    from deploykit.vision.image import IMAGE_SUFFIXES

    suffixes = suffixes or IMAGE_SUFFIXES
    text = str(source)
    if is_uri(text):
        from pyarrow import fs

        filesystem, root = _filesystem(text)
        infos = filesystem.get_file_info(fs.FileSelector(root, recursive=True, allow_not_found=True))
        found = sorted(_scheme(text) + i.path for i in infos if i.is_file and i.path.lower().endswith(suffixes))
    else:
        path = Path(text.removeprefix("file://")).resolve()
        if not path.exists():
            raise InputError(f"inputs '{source}' | no such file or folder.", hint="check the path.")
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in suffixes) if path.is_dir() else [path]
        found = [str(p) for p in files]
    if not found:
        raise InputError(
            f"inputs '{source}' | holds no input file ({', '.join(suffixes)}).",
            hint="point at a folder of images (or of .npy/.npz files with --task tensor).",
        )
    return found


def read_bytes(path: str) -> bytes:
    """The bytes of one source file (local path or URI)."""
    if is_uri(path):
        filesystem, inner = _filesystem(path)
        with filesystem.open_input_stream(inner) as stream:
            return bytes(stream.read())
    return Path(path).read_bytes()


class ResultStore:
    """The output folder of a batch-inference job.

    Args:
        out: a local folder (created if needed) or a folder URI.
        rows_per_part: start a new part file after this many rows, so a remote store (where a file
            appears only when closed) loses at most one part when a job is killed.
    """

    def __init__(self, out: str | os.PathLike[str], rows_per_part: int = 10_000) -> None:
        self.location = str(out)
        self.rows_per_part = rows_per_part
        self._run_text: str | None = None
        # Nothing is created here: a run that fails before its first row leaves no folder behind.
        if is_uri(self.location):
            self._fs, self._root = _filesystem(self.location)
        else:
            self._fs, self._root = None, str(Path(self.location.removeprefix("file://")))
            root = Path(self._root)
            if root.exists() and not root.is_dir():
                raise UsageError(
                    f"--output '{out}' | is a file, expected a folder for the result parts.",
                    hint="name a folder, e.g. --output results/.",
                )

    def part_files(self) -> list[str]:
        if self._fs is None:
            root = Path(self._root)
            return sorted(str(p) for p in root.glob(PART_GLOB)) if root.is_dir() else []
        from pyarrow import fs

        infos = self._fs.get_file_info(fs.FileSelector(self._root, allow_not_found=True))
        return sorted(i.path for i in infos if i.is_file and re.fullmatch(r"part-.*\.jsonl", i.base_name))

    def _lines(self, part: str) -> Iterator[str]:
        if self._fs is None:
            with open(part, encoding="utf-8") as handle:
                yield from handle
        else:
            with self._fs.open_input_stream(part) as stream:
                yield from bytes(stream.read()).decode("utf-8").splitlines()

    def rows(self) -> Iterator[dict[str, Any]]:
        """Every complete row in the folder (a torn last line of a killed job is skipped)."""
        for part in self.part_files():
            for line in self._lines(part):
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and "path" in row:
                    yield row

    RUN_FILE = "run.json"

    def _read_text(self, name: str) -> str | None:
        if self._fs is None:
            path = Path(self._root) / name
            return path.read_text(encoding="utf-8") if path.is_file() else None
        from pyarrow import fs

        target = f"{self._root}/{name}"
        if self._fs.get_file_info(target).type != fs.FileType.File:
            return None
        with self._fs.open_input_stream(target) as stream:
            return bytes(stream.read()).decode("utf-8")

    def _write_text(self, name: str, text: str) -> None:
        if self._fs is None:
            root = Path(self._root)
            made = not root.exists()
            root.mkdir(parents=True, exist_ok=True)
            try:
                with atomic_path(root / name) as temporary:  # all or nothing, a full disk named for the file
                    temporary.write_text(text, encoding="utf-8")
            except BaseException:
                if made:  # the folder this write made holds nothing: it goes too ("nothing was left there")
                    with contextlib.suppress(OSError):
                        root.rmdir()
                raise
            return
        self._fs.create_dir(self._root, recursive=True)
        with self._fs.open_output_stream(f"{self._root}/{name}") as stream:
            stream.write(text.encode("utf-8"))

    def claim(self, run: dict[str, Any]) -> None:
        """Make this folder the rows of ``run`` (model SHA-256, task, backend, settings), or refuse.

        A folder that already holds rows resumes only the same run: rows another model or other
        settings made are never kept as this run's. The key is written just before the first row,
        so a run that fails before it leaves no folder behind.

        Raises:
            UsageError: the folder holds rows of another run, or rows with no record of their run.
        """
        text = self._read_text(self.RUN_FILE)
        if text is None:
            if self.part_files():
                raise UsageError(
                    f"--output '{self.location}' | holds result rows but no {self.RUN_FILE} saying which model and "
                    "settings made them, so they cannot be resumed as this run's.",
                    hint="write into a new folder, or delete the old rows first.",
                )
            self._run_text = json.dumps(run, indent=2, sort_keys=True, default=str)  # written with the first row
            return
        try:
            recorded = json.loads(text)
        except ValueError:
            recorded = {}
        differ = sorted(
            k for k in set(run) | set(recorded) if recorded.get(k) != json.loads(json.dumps(run.get(k), default=str))
        )
        if differ:
            shown = "; ".join(f"{k}: {recorded.get(k)!r} there, {run.get(k)!r} now" for k in differ[:3])
            raise UsageError(
                f"--output '{self.location}' | holds the rows of another run ({shown}); a resume keeps only rows "
                "made by the same model and settings.",
                hint="write into a new folder, or run with the model and settings that made these rows.",
            )

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold this folder for one run: a second run on the same local folder at the same time is
        refused (it would write every row twice). The lock is ``io.output_lock``'s, the one every output
        of every command takes: nothing is created in the folder before the first row."""
        if self._fs is not None:  # a remote store has no lock to take: one writer is the user's promise
            yield
            return
        from deploykit.io import output_lock

        with output_lock(self._root, f"--output '{self.location}'", kind="folder"):
            yield

    def done_paths(self) -> set[str]:
        """Paths that already have a row (ok or error): a re-run skips them."""
        return {row["path"] for row in self.rows()}

    def _open_part(self, index: int) -> IO[bytes]:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
        # the same process may write to one folder twice within a second (a library caller resuming): a token
        name = f"part-{stamp}-{os.getpid()}-{secrets.token_hex(3)}-{index:05d}.jsonl"
        if self._fs is None:
            Path(self._root).mkdir(parents=True, exist_ok=True)
            return open(Path(self._root) / name, "xb", buffering=0)  # unbuffered: a failed write leaves no tail
        self._fs.create_dir(self._root, recursive=True)
        stream: IO[bytes] = self._fs.open_output_stream(f"{self._root}/{name}")
        return stream

    @staticmethod
    def _cut_back(handle: Any, size: int) -> None:
        name = handle.name
        try:
            handle.truncate(size)
        except OSError:
            pass
        try:
            handle.close()
        except OSError:  # the flush of what did not fit fails again: the truncation already dropped it
            pass
        if size == 0:
            Path(name).unlink(missing_ok=True)

    def write_rows(self, batches: Iterable[list[dict[str, Any]]]) -> Iterator[int]:
        """Append batches of rows to new part files; yield the running row count after each batch."""
        written, handle, index, in_part = 0, None, 0, 0
        try:
            for rows in batches:
                if not rows:
                    continue
                if handle is None or in_part >= self.rows_per_part:
                    if handle is not None:
                        handle.close()
                    if self._run_text is not None:
                        self._write_text(self.RUN_FILE, self._run_text)
                        self._run_text = None
                    handle, index, in_part = self._open_part(index), index + 1, 0
                complete = handle.tell() if self._fs is None else None
                try:
                    data = memoryview("".join(json.dumps(row) + "\n" for row in rows).encode("utf-8"))
                    while data:  # an unbuffered write may take part of it; the rest then fails or follows
                        data = data[handle.write(data) or 0 :]
                    handle.flush()
                except OSError as exc:
                    # out of room mid-batch: cut the part back to its last whole row (the rows before it
                    # stay, so the same command resumes), and say so for the folder
                    if complete is None or exc.errno not in FULL_ERRNOS:
                        raise
                    self._cut_back(handle, complete)
                    handle = None
                    error = full_disk_error([Path(self._root)], exc)
                    raise ResourceError(
                        error.message.replace(
                            "nothing was left there", f"the {written} whole rows written before are kept (no torn row)"
                        ),
                        hint="free some space, then run the same command again: it resumes after those rows.",
                    ) from exc
                written, in_part = written + len(rows), in_part + len(rows)
                yield written
        finally:
            if handle is not None:
                handle.close()
