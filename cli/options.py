"""The options several commands share, each defined once as an ``Annotated`` type, and the few
functions that turn their text into the library's settings values.

A command writes ``iterations: Iterations = 100`` and gets the same flag, spelling and help as
every other command that times something; ``bench``, ``compare``, ``optimize``, ``quantize``,
``export`` and ``run`` take their shared options from here. No domain logic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, overload

import typer

from deploykit.backends.options import OptionValue
from deploykit.errors import UsageError
from deploykit.validation import MAX_SEED, number_problem, parse_duration
from deploykit.verify.isolated import DEFAULT_TIMEOUT_S
from deploykit.verify.settings import ThresholdOverrides

from .console import coerce, parse_pairs


@dataclass(frozen=True)
class Number:
    """The parser of every numeric option (``parser=Number(low=0)``): an integer or a finite number in a range.
    NaN, infinity, a value out of range or not a number is a usage error (exit 2) that names the flag and
    the range: click prefixes the flag to what this raises."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    @property
    def __name__(self) -> str:  # click's FuncParamType names the type after the function
        return "integer" if self.integer else "number"

    def __call__(self, value: Any) -> Any:
        number: Any = value  # a default arrives as the command declared it
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            text = str(value).strip()
            try:
                number = int(text, 10) if self.integer else float(text)
            except ValueError:
                number = text
        if number is None:
            return None
        problem = number_problem(
            number, low=self.low, high=self.high, low_open=self.low_open, high_open=self.high_open, integer=self.integer
        )
        if problem:
            raise typer.BadParameter(f"'{value}': {problem}.")
        return int(number) if self.integer else number

    def bad_values(self) -> list[str]:
        """Values this parser refuses (for the fuzzer): not numbers, NaN, infinities, just past each bound."""
        values = ["abc", "nan", "inf", "1e999"]
        step = 1 if self.integer else 1e-9
        if self.low is not None:
            values.append(repr(self.low if self.low_open else self.low - max(step, abs(self.low) * 1e-9)))
        if self.high is not None:
            values.append(repr(self.high if self.high_open else self.high + max(step, abs(self.high) * 1e-9)))
        if self.integer:
            values.append("1.5")
        return [v.removesuffix(".0") if self.integer else v for v in values]


@dataclass(frozen=True)
class Duration:
    """The parser of every option that takes a duration (``metavar="DURATION", parser=Duration()``): the one grammar,
    ``validation.parse_duration`` (``500us``, ``2ms``, ``1.5s``, ``90s``, ``2m``, ``1h``; a bare number is
    seconds) → seconds. Anything else is a usage error (exit 2) that names the flag."""

    allow_zero: bool = False

    @property
    def __name__(self) -> str:
        return "duration"

    def __call__(self, value: Any) -> Any:
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            if value is not None and not (math.isfinite(value) and (value > 0 or (self.allow_zero and value == 0))):
                raise typer.BadParameter(f"'{value}' is not a duration.")
            return value
        try:
            return parse_duration(str(value), allow_zero=self.allow_zero)
        except UsageError as exc:
            raise typer.BadParameter(f"'{value}': {exc.problem} Hint: {exc.hint}") from None

    def bad_values(self) -> list[str]:
        return ["abc", "nan", "inf", "-1s", "5 parsecs", "2d", "200h", *([] if self.allow_zero else ["0"])]


def ray_address(value: str | None) -> str | None:
    """The parser of every ``--address`` of a Ray cluster: ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``
    (``distributed.cluster.parse_address``); an empty or portless address is a usage error (exit 2)."""
    from deploykit.distributed.cluster import parse_address

    try:
        return parse_address(value)
    except UsageError as exc:
        raise typer.BadParameter(f"'{value}': {exc.problem} Hint: {exc.hint}") from None


SEED = Number(low=0, high=MAX_SEED, integer=True)
COUNT = Number(low=1, high=10**9, integer=True)  # runs, samples, rows, replicas: at least one
FRACTION = Number(low=0, high=1)

BACKEND_HELP = "BACKEND or BACKEND:DEVICE (repeat); default: every available backend × device."
ORACLE_HELP = (
    "Who computes the reference: auto (onnx's reference evaluator; if it cannot run the model, the first "
    "backend, and verdicts are 'unverified'), reference, none, or a backend spec (not independent)."
)
SHAPE_HELP = "NAME:SHAPE[:LOW..HIGH] for an input's dynamic sizes (and an integer range), e.g. images:1x3x640x640."
BATCH_AXIS_HELP = "NAME:AXIS: the batch axis of an input whose first axis is not the batch, e.g. state:1."

Backends = Annotated[list[str], typer.Option("--backend", "-b", help=BACKEND_HELP)]


def device_name(text: str) -> str:
    """``--device``: a device name; an empty one is a usage error, never the backend's default device."""
    if not text.strip():
        raise typer.BadParameter(
            f"{text!r} names no device; expected a device name (cpu, cuda:0, GPU ...). Hint: leave --device out for "
            "the backend's CPU; 'deploykit backends' lists the devices."
        )
    return text


