"""Safe file output: validated before the work, written atomically, never onto an input.

Every command that writes files goes through this module:

- ``check_outputs`` validates every output path *before* any work (directory exists and
  is writable, the path is not a directory, a device or a read-only file, no two outputs
  are the same file, and no output resolves, after symlinks and hard links, to a file the
  command reads).
- ``atomic_path`` / ``atomic_outputs`` write to temporary files beside the targets and
  rename them into place only when everything succeeded: a failed or interrupted run
  leaves no half-written file and never clobbers a good one. Written files get the mode
  a plain ``open(path, "w")`` would give them (the umask for new files, the old mode
  for replaced ones).
- ``scratch_dir`` is a temporary directory beside an output for multi-file work.
- ``claim_output`` / ``output_lock`` hold an output for one run: a second process writing the
  same output at the same time is refused by name (two runs onto one file would both exit 0,
  each believing the file is its own). ``check_outputs`` claims every output it checks; the
  claim lasts until the enclosing ``output_scope`` ends (the CLI opens one per command, and
  the library's writers are decorated with one).

Temporary files and directories are removed on an exception, on SIGINT, and also on
SIGTERM and SIGHUP (whose default action would otherwise kill the process before any
``finally`` runs): while one exists, a handler removes them and then lets the signal do
what it would have done.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import shutil
import signal
import stat
import tempfile
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from deploykit.errors import OutputError, ResourceError
from deploykit.signals import DeferredSignals

PathLike = str | os.PathLike[str]
TEMPORARY_PREFIX = ".deploykit-"
_CLEANUP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))

_SHOWN_PATH_CHARACTERS = 160

# Text from files (metadata values, node names, labels, paths) may hold control characters: a raw
# ESC could retitle, clear or recolour the user's terminal, a CR or newline inside a one-line field
# could forge a line of output. Each is shown as its visible picture (ESC → ␛, LF → ␊, C1 controls
# → �), one character for one, so a styled span keeps its length.
CONTROL_PICTURES = {code: chr(0x2400 + code) for code in range(0x20)}
CONTROL_PICTURES.update({0x7F: "\u2421", **{code: "\ufffd" for code in range(0x80, 0xA0)}})


def one_line(text: object, limit: int | None = _SHOWN_PATH_CHARACTERS) -> str:
    """A one-line field as the terminal or a Markdown report shows it: every control character
    (newline, CR and tab too) as its visible picture, and, past ``limit`` characters, its start and
    end around an ellipsis (a pasted blob never fills the terminal). ``limit=None`` keeps it whole."""
    value = str(text).translate(CONTROL_PICTURES)
    if limit is None or len(value) <= limit:
        return value
    half = limit // 2
    return f"{value[:half]}…({len(value)} characters)…{value[-half:]}"


def shown(path: PathLike) -> str:
    """A path as a message shows it: on one line (control characters as pictures), whole when short,
    else its start and end around an ellipsis (a path over PATH_MAX, or a pasted blob)."""
    return one_line(os.fspath(path))


def regular_file_problem(path: PathLike) -> str | None:
    """None when ``path`` is a regular file (after symlinks); otherwise what it is, in words.

    Special files are refused by what they are, before anyone opens them: a FIFO would block the
    reader until a writer comes, ``/dev/zero`` never ends, a socket cannot be read as a file. A regular
    file this process may not open is refused by that, before a reader (or a worker) meets it.
    """
    if os.fspath(path) == "":
        return "is an empty path"
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except NotADirectoryError:
        return "a part of the path is a file, not a folder (a '/' after a file name?)"
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return "the path is too long for this system"
        if exc.errno == errno.EACCES:
            return f"{UNREADABLE}: a folder on its path may not be entered"
        return (exc.strerror or str(exc)).lower()
    if stat.S_ISREG(mode):
        return _open_problem(path)
    kinds = (
        (stat.S_ISDIR, "is a directory"),
        (stat.S_ISFIFO, "is a named pipe (FIFO): reading it would wait for a writer"),
        (stat.S_ISCHR, "is a character device, not a file"),
        (stat.S_ISBLK, "is a block device, not a file"),
        (stat.S_ISSOCK, "is a socket, not a file"),
    )
    return next((what for test, what in kinds if test(mode)), "is not a regular file")


#: How a file this process may not read is described (``regular_file_problem``).
UNREADABLE = "cannot be read by this user (permission denied; see its mode and owner with ls -l)"


def _open_problem(path: PathLike) -> str | None:
    """None when the regular file ``path`` opens for reading; otherwise why not, in words."""
    try:
        with open(path, "rb"):
            return None
    except PermissionError:
        return UNREADABLE
    except OSError as exc:
        return f"cannot be opened ({(exc.strerror or str(exc)).lower()})"


def special_file_problem(path: PathLike) -> str | None:
    """What ``path`` is when it exists but is no regular file (a FIFO, a device, a socket, a folder), in
    words; None for a regular file and for a missing one (its reader says "no such file" its own way)."""
    problem = regular_file_problem(path)
    return None if problem == "no such file" else problem


class _HeldLock:
    """One output held by this process: its lock file, what releases the lock, how many claims share it."""

    def __init__(self, lock_file: Path, release: contextlib.ExitStack) -> None:
        self.lock_file = lock_file
        self.release = release
        self.count = 0


_held_locks: dict[str, _HeldLock] = {}
_held_guard = threading.Lock()
_scopes = threading.local()


def _lock_path(path: PathLike) -> Path:
    """The lock file of an output: in the temporary directory, keyed by the output's resolved path,
    so nothing is ever created beside the output (or inside an output folder) to hold it."""
    import hashlib

    key = hashlib.sha256(os.path.realpath(os.fspath(path)).encode(errors="surrogateescape")).hexdigest()[:24]
    return Path(tempfile.gettempdir()) / f"deploykit-out-{key}.lock"


def _holder(lock_file: Path) -> str:
    with contextlib.suppress(OSError, ValueError), open(lock_file) as handle:
        pid = handle.read(32).strip()
        if pid.isdigit():
            return f"another deploykit run (process {pid})"
    return "another deploykit run"


@contextlib.contextmanager
def file_lock(path: PathLike, *, wait: bool = True) -> Iterator[IO[str]]:
    """Hold an exclusive ``fcntl.flock`` on the file ``path`` while the block runs: deploykit's one
    lock between processes (cache entries, converter environments, emulated targets, outputs).

    The file and its folder are created when missing, and the file is left in place (a process
    waiting on it would otherwise lock a file the next one no longer opens). The kernel drops the
    lock with the process whatever way it ends, so a killed holder leaves no stale lock.

    Args:
        path: the lock file.
        wait: wait until the lock is free; False raises ``BlockingIOError`` at once when another
            process holds it.

    Yields:
        The locked file, open for reading and appending (a holder may write its name into it).

    Raises:
        BlockingIOError: ``wait=False`` and another process holds the lock.
        OSError: the file or its folder cannot be created or opened.
    """
    import fcntl

    lock_file = Path(path)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield handle
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def output_lock(path: PathLike, subject: str | None = None, *, kind: str = "file") -> Iterator[None]:
    """Hold ``path`` as this process's output while the block runs; re-entrant within the process.

    The lock is a ``file_lock`` on a file in the temporary directory keyed by the resolved path,
    so it ends with the process whatever way it ends (no stale lock after SIGKILL). Its file holds
    the holder's process id, to name it, and is removed on release (a waiter that opened it before
    then finds it gone once it has the lock, and takes the new one).

    Raises:
        ResourceError: another process holds ``path`` now (naming the path and that process), or the
            lock file cannot be made.
    """
    target = os.path.realpath(os.fspath(path))
    with _held_guard:
        held = _held_locks.get(target)
        if held is None:
            held = _held_locks[target] = _take_output_lock(path, subject, kind)
        held.count += 1
    try:
        yield
    finally:
        with _held_guard:
            held.count -= 1
            if held.count == 0:
                del _held_locks[target]
                with contextlib.suppress(OSError):  # removed while still locked: no lock file outlives its run
                    os.unlink(held.lock_file)
                held.release.close()


def _take_output_lock(path: PathLike, subject: str | None, kind: str) -> _HeldLock:
    lock_file = _lock_path(path)
    while True:
        release = contextlib.ExitStack()  # held past output_lock's block, closed by its last release
        try:
            handle = release.enter_context(file_lock(lock_file, wait=False))
        except BlockingIOError as exc:
            raise ResourceError(
                f"{subject or _describe('', Path(path))} | {_holder(lock_file)} is writing this {kind} now; two "
                f"runs onto one output at once would each report it as theirs.",
                hint=f"wait for the other run to finish, or choose another output {kind}.",
            ) from exc
        except OSError as exc:
            raise ResourceError(
                f"{subject or _describe('', Path(path))} | cannot take its lock file '{lock_file}' "
                f"({exc.strerror or exc}); without it two runs could write it at once.",
                hint="make the temporary directory writable (or set TMPDIR to one that is).",
            ) from exc
        if _still_the_lock_file(handle, lock_file):
            break
        release.close()  # its last holder removed it between our open and our lock: take the new one
    with contextlib.suppress(OSError):  # the pid only names the holder; a full /tmp loses the name
        handle.truncate(0)
        handle.write(f"{os.getpid()}\n")
        handle.flush()
    return _HeldLock(lock_file, release)


def _still_the_lock_file(handle: Any, path: Path) -> bool:
    """Whether the locked ``handle`` is still the file at ``path`` (a releasing holder unlinks it)."""
    try:
        return os.path.samestat(os.fstat(handle.fileno()), os.stat(path))
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def output_scope() -> Iterator[None]:
    """While the block runs, outputs claimed by ``check_outputs`` / ``claim_output`` stay locked; they
    are released when it ends. Usable as a decorator: ``@output_scope()`` on a function that writes."""
    stack = contextlib.ExitStack()
    scopes = _scopes.__dict__.setdefault("stack", [])
    scopes.append(stack)
    try:
        with stack:
            yield
    finally:
        scopes.remove(stack)


def claim_output(path: PathLike, subject: str | None = None, *, kind: str = "file") -> None:
    """Claim ``path`` for this run until the enclosing ``output_scope`` ends. Outside any scope the
    claim is only a check (refused when another process holds it now), since nothing would end it.

    Raises:
        ResourceError: another process is writing ``path`` now.
    """
    scopes = getattr(_scopes, "stack", None)
    if scopes:
        scopes[-1].enter_context(output_lock(path, subject, kind=kind))
    else:
        with output_lock(path, subject, kind=kind):
            pass


def file_and_json(output: PathLike, suffix: str) -> tuple[Path, Path]:
    """An export's two outputs from one ``-o``: ``out/model`` or ``out/model{suffix}`` → (``out/model{suffix}``,
    ``out/model.json``) (``export mnn``: ``.mnn``; ``export litert``: ``.tflite``).

    Raises:
        OutputError: the name ends in ``.json`` or ``.onnx``, or has no file name.
    """
    path = Path(output)
    if path.suffix.lower() in (".json", ".onnx"):
        raise OutputError(
            f"-o/--output '{path}' | names a {path.suffix} file; the export writes a {suffix} and a .json "
            "with one name.",
            hint=f"give the {suffix} file (-o {path.with_suffix(suffix)}).",
        )
    stem = path.with_suffix("") if path.suffix.lower() == suffix else path
    if not stem.name or stem.name.startswith("."):
        raise OutputError(
            f"-o/--output '{path}' | has no file name to put before {suffix}/.json.",
            hint=f"e.g. -o out/model{suffix} writes out/model{suffix} and out/model.json.",
        )
    return Path(str(stem) + suffix), Path(str(stem) + ".json")


def file_sha256(path: PathLike) -> str:
    """The SHA-256 of a file's bytes (``hash_file``)."""
    import hashlib

    digest = hashlib.sha256()
    hash_file(digest, path)
    return digest.hexdigest()


