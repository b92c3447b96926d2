"""The one exception tree of deploykit.

Every error a user can cause is a ``DeployKitError``; third-party exceptions are
translated at the boundary where they happen (``raise ... from exc``) and never
leak raw to the CLI. A message names the subject, the problem, what was
expected, and ends with a hint::

    input 'images' | got shape (1, 3, 640, 640), expected (1, 3, 416, 416).
    Hint: pass --input-shape or resize first.

The tree::

    DeployKitError                 base of everything deploykit raises on purpose
    ├── UsageError                 an option or argument value that cannot be used (the CLI exits 2)
    │   └── OutputError            an output path cannot be written, or is a file the command reads
    ├── ResourceError              the machine lacks what a sound command needs, or another process holds it:
    │                              disk space, a free port, an output another run is writing, process slots,
    │                              a backend or precision to run anything asked for
    ├── ModelError                 a model file cannot be used
    │   ├── ModelNotFoundError     the path does not exist, is a directory, or this user may not read it
    │   ├── InvalidModelError      the file is not a readable, valid ONNX model
    │   │   └── MetadataError      a deploykit.* metadata value has the wrong type or an impossible value
    │   └── BundleError            a bundle folder is incomplete, tampered with, or of an unknown schema
    ├── InputError                 feeds do not fit the model's inputs (name, dtype, shape)
    ├── BackendError               a runtime failed to load or run a model
    │   ├── UnknownBackendError    no backend or alias by that name is registered
    │   ├── BackendUnavailableError  the backend's runtime is not installed or fails to import
    │   ├── DeviceUnavailableError the asked-for device cannot be used (no silent fallback)
    │   │   └── PrecisionUnavailableError  the device does not compute the asked-for precision natively,
    │   │                              or the runtime ran another one (no silent substitute)
    │   └── UnsupportedModelError  the runtime cannot load or run this graph (unsupported op ...)
    ├── ConversionError            a conversion to ONNX failed; nothing is left at the output path
    │   ├── UnsupportedLayerError  a source layer or option that the converter does not handle
    │   ├── ParityError            the converted model's outputs differ from the source's
    │   └── OracleError            an oracle asked for by name cannot run here (no compiler, no Darknet,
    │                              no OpenCV 4.x importer) or failed on the model
    ├── PlatformError              an emulated target (``--platform linux/arm64``) is not prepared, half-built,
    │                              or cannot be prepared here (no QEMU >= 8, no sysroot tool, no wheel)
    ├── QuantizationError          quantizing failed or missed its accuracy budget; nothing is written
    ├── ReportError                a benchmark report cannot be read or compared
    └── ServeError                 a served model cannot answer a request (``deploykit serve``)
        ├── RequestError           the request does not fit the protocol or the model (HTTP 400, INVALID_ARGUMENT)
        │   ├── RequestTooLargeError  the body exceeds the server's bound (HTTP 413, RESOURCE_EXHAUSTED)
        │   └── UnsupportedRequestError  a part of a protocol extension the server does not offer (HTTP 400,
        │                              UNIMPLEMENTED)
        ├── ModelLoadError         a model asked to load (repository extension) fails its checks or does not
        │                          open (HTTP 400, INVALID_ARGUMENT)
        ├── ModelNotServedError    no model or version by that name is served (HTTP 404, NOT_FOUND)
        └── ModelUnavailableError  the model is not ready: loading, crashed, shutting down, or its queue
                                   is full (HTTP 503, UNAVAILABLE)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SUBJECT_SEPARATOR = " | "
"""Between a message's subject and its problem: ``input 'images' | got shape ...``."""


def problem_of(message: str) -> str:
    """A message's problem: the part after its subject (``subject | problem``), or all of it. The
    grammar every deploykit message is built with, read back where only the message was recorded
    (a report row's ``error``)."""
    subject, separator, problem = message.partition(SUBJECT_SEPARATOR)
    return problem if separator else subject


