"""Darknet ``.cfg`` parsing, with Darknet's own rules.

As in Darknet's ``read_cfg``: every whitespace character is removed from a line before it is
read (so ``saturation = 1.5`` is ``saturation=1.5`` and text after a value stays part of the
value); a line starting with ``#`` or ``;`` is a comment; ``[name]`` opens a section; other
lines are ``key=value``. A repeated key keeps its first value, as Darknet's ``option_find``
does. Anything Darknet would not understand is an error here, never a silent skip.

It sits beside ``model.py`` (the ONNX reader), below the backends: the OpenCV backend reads a cfg's
``[net]`` input size from it, the Darknet converter (``convert.darknet``) everything else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from deploykit.errors import ConversionError, UnsupportedLayerError
from deploykit.io import regular_file_problem, shown

_WHITESPACE = str.maketrans("", "", " \t\n\r\v\f")
_MAX_CFG_BYTES = 16 * 2**20


@dataclass
class Section:
    """One ``[type]`` block: its options and where it was written."""

    type: str
    line: int
    index: int  # layer index (the [net] section is -1)
    options: dict[str, str] = field(default_factory=dict)
    option_lines: dict[str, int] = field(default_factory=dict)
    used: set[str] = field(default_factory=set)

    def where(self) -> str:
        place = "[net]" if self.index < 0 else f"layer {self.index} [{self.type}]"
        return f"{place} (line {self.line})"

    def has(self, key: str) -> bool:
        return key in self.options

    def shown(self, key: str) -> str:
        """``key=value`` as a message shows it: a value of megabytes is cut around an ellipsis."""
        return f"{key}={shown(self.options.get(key, ''))}"

    def _raw(self, key: str) -> str | None:
        self.used.add(key)
        return self.options.get(key)

    def text(self, key: str, default: str | None = None) -> str:
        value = self._raw(key)
        if value is None:
            if default is None:
                raise ConversionError(f"{self.where()} | needs option '{key}'.", hint=f"add {key}=... to the section.")
            return default
        return value

    def integer(self, key: str, default: int | None = None) -> int:
        value = self._raw(key)
        if value is None:
            if default is None:
                raise ConversionError(f"{self.where()} | needs option '{key}'.", hint=f"add {key}=N to the section.")
            return default
        try:
            return int(float(value)) if "." in value or "e" in value.lower() else int(value)
        except ValueError as exc:
            raise ConversionError(
                f"{self.where()} | option '{self.shown(key)}' (line {self.option_lines[key]}) is not an integer.",
                hint="Darknet reads this option as an integer.",
            ) from exc

    def number(self, key: str, default: float | None = None) -> float:
        value = self._raw(key)
        if value is None:
            if default is None:
                raise ConversionError(f"{self.where()} | needs option '{key}'.", hint=f"add {key}=X to the section.")
            return default
        try:
            return float(value)
        except ValueError as exc:
            raise ConversionError(
                f"{self.where()} | option '{self.shown(key)}' (line {self.option_lines[key]}) is not a number.",
                hint="Darknet reads this option as a number.",
            ) from exc

    def integers(self, key: str, default: list[int] | None = None) -> list[int]:
        value = self._raw(key)
        if value is None or value == "":
            if default is None:
                raise ConversionError(
                    f"{self.where()} | needs option '{key}'.", hint=f"add {key}=a,b,... to the section."
                )
            return default
        try:
            return [int(part) for part in value.split(",") if part != ""]
        except ValueError as exc:
            raise ConversionError(
                f"{self.where()} | option '{self.shown(key)}' (line {self.option_lines[key]}) is not a list of "
                "integers.",
                hint="write integers separated by commas.",
            ) from exc

    def numbers(self, key: str) -> list[float]:
        value = self._raw(key) or ""
        try:
            return [float(part) for part in value.split(",") if part != ""]
        except ValueError as exc:
            raise ConversionError(
                f"{self.where()} | option '{key}' (line {self.option_lines.get(key)}) is not a list of numbers.",
                hint="write numbers separated by commas.",
            ) from exc


@dataclass
class DarknetCfg:
    """A parsed cfg: the ``[net]`` section and the layer sections in order."""

    path: str
    net: Section
    layers: list[Section]


def parse_cfg_text(text: str, path: str = "<cfg>") -> DarknetCfg:
    """Parse cfg text; see the module docstring for the rules.

    Raises:
        ConversionError: the text is not a Darknet cfg.
    """
    if "\x00" in text:
        raise ConversionError(
            f"cfg '{path}' | is a binary file, not a Darknet .cfg.",
            hint="pass the .cfg text file first and the .weights file second.",
        )
    # A byte-order mark is invisible in editors (Darknet itself crashes on it): drop it.
    text = text.removeprefix("\ufeff")
    sections: list[Section] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.translate(_WHITESPACE)
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            if not line.endswith("]") or len(line) < 3:
                raise ConversionError(
                    f"cfg '{path}' line {number} | '{shown(raw.strip())}' is not a [section] header.",
                    hint="section headers look like [convolutional].",
                )
            name = line[1:-1].lower()
            sections.append(Section(name, number, len(sections) - 1))
            continue
        key, sep, value = line.partition("=")
        if not sep or not key:
            raise ConversionError(
                f"cfg '{path}' line {number} | '{shown(raw.strip())}' is neither key=value, a [section] nor a comment.",
                hint="Darknet cfg lines are key=value; comments start with # or ;.",
            )
        if not sections:
            raise ConversionError(
                f"cfg '{path}' line {number} | option '{key}' comes before any [section].",
                hint="a cfg starts with [net].",
            )
        section = sections[-1]
        if key not in section.options:  # Darknet's option_find returns the first match
            section.options[key] = value
            section.option_lines[key] = number
    if not sections:
        raise ConversionError(
            f"cfg '{path}' | has no sections: it is empty or not a Darknet cfg.",
            hint="a cfg starts with [net] followed by layer sections such as [convolutional].",
        )
    if sections[0].type not in ("net", "network"):
        raise ConversionError(
            f"cfg '{path}' | starts with [{sections[0].type}] (line {sections[0].line}), expected [net].",
            hint="the first section of a Darknet cfg is [net] with width, height and channels.",
        )
    if len(sections) == 1:
        raise ConversionError(f"cfg '{path}' | has [net] but no layers.", hint="add layer sections after [net].")
    return DarknetCfg(path, sections[0], sections[1:])


def read_cfg(path: str | os.PathLike[str]) -> DarknetCfg:
    """Read and parse a ``.cfg`` file."""
    file = Path(path)
    problem = regular_file_problem(file)
    if problem is not None:
        raise ConversionError(f"cfg '{shown(file)}' | {problem}.", hint="pass the path of the Darknet .cfg file.")
    if file.stat().st_size > _MAX_CFG_BYTES:
        raise ConversionError(
            f"cfg '{file}' | is {file.stat().st_size / 2**20:.0f} MiB; a Darknet cfg is a small text file.",
            hint="check the order: the .cfg comes first, then the .weights.",
        )
    data = file.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # decodes every byte; control characters then show a binary file
        if any(ord(c) < 9 for c in text):
            raise ConversionError(
                f"cfg '{file}' | is a binary file, not a Darknet .cfg.",
                hint="pass the .cfg text file first and the .weights file second.",
            ) from None
    return parse_cfg_text(text, str(file))


def check_unused(section: Section, ignored: frozenset[str]) -> None:
    """Options nobody read and Darknet does not ignore in inference are errors."""
    unknown = sorted(set(section.options) - section.used - ignored)
    if unknown:
        key = unknown[0]
        raise UnsupportedLayerError(
            f"{section.where()} | option '{section.shown(key)}' (line {section.option_lines[key]}) is not "
            "supported by this converter.",
            hint="it would change the computation, so it cannot be skipped; remove it if your Darknet ignores it.",
        )