def hash_file(digest: Any, path: PathLike) -> None:
    """Add a file's bytes to a running ``hashlib`` digest, read in 64 MiB blocks (each read and
    update releases the GIL, and each block costs one wait for it when another thread is busy: few
    blocks, few waits; a bundle hashes its model while the runtime loads it)."""
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(64 << 20), b""):
            digest.update(block)


_live_paths: set[Path] = set()
_live_lock = threading.Lock()
_installed: set[int] = set()


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        elif path.exists() or path.is_symlink():
            path.unlink()


def _on_signal(signum: int, frame: Any) -> None:
    """Remove every live temporary path, then die of the signal as the default action would."""
    with _live_lock:
        paths = list(_live_paths)
        _live_paths.clear()
    for path in paths:
        _remove(path)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _register(path: Path) -> None:
    with _live_lock:
        first = not _live_paths
        _live_paths.add(path)
    # Handlers can only be installed from the main thread; elsewhere cleanup relies on finally.
    # Only default dispositions are replaced: an ignored SIGHUP (nohup) or a caller's own
    # handler means the process goes on, so its files must stay.
    if first and threading.current_thread() is threading.main_thread():
        for signum in _CLEANUP_SIGNALS:
            if signal.getsignal(signum) is signal.SIG_DFL:
                signal.signal(signum, _on_signal)
                _installed.add(signum)