@overload
def backend_and_device(backend: str, device: str | None) -> tuple[str, str | None]: ...
@overload
def backend_and_device(backend: None, device: str | None) -> tuple[None, str | None]: ...
def backend_and_device(backend: str | None, device: str | None) -> tuple[str | None, str | None]:
    """``-b BACKEND:DEVICE`` in the commands that also take ``--device`` (run, predict, serve), as bench and
    compare read it; the device given both ways must be the same one."""
    from deploykit.verify.check import parse_backend_spec

    if backend is None or ":" not in backend:
        return backend, device
    name, spec_device = parse_backend_spec(backend)
    if device is not None and device != spec_device:
        raise UsageError(
            f"backend '{backend}' | names device '{spec_device}', and --device names '{device}'.",
            hint=f"name the device once: -b {backend}, or -b {name} --device {device}.",
        )
    return name, spec_device


Device = Annotated[
    str | None, typer.Option("--device", "-d", parser=device_name, help="Device (default: the backend's CPU).")
]
BackendOptions = Annotated[
    list[str],
    typer.Option("--option", "-O", help="Backend option KEY=VALUE, repeatable (see 'deploykit backends --options')."),
]
Iterations = Annotated[int, typer.Option("--iterations", "-n", parser=COUNT, help="Timed runs per configuration.")]
Warmup = Annotated[
    int, typer.Option("--warmup", parser=Number(low=0, high=10**9, integer=True), help="Untimed runs before timing.")
]
Threads = Annotated[
    str | None, typer.Option("--threads", help="Thread count(s) to sweep, e.g. 1,2 (default: the runtime's own).")
]
Precision = Annotated[
    str | None,
    typer.Option("--precision", help="Precision(s), e.g. f32,bf16,f16,int8 (each backend runs those it has here)."),
]
Seed = Annotated[int, typer.Option("--seed", parser=SEED, help="Seed for random inputs.")]
Json = Annotated[
    bool,
    typer.Option("--json", help="Print the result as JSON on stdout (pipe it to jq) instead of tables and text."),
]
"""``--json`` in every command: a flag, JSON on stdout. A file is written with ``-o/--output`` (the
command's own output) or ``--report DIR`` (a report beside it), never by ``--json``."""
Timeout = Annotated[
    float,
    typer.Option(
        "--timeout", metavar="DURATION", parser=Duration(), help="How long one worker process may take (90s, 15m, 1h)."
    ),
]
BackgroundLoad = Annotated[
    int,
    typer.Option(
        "--background-load",
        parser=Number(low=0, high=4096, integer=True),
        help="Measure on a busy device: N busy threads (a spin loop per process) run while timing; "
        "fewer than the cores.",
    ),
]
Oracle = Annotated[str, typer.Option("--oracle", help=ORACLE_HELP)]
OracleMemory = Annotated[
    str | None,
    typer.Option(
        "--oracle-memory",
        help="Memory the oracle's worker may take, e.g. 16GiB (default: 3/4 of the memory available); "
        "past it the rows are unverified, saying so.",
    ),
]
Shapes = Annotated[list[str], typer.Option("--shape", help=SHAPE_HELP)]
BatchAxes = Annotated[list[str], typer.Option("--batch-axis", help=BATCH_AXIS_HELP)]
Atol = Annotated[
    float | None, typer.Option("--atol", parser=Number(low=0), help="f32 absolute tolerance (default 1e-4).")
]
Rtol = Annotated[
    float | None, typer.Option("--rtol", parser=Number(low=0), help="f32 relative tolerance (default 1e-3).")
]
MinCosine = Annotated[
    float | None,
    typer.Option("--min-cosine", parser=Number(low=-1, high=1), help="Reduced precision: per-output cosine."),
]
MinSnr = Annotated[
    float | None, typer.Option("--min-snr", parser=Number(), help="Reduced precision: per-output SNR in dB.")
]
MinTop1 = Annotated[
    float | None,
    typer.Option("--min-top1-agreement", parser=FRACTION, help="Classifiers on images: top-1 agreement."),
]
MinMap = Annotated[
    float | None, typer.Option("--min-map", parser=FRACTION, help="Detectors on images: mAP@0.5 against the f32 model.")
]

DEFAULT_TIMEOUT = DEFAULT_TIMEOUT_S


def oracle_memory(text: str | None) -> int | None:
    """``--oracle-memory 16GiB`` in bytes; None: the default (``deploykit.verify.limits``)."""
    from deploykit.verify.limits import parse_size

    return None if text is None else parse_size(text)


def backend_options(values: list[str]) -> dict[str, OptionValue]:
    """``--option KEY=VALUE`` values as typed backend options (``threads=2`` → 2)."""
    return {k: coerce(v) for k, v in parse_pairs(values, "--option").items()}


def thresholds(
    atol: float | None,
    rtol: float | None,
    min_cosine: float | None,
    min_snr_db: float | None,
    min_top1_agreement: float | None,
    min_map: float | None,
) -> ThresholdOverrides:
    """The threshold options as one value (None: the precision's default)."""
    return ThresholdOverrides(atol, rtol, min_cosine, min_snr_db, min_top1_agreement, min_map)
