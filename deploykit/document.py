"""What every report is: a JSON document, the same protocol for all of them.

The bench report, the fleet report, the conversion report and the optimize report are each a
dataclass of typed parts with ``to_dict()`` (the document, with its ``schema`` name),
``from_dict(data, source)`` (the same objects back, or a ``ReportError`` naming ``source``) and
``write(path)`` (the document, all or nothing). ``JsonDocument`` gives ``to_json``, ``write``
and ``from_json`` to any class with the first two; how a report is shown (CSV, Markdown, HTML,
a terminal table) lives in view modules that read the data and are never imported back.
This module must not import any report: the reports import it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from deploykit.errors import ReportError
from deploykit.io import special_file_problem, written

_D = TypeVar("_D", bound="JsonDocument")


@runtime_checkable
class Document(Protocol):
    """The report protocol: a document out, the same objects back, written whole."""

    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str | os.PathLike[str] = ...) -> Any: ...

    def write(self, path: str | os.PathLike[str]) -> Path: ...


class JsonDocument:
    """``to_json``, ``write`` and ``from_json`` over a class's ``to_dict``/``from_dict``.

    Subclasses name what they are (``KIND``, e.g. ``"report"``: the subject of error messages)
    and the file a user should pass instead (``HINT``).
    """

    KIND: ClassVar[str] = "report"
    HINT: ClassVar[str] = "pass a JSON document written by deploykit."

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_dict(cls: type[_D], data: Mapping[str, Any], source: str | os.PathLike[str] = "<report>") -> _D:
        raise NotImplementedError

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The document as indented JSON; also written (all or nothing) to ``path`` when given."""
        return written(json.dumps(self.to_dict(), indent=2, default=str), path)

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the document to ``path`` all or nothing; returns the path."""
        self.to_json(path)
        return Path(path)

    @classmethod
    def invalid(cls, source: str | os.PathLike[str], problem: str) -> ReportError:
        """The error for a document that cannot be read: ``KIND 'source' | problem`` with ``HINT``."""
        return ReportError(f"{cls.KIND} '{source}' | {problem}", hint=cls.HINT)

    @classmethod
    def from_json(cls: type[_D], path: str | os.PathLike[str]) -> _D:
        """Read a document file.

        Raises:
            ReportError: no such file (or not a regular one), not JSON (NaN and Infinity are not
                JSON numbers: deploykit writes null), or not this kind of document.
        """
        file = Path(path)
        problem = special_file_problem(file)
        if problem is not None:
            raise cls.invalid(file, f"{problem}.")

        def no_constants(name: str) -> Any:
            raise ValueError(f"{name} is not a JSON number (deploykit writes null for a missing figure)")

        try:
            data = json.loads(file.read_text(), parse_constant=no_constants)
        except FileNotFoundError as exc:
            raise cls.invalid(file, "no such file.") from exc
        except (OSError, ValueError) as exc:
            raise cls.invalid(file, f"is not JSON: {exc}.") from exc
        except RecursionError as exc:  # '[' * 100000: no report nests so deep
            raise cls.invalid(file, "is JSON nested too deeply to read; a report is a few levels deep.") from exc
        return cls.from_dict(data, file)