def _unregister(path: Path) -> None:
    with _live_lock:
        _live_paths.discard(path)
        last = not _live_paths
    if last and threading.current_thread() is threading.main_thread():
        for signum in list(_installed):
            if signal.getsignal(signum) is _on_signal:
                signal.signal(signum, signal.SIG_DFL)
            _installed.discard(signum)


def _umask() -> int:
    # os.umask can only be read by setting it; set it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def plain_write_mode(target: Path) -> int:
    """The mode ``open(target, 'w')`` would leave: the existing file's, else 0666 minus the umask."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _max_name_bytes(directory: Path) -> int:
    # Temporary names add a prefix and suffix, so the target's own name must leave room for them.
    try:
        limit = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    return limit - len(TEMPORARY_PREFIX) - 16


def _same_file(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b) and os.path.lexists(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _describe(label: str, path: Path) -> str:
    return f"{label} '{shown(path)}'" if label else f"output '{shown(path)}'"


def _check_one(label: str, path: Path) -> None:
    subject = _describe(label, path)
    try:
        _check_path(subject, path)
    except OSError as exc:  # a name too long, a loop of symlinks ...: the OS's reason, as a message
        raise OutputError(
            f"{subject} | cannot be used as an output ({exc.strerror or exc}).",
            hint="choose a shorter, plain path in a directory you can write to.",
        ) from exc


def _check_path(subject: str, path: Path) -> None:
    if str(path) in ("-", ""):
        raise OutputError(
            f"{subject} | is not a file name; deploykit writes outputs to files, not to standard output.",
            hint="name the file to write, e.g. out.json (to write one literally named '-', pass ./-).",
        )
    parent = Path(os.path.realpath(path)).parent
    if path.is_dir():
        raise OutputError(
            f"{subject} | is a directory, expected a file path.",
            hint="name the file to write, e.g. out/model.onnx.",
        )
    if not parent.is_dir():
        raise OutputError(
            f"{subject} | directory '{parent}' does not exist.",
            hint=f"create it first (mkdir -p {parent}) or choose another output path.",
        )
    if path.exists():
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise OutputError(
                f"{subject} | exists and is not a regular file (a device, pipe or socket); "
                "deploykit replaces outputs, it would not write into it.",
                hint="choose a path for a new or ordinary file.",
            )
        if not os.access(path, os.W_OK):
            raise OutputError(
                f"{subject} | exists and is read-only; deploykit does not replace protected files.",
                hint=f"make it writable (chmod u+w {path}), delete it, or choose another output path.",
            )
    if len(path.name.encode()) > _max_name_bytes(parent):
        raise OutputError(
            f"{subject} | the file name is longer than {_max_name_bytes(parent)} bytes; the temporary file "
            "written beside it first would pass the filesystem's limit.",
            hint="choose a shorter file name.",
        )
    try:
        handle, probe = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, suffix=".probe", dir=parent)
    except OSError as exc:
        raise OutputError(
            f"{subject} | directory '{parent}' is not writable ({exc.strerror or exc}).",
            hint="choose an output path in a directory you can write to.",
        ) from exc
    os.close(handle)
    os.unlink(probe)


def check_outputs(
    outputs: Mapping[str, PathLike | None],
    *,
    inputs: Mapping[str, PathLike | None] | Iterable[PathLike | None] = (),
) -> None:
    """Validate every output path of a command before it does any work.

    Args:
        outputs: option name (e.g. ``"--output"``) → path to write; ``None`` values are skipped.
        inputs: the files the command reads (option name → path, or just paths); an output
            that is the same file as one of them (after symlinks and hard links) is refused.

    Raises:
        OutputError: naming the option, the path and what is wrong with it.
    """
    named_inputs = dict(inputs) if isinstance(inputs, Mapping) else {f"input {i}": v for i, v in enumerate(inputs)}
    input_paths = [(label, Path(p)) for label, p in named_inputs.items() if p is not None]
    seen: list[tuple[str, Path]] = []
    for label, value in outputs.items():
        if value is None:
            continue
        path = Path(value)
        subject = _describe(label, path)
        for input_label, input_path in input_paths:
            if _same_file(path, input_path):
                reads = "" if input_label.startswith("input ") else f" ({input_label})"
                raise OutputError(
                    f"{subject} | is the file this command reads{reads}; writing it would destroy the input.",
                    hint="choose another output path.",
                )
        for other_label, other in seen:
            if os.path.realpath(path) == os.path.realpath(other) or _same_file(path, other):
                raise OutputError(
                    f"{subject} | is also the path of {_describe(other_label, other)}.",
                    hint="give each output its own path.",
                )
        _check_one(label, path)
        claim_output(path, subject)
        seen.append((label, path))


def check_onnx_output(path: PathLike | None, label: str = "output") -> None:
    """Refuse a converter output whose name does not end in ``.onnx``, before any work.

    What a converter writes is ONNX whatever the name says, and the name decides how it is
    read back: OpenCV takes ``x.cfg`` for a Darknet model, other tools guess from ``.weights``
    or ``.txt``. So the name must say ONNX (any case: ``.ONNX`` is accepted).

    Raises:
        OutputError: naming the path and the expected name.
    """
    if path is None:
        return
    target = Path(path)
    if target.suffix.lower() == ".onnx" and target.stem:
        return
    stem = target.stem if target.stem and not target.name.startswith(".") else "model"
    raise OutputError(
        f"{_describe(label, target)} | is not an .onnx file name, expected NAME.onnx.",
        hint=f"the converter writes ONNX whatever the name says; name it so, e.g. {target.with_name(stem + '.onnx')}.",
    )


def check_output_dir(path: PathLike) -> None:
    """Refuse an output that cannot be written (see ``check_outputs``), before any work is done."""
    check_outputs({"output": path})


def check_report_folder(
    directory: PathLike, files: Iterable[str], *, inputs: Iterable[PathLike] = (), subject: str = "--report"
) -> None:
    """Refuse a report folder that cannot be written, before the work: a file, a path under a file,
    a folder where no file can be created, or report ``files`` that cannot be replaced or are
    ``inputs`` (``check_outputs``, file by file, once the folder exists). The folder is claimed.

    Raises:
        OutputError: the folder cannot take the report; the message says why.
    """
    folder = Path(directory)
    hint = f"pass a folder you can write to (it is created if missing), e.g. {subject} out/."
    if folder.exists() and not folder.is_dir():
        raise OutputError(
            f"{subject} '{folder}' | is a file, expected a folder to write the report files into.", hint=hint
        )
    claim_output(folder, f"{subject} '{folder}'", kind="folder")  # a second run onto it is refused
    if folder.is_dir():
        check_outputs({f"{subject} {name}": folder / name for name in files}, inputs=[Path(p) for p in inputs])
        return
    existing = folder.absolute()  # made when the report is written: its nearest existing parent must take it
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise OutputError(
            f"{subject} '{folder}' | '{existing}' is a file, so no folder can be made under it.", hint=hint
        )
    try:  # os.access is not enough: read-only mounts, immutable folders, root
        handle, probe = tempfile.mkstemp(prefix=".deploykit-probe-", dir=existing)
    except OSError as exc:
        raise OutputError(
            f"{subject} '{folder}' | no file can be created in '{existing}' ({exc.strerror or exc}).", hint=hint
        ) from exc
    os.close(handle)
    os.unlink(probe)


@contextlib.contextmanager
def report_folder(directory: PathLike, subject: str = "--report") -> Iterator[Path]:
    """The report folder, made (with its parents) if missing, for the block to write its files into.

    All or nothing for the folder too: a folder this call made is removed again when the block
    leaves it empty (an exception, a failed check that wrote nothing, SIGINT/SIGTERM/SIGHUP before
    the files are in place); a folder that existed is left as it was.

    Raises:
        OutputError: the folder cannot be made.
    """
    folder = Path(directory)
    if folder.is_dir():
        yield folder
        return
    made = [folder, *(p for p in folder.absolute().parents if not p.exists())]  # the folder, then its new parents
    try:
        folder.mkdir(parents=True)
    except OSError as exc:
        raise OutputError(
            f"{subject} '{folder}' | cannot be created ({exc.strerror or exc}).",
            hint=f"pass a folder you can write to, e.g. {subject} out/.",
        ) from exc
    _register(made[-1])
    try:
        yield folder
    finally:
        _unregister(made[-1])
        for path in made:  # only while empty: the block wrote nothing
            try:
                path.rmdir()
            except OSError:
                break


def _temporary_beside(target: Path) -> Path:
    try:
        handle, name = tempfile.mkstemp(prefix=f"{TEMPORARY_PREFIX}{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OutputError(
            f"output '{target}' | cannot create a file in '{target.parent}' ({exc.strerror or exc}).",
            hint="choose an output path in an existing directory you can write to.",
        ) from exc
    os.close(handle)
    return Path(name)


@contextlib.contextmanager
def atomic_outputs(paths: Iterable[PathLike]) -> Iterator[list[Path]]:
    """Yield one temporary path per target; when the block succeeds, move all of them into place.

    All or nothing: on an exception (or SIGINT/SIGTERM/SIGHUP) every temporary file is
    removed and no target is touched. Each target gets the mode a plain write would give it.

    Raises:
        OutputError: a target's directory is missing or not writable.
        ResourceError: the final write failed (the disk is full, a file-size limit).
    """
    targets = [Path(p) for p in paths]
    with output_scope():  # held until the files are in place, for a caller without a scope of its own
        for target in targets:
            check_output_dir(target)
        with _temporaries_for(targets) as temporaries:
            yield temporaries


@contextlib.contextmanager
def _temporaries_for(targets: list[Path]) -> Iterator[list[Path]]:
    temporaries: list[Path] = []
    try:
        for target in targets:
            with DeferredSignals():  # a signal between the file's creation and its recording would leave it
                temporary = _temporary_beside(target)
                _register(temporary)
                temporaries.append(temporary)
        try:
            yield temporaries
            commit(zip(temporaries, targets, strict=True))
        except OSError as exc:
            if exc.errno in _FULL:
                raise full_disk_error(targets, exc) from exc
            raise
    finally:
        for temporary in temporaries:
            _remove(temporary)
            _unregister(temporary)


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
FULL_ERRNOS = _FULL  # a write that ran out of room: the disk, a quota, or a file-size limit (ulimit -f)


def full_disk_error(targets: Iterable[PathLike], exc: OSError) -> ResourceError:
    """A write that ran out of room, as an error naming the output, its folder and the space left
    (nothing of it is left behind: the temporary files are removed by the writer)."""
    paths = [Path(t) for t in targets]
    folder = paths[0].parent if paths else Path(".")
    try:
        free = shutil.disk_usage(folder).free
        room = f"{free / 2**20:.1f} MiB free" if free >= 2**20 else f"{free} bytes free"
    except OSError:
        room = "free space unknown"
    names = ", ".join(shown(p) for p in paths) or shown(folder)
    why = "the file is over the size limit" if exc.errno == errno.EFBIG else "the disk is full"
    return ResourceError(
        f"output {names} | could not be written: {why} ({exc.strerror}; {room} in '{shown(folder)}'); "
        "nothing was left there.",
        hint="free some space or write to another disk, then run the command again.",
    )


def written(text: str, path: PathLike | None) -> str:
    """``text``, also written atomically to ``path`` when one is given: the ``to_json(path=None)``
    pattern of reports, which return their text and save it only when asked."""
    if path is not None:
        with atomic_path(path) as temporary:
            temporary.write_text(text)
    return text


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it over ``path``.

    On an exception the temporary file is removed and ``path`` is left untouched.
    """
    with atomic_outputs([path]) as (temporary,):
        yield temporary