class DeployKitError(Exception):
    """Base of every error deploykit raises on purpose.

    Args:
        message: what was wrong and what was expected, in one or two sentences.
        hint: how to fix it; printed after the message as ``Hint: ...``.
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} Hint: {self.hint}"
        return self.message

    @property
    def subject(self) -> str:
        """What the message is about (``input 'images'``); empty when the message names none."""
        subject, separator, _ = self.message.partition(SUBJECT_SEPARATOR)
        return subject if separator else ""

    @property
    def problem(self) -> str:
        """What was wrong and what was expected: the message after its subject."""
        return problem_of(self.message)

    def to_dict(self) -> dict[str, Any]:
        """The error as data, to cross a process boundary (JSON, a pipe) and be raised again there
        by ``from_dict``: its class name, subject, problem and hint."""
        return {"type": type(self).__name__, "subject": self.subject, "problem": self.problem, "hint": self.hint}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DeployKitError:
        """The error ``to_dict`` described, with the same message and hint: of its own class when
        this tree has one by that name, else of the class this is called on
        (``ConversionError.from_dict(data)`` falls back to ``ConversionError``)."""
        kind = globals().get(str(data.get("type")))
        if not (isinstance(kind, type) and issubclass(kind, DeployKitError)):
            kind = cls
        subject, problem = str(data.get("subject") or ""), str(data.get("problem") or "")
        message = f"{subject}{SUBJECT_SEPARATOR}{problem}" if subject else problem
        hint = data.get("hint")
        return kind(message, hint=None if hint is None else str(hint))


def legacy_message_and_hint(text: str) -> tuple[str, str | None]:
    """The message and the hint of an error text written by deploykit 0.1, whose reports kept the
    two in one string (``message Hint: hint``): the one place where message text is split, and
    only to read those old files. Reports written now record ``hint`` apart (``Verdict.hint``,
    ``Row.hint``), and errors cross processes as data (``to_dict``/``from_dict``)."""
    message, found, hint = text.partition(" Hint: ")  # the old schema; nothing new is written this way
    return (message.rstrip(), hint.strip() or None) if found else (text, None)


def exception_line(exc: BaseException, *, last: bool = False) -> str:
    """A third-party exception's text as one line for a message: its first line (its last with
    ``last``, where a runtime ends a long trace with the reason), or its class name when it has none."""
    lines = str(exc).strip().splitlines()
    if not lines:
        return type(exc).__name__
    return lines[-1] if last else lines[0]


class UsageError(DeployKitError):
    """An option or argument value that cannot be used."""


class OutputError(UsageError):
    """An output path cannot be written (no directory, not writable, read-only, a device),
    or it is a file the command reads. Nothing is left at the path."""


class ResourceError(DeployKitError):
    """The command is sound, but the machine lacks what it needs or another process holds it: the disk
    (or a quota, or ``ulimit -f``) ran out of room, a port is taken, another run is writing the same
    output, the process limits allow no more threads, a package is not installed, a cluster has no
    device node, no backend here runs any of the backends and precisions asked for. The same command
    may succeed once that changes, or on another machine; the CLI exits 1, not 2."""


class ModelError(DeployKitError):
    """A model file cannot be used."""


class ModelNotFoundError(ModelError):
    """The model path does not exist or is a directory."""


class InvalidModelError(ModelError):
    """The file is not a readable, valid ONNX model."""


class MetadataError(InvalidModelError):
    """A ``deploykit.*`` metadata value of the model is not valid JSON, has the wrong type or an
    impossible value (a negative size, NaN, labels that are not strings); the message names the key."""


class BundleError(ModelError):
    """A bundle folder (``deploykit optimize -o``) is incomplete, tampered with, or of an unknown schema."""


class InputError(DeployKitError):
    """Feeds do not fit the model's inputs."""


class BackendError(DeployKitError):
    """A runtime failed to load or run a model."""


class UnknownBackendError(BackendError):
    """No backend or alias by that name is registered."""


class BackendUnavailableError(BackendError):
    """The backend's runtime is not installed or fails to import."""


class DeviceUnavailableError(BackendError):
    """The device that was asked for cannot be used."""


class PrecisionUnavailableError(DeviceUnavailableError):
    """The device does not compute the asked-for precision natively, or the runtime ran another one."""


class UnsupportedModelError(BackendError):
    """The runtime cannot load or run this graph."""


class ConversionError(DeployKitError):
    """A conversion to ONNX failed."""


class UnsupportedLayerError(ConversionError):
    """A source layer or option the converter does not handle."""


class ParityError(ConversionError):
    """The converted model's outputs differ from the source model's.

    ``report`` holds the conversion report (a ``ConversionReport``) when one was made.
    """

    report: object | None = None

    def with_report(self, report: object) -> ParityError:
        self.report = report
        return self


class OracleError(ConversionError):
    """An oracle the user asked for by name cannot run here (no C compiler, no Darknet, OpenCV
    without the Darknet importer), or it failed on the model. Never raised for ``auto``, which
    says ``unverified`` instead."""


class PlatformError(DeployKitError):
    """An emulated target cannot be used or prepared: user-mode QEMU missing or older than 8,
    no arm64 sysroot (or no tool to build one), a runtime without a wheel for that platform,
    or a target folder that an interrupted ``platforms add`` left half-built."""


class QuantizationError(DeployKitError):
    """Quantizing a model failed (the engine's reason), or the result missed its accuracy budget.

    Nothing is written at the output path.
    """


class ReportError(DeployKitError):
    """A benchmark report cannot be read or compared."""


class ServeError(DeployKitError):
    """A served model cannot answer a request; the server sends the message as the protocol's error."""


class RequestError(ServeError):
    """A request does not fit the inference protocol or the model's inputs (names, datatypes, shapes)."""


class RequestTooLargeError(RequestError):
    """A request body exceeds the server's size bound."""


class UnsupportedRequestError(RequestError):
    """A request asks for a part of a protocol extension the server does not offer."""


class ModelLoadError(ServeError):
    """A model asked to load through the repository extension fails its checks or its backend cannot
    open it; the models already served are untouched."""


class ModelNotServedError(ServeError):
    """No model, or no version of it, by that name is served."""


class ModelUnavailableError(ServeError):
    """The model is not ready: still loading, its backend crashed, the server is shutting down, or
    its queue is full."""
