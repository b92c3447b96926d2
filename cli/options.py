"""The options several commands share, each defined once as an ``Annotated`` type, and the few
functions that turn their text into the library's settings values.

A command writes ``iterations: Iterations = 100`` and gets the same flag, spelling and help as
every other command that times something; ``bench``, ``compare``, ``optimize``, ``quantize``,
``export`` and ``run`` take their shared options from here. No domain logic.
"""

from __future__ import annotations

from typing import Annotated

import typer

from deploykit.backends.options import OptionValue
from deploykit.verify.isolated import DEFAULT_TIMEOUT_S
from deploykit.verify.settings import ThresholdOverrides

from .console import coerce, parse_pairs

BACKEND_HELP = "BACKEND or BACKEND:DEVICE (repeat); default: every available backend × device."
ORACLE_HELP = (
    "Who computes the reference: auto (onnx's reference evaluator; if it cannot run the model, the first "
    "backend, and verdicts are 'unverified'), reference, none, or a backend spec (not independent)."
)
SHAPE_HELP = "NAME:SHAPE[:LOW..HIGH] for an input's dynamic sizes (and an integer range), e.g. images:1x3x640x640."
BATCH_AXIS_HELP = "NAME:AXIS: the batch axis of an input whose first axis is not the batch, e.g. state:1."

Backends = Annotated[list[str], typer.Option("--backend", "-b", help=BACKEND_HELP)]
Device = Annotated[str | None, typer.Option("--device", "-d", help="Device (default: the backend's CPU).")]
BackendOptions = Annotated[
    list[str],
    typer.Option("--option", "-O", help="Backend option KEY=VALUE, repeatable (see 'deploykit backends --options')."),
]
Iterations = Annotated[int, typer.Option("--iterations", "-n", help="Timed runs per configuration.")]
Warmup = Annotated[int, typer.Option("--warmup", help="Untimed runs before timing.")]
Threads = Annotated[
    str | None, typer.Option("--threads", help="Thread count(s) to sweep, e.g. 1,2 (default: the runtime's own).")
]
Precision = Annotated[
    str | None,
    typer.Option("--precision", help="Precision(s), e.g. f32,bf16,f16,int8 (each backend runs those it has here)."),
]
Seed = Annotated[int, typer.Option("--seed", help="Seed for random inputs.")]
Timeout = Annotated[float, typer.Option("--timeout", help="Seconds one worker process may take.")]
BackgroundLoad = Annotated[
    int,
    typer.Option(
        "--background-load",
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
Atol = Annotated[float | None, typer.Option("--atol", help="f32 absolute tolerance (default 1e-4).")]
Rtol = Annotated[float | None, typer.Option("--rtol", help="f32 relative tolerance (default 1e-3).")]
MinCosine = Annotated[float | None, typer.Option("--min-cosine", help="Reduced precision: per-output cosine.")]
MinSnr = Annotated[float | None, typer.Option("--min-snr", help="Reduced precision: per-output SNR in dB.")]
MinTop1 = Annotated[float | None, typer.Option("--min-top1-agreement", help="Classifiers on images: top-1 agreement.")]
MinMap = Annotated[float | None, typer.Option("--min-map", help="Detectors on images: mAP@0.5 against the f32 model.")]

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