@contextlib.contextmanager
def scratch_dir(beside: PathLike) -> Iterator[Path]:
    """A temporary directory in the directory of output ``beside`` (so renames out of it are atomic).

    Removed on exit, on an exception and on SIGINT/SIGTERM/SIGHUP.
    """
    with output_scope():  # the output is this run's while its working files exist
        claim_output(beside)
        with _scratch_beside(beside) as directory:
            yield directory


class LeftoverWarning(UserWarning):
    """A working folder that an interrupted run (SIGKILL, a power cut) left beside an output was removed."""


def _scratch_prefix(beside: PathLike) -> str:
    # Named after its output, so that the next run onto the same output, holding its lock, knows that
    # any folder of this name is a leftover and no live run's.
    return f"{TEMPORARY_PREFIX}{Path(beside).name[:100]}.work-"


def _remove_leftovers(parent: Path, prefix: str, beside: PathLike) -> None:
    """Remove the working folders an earlier, killed run onto the same output left, and say so. Called with
    the output's lock held (``claim_output``): no live run onto this output can own them."""
    with _live_lock:
        ours = set(_live_paths)  # a working folder of this very run (optimize's search, then its bundle)
    with contextlib.suppress(OSError):
        for leftover in parent.glob(f"{glob.escape(prefix)}*"):
            # mkdtemp's own part has no dot: a longer name is another output's (a run onto 'deploy.work-a')
            if "." in leftover.name[len(prefix) :] or leftover in ours:
                continue
            if leftover.is_dir() and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
                warnings.warn(
                    f"removed '{shown(leftover)}', the partial working folder of an earlier run onto "
                    f"'{shown(beside)}' that was killed before it could clean up.",
                    LeftoverWarning,
                    stacklevel=4,
                )


