"""One vocabulary on the command line, and the old spellings that still work for one release.

Every command says the same thing the same way: ``-o/--output`` is what the command writes (a
file, or a folder where it writes several), ``-O/--option KEY=VALUE`` a backend option,
``--report`` a folder, ``--oracle`` who computes the reference, ``--engine`` where the work runs
(``local | ray``), ``--quantizer`` what quantizes a model (``ort | nncf``) and ``--json`` a flag that
prints the result as JSON on stdout (never a file: that is ``-o`` or ``--report``).

The spellings of deploykit 0.1 are rewritten here, before click parses the command line, with one
deprecation line on stderr each; ``DEPRECATED`` is the only table of them. No command module
knows an old spelling. One old form keeps its flag and differs by its value: 0.1's ``--report FILE``
of ``convert`` and ``models build`` (``report_file_form`` says when a value is one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .console import err_console

GROUPS = ("convert", "export", "fleet", "models", "platforms")  # commands whose first argument is a subcommand


@dataclass(frozen=True)
class Deprecated:
    """``old`` in ``commands`` now reads ``new`` (when ``applies(value)``, if given)."""

    commands: tuple[str, ...]
    old: str
    new: str
    applies: Callable[[str], bool] | None = None
    why: str = ""
    drop_value: bool = False
    """The old form's value goes too (``--json -`` becomes the flag ``--json``)."""
    shown: str = ""
    """How the deprecation line quotes the old form (default ``old``)."""
    advice: str = ""
    """What the line tells the user to write instead (default ``new``)."""


def _is_pair(value: str) -> bool:
    return "=" in value


def _is_stdout(value: str) -> bool:
    return value == "-"


def _is_json_file(value: str) -> bool:
    """0.1's ``--json FILE``: a value ending in .json (never a model, an image or an option)."""
    return value.lower().endswith(".json") and not value.startswith("-")


_JSON_IS_A_FLAG = "--json is a flag in every command: JSON on stdout"


DEPRECATED: tuple[Deprecated, ...] = (
    Deprecated(("bench", "compare"), "-o", "-O", why="-o is the output path in every command"),
    Deprecated(("run",), "-o", "-O", applies=_is_pair, why="-o is the output path in every command"),
    Deprecated(("run",), "--save", "--output"),
    Deprecated(("predict",), "--out", "--output"),
    Deprecated(("quantize",), "--engine", "--quantizer", why="--engine is where the work runs: local | ray"),
    Deprecated(("quantize",), "-e", "--quantizer", why="--engine is where the work runs: local | ray"),
    Deprecated(("optimize",), "--engine", "--quantizer", why="--engine is where the work runs: local | ray"),
    Deprecated(("bench", "compare"), "--reference", "--oracle"),
    Deprecated(
        ("predict",), "--json", "--json", applies=_is_stdout, why=_JSON_IS_A_FLAG, drop_value=True, shown="--json -"
    ),
    Deprecated(
        ("predict",),
        "--json",
        "--output",
        applies=_is_json_file,
        shown="--json FILE",
        advice="-o FILE.json",
        why=f"{_JSON_IS_A_FLAG}; -o writes the file",
    ),
    Deprecated(
        ("quantize",),
        "--json",
        "--json-file",
        applies=_is_json_file,
        why=_JSON_IS_A_FLAG,
        shown="--json FILE",
        advice="--json > FILE",
    ),
)


REPORT_FILE_COMMANDS = ("convert torch", "convert darknet", "models build")
"""Where ``--report`` named a file in deploykit 0.1 (a JSON conversion report)."""


def report_file_form(command: str, value: Path, warn: Callable[[str], None] | None = None) -> bool:
    """Whether ``command``'s ``--report value`` is 0.1's report file (a name ending in .json or .md,
    or an existing regular file), said once through ``warn`` as deprecated; else it is a folder."""
    if command not in REPORT_FILE_COMMANDS:
        return False
    if value.suffix.lower() not in (".json", ".md") and not value.is_file():
        return False
    (warn or _warn)(
        f"warning: 'deploykit {command} --report FILE' is deprecated; use --report FOLDER (--report is a folder "
        f"in every command; the report is written to FOLDER/report.json). The file form goes in the next release."
    )
    return True


def command_of(args: Sequence[str]) -> tuple[str, int]:
    """The command a command line names (``convert torch``) and the index where its own arguments start."""
    words: list[str] = []
    for index, arg in enumerate(args):
        if arg.startswith("-"):
            if words:
                return " ".join(words), index
            continue  # an option of the root (--debug)
        words.append(arg)
        if words[0] not in GROUPS or len(words) == 2:
            return " ".join(words), index + 1
    return " ".join(words), len(args)


def modernize(args: Sequence[str], warn: Callable[[str], None] | None = None) -> list[str]:
    """``args`` with every old spelling replaced by its new one, each said once through ``warn``."""
    command, start = command_of(args)
    table = [d for d in DEPRECATED if command in d.commands]
    if not table:
        return list(args)
    out, said = list(args[:start]), set()
    rest = list(args[start:])
    index = 0
    while index < len(rest):
        arg = rest[index]
        index += 1
        if arg == "--":
            out += rest[index - 1 :]
            break
        flag, equals, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        value = inline if equals else (rest[index] if index < len(rest) else "")
        entry = next((d for d in table if d.old == flag and (d.applies is None or d.applies(value))), None)
        if entry is None:
            out.append(arg)
            continue
        if entry.drop_value:
            out.append(entry.new)
            index += 0 if equals else 1
        else:
            out.append(f"{entry.new}={inline}" if equals else entry.new)
        shown = entry.shown or entry.old
        if shown not in said:
            said.add(shown)
            reason = f" ({entry.why})" if entry.why else ""
            (warn or _warn)(
                f"warning: 'deploykit {command} {shown}' is deprecated; use {entry.advice or entry.new}{reason}. "
                "The old spelling goes in the next release."
            )
    return out


def _warn(message: str) -> None:
    err_console.print(message, soft_wrap=True, highlight=False, markup=False)