@contextlib.contextmanager
def _scratch_beside(beside: PathLike) -> Iterator[Path]:
    parent = Path(os.path.realpath(beside)).parent
    prefix = _scratch_prefix(beside)
    _remove_leftovers(parent, prefix, beside)
    try:
        directory = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as exc:
        raise OutputError(
            f"output '{beside}' | cannot create a working directory in '{parent}' ({exc.strerror or exc}).",
            hint="choose an output path in an existing directory you can write to.",
        ) from exc
    _register(directory)
    try:
        yield directory
    except OSError as exc:  # a converter's working files ran out of room: say so for the output, not the file
        if exc.errno in _FULL:
            raise full_disk_error([beside], exc) from exc
        raise
    finally:
        _remove(directory)
        _unregister(directory)


def commit(moves: Iterable[tuple[PathLike, PathLike]]) -> None:
    """Move finished files (temporary → target, same filesystem) into place, with plain-write modes.

    Raises:
        ResourceError: a move failed (the targets moved before it stay moved).
    """
    for source, target in moves:
        source_path, target_path = Path(source), Path(target)
        try:
            os.chmod(source_path, plain_write_mode(target_path))
            os.replace(source_path, target_path)
        except OSError as exc:
            raise ResourceError(
                f"output '{target_path}' | cannot be written ({exc.strerror or exc}).",
                hint="check free space and permissions of the output directory.",
            ) from exc


def commit_outputs(
    moves: Iterable[tuple[PathLike, PathLike]], texts: Mapping[PathLike | None, str] | None = None
) -> None:
    """Move finished files into place and write small text outputs (reports), all or nothing.

    The texts go to temporary files beside their targets first, so that once the work is
    done only renames remain; ``None`` keys are skipped.
    """
    written = [(Path(path), text) for path, text in (texts or {}).items() if path is not None]
    with atomic_outputs([path for path, _ in written]) as temporaries:
        for temporary, (_, text) in zip(temporaries, written, strict=True):
            temporary.write_text(text)
        commit(moves)
