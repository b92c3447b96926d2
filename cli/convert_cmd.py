"""``deploykit convert``: source model → verified ONNX file."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import typer
from rich.markup import escape

from deploykit.backends.registry import DEFAULT_BACKEND
from deploykit.convert.report import ConversionReport
from deploykit.errors import ParityError

from . import options as opt
from .console import console, plain
from .paths import file_out, folder_out, path_in
from .platforms_cmd import PLATFORM_OPTION
from .verify_view import print_details, verdict_table
from .vocabulary import report_file_form

convert_app = typer.Typer(help="Convert a model to ONNX, verified against its source.", no_args_is_help=True)

DARKNET_ORACLE_HELP = (
    "Who checks the conversion: auto (OpenCV 4.x's importer if installed, else Darknet itself if its helper is "
    "already built; never compiles), darknet (build Darknet's own forward pass with a C compiler against "
    "Debian's libdarknet if needed, into $DEPLOYKIT_CACHE_DIR, else $XDG_CACHE_HOME/deploykit, else "
    "~/.cache/deploykit), opencv (OpenCV 4.x's readNetFromDarknet), none (backends compared only)."
)
TRUST_PICKLE_HELP = (
    "Allow a whole pickled nn.Module file. Unpickling runs arbitrary code from the file, "
    "so only use it for files you trust; prefer TorchScript or a state_dict + factory."
)


def print_report(report: ConversionReport) -> None:
    size_mb = report.file_size_bytes / 2**20
    console.print(
        f"[bold]{plain(report.source)}[/] → {plain(report.output)}  ({report.converter}, {report.exporter} exporter, "
        f"opset {report.opset}, {size_mb:.2f} MiB, {report.parameter_count:,} parameters, "
        f"export {report.export_seconds:.2f} s, gate {report.gate_seconds:.2f} s)"
    )
    for note in report.notes:
        console.print(f"  [yellow]note[/]: {escape(note)}")
    oracle = report.oracle
    title = "verification against " + (
        f"{oracle.name}" + ("" if oracle.independent else " (no independent oracle)") if oracle else "nothing"
    )
    console.print(verdict_table(title, report.verdicts))
    print_details(report.verdicts)


REPORT_HELP = "Also write the conversion report into this folder, as report.json (with the model, or neither)."


@contextlib.contextmanager
def report_destination(
    command: str, report: Path | None, *, inputs: Sequence[Path | None], output: Path
) -> Iterator[Path | None]:
    """The file the converter writes the report to: ``report/report.json``, the folder checked
    first and made for the block (removed again if the block leaves it empty), or 0.1's
    ``--report FILE`` itself (deprecated: one line on stderr)."""
    from deploykit.convert.report import REPORT_FILE, check_conversion_report_folder
    from deploykit.io import report_folder

    if report is None or report_file_form(command, report):
        yield report
        return
    check_conversion_report_folder(report, inputs=[p for p in inputs if p is not None], output=output)
    with report_folder(report) as folder:
        yield folder / REPORT_FILE


def finish(report: ConversionReport | None, report_path: Path | None) -> None:
    """Print the report; the converter wrote it to ``report_path`` with the model (both or neither)."""
    if report is None:
        return
    print_report(report)
    if report_path is not None and report.written:
        console.print(f"report written to {report_path}")


@convert_app.command("torch")
def torch_command(
    source: str = typer.Argument(
        ..., help="file.py:factory, package.module:factory, a TorchScript .pt archive, or a pickled module."
    ),
    output: Path = typer.Option(
        ..., "--output", "-o", readable=False, parser=file_out, help="The .onnx file to write."
    ),
    weights: Path = typer.Option(
        None,
        "--weights",
        "-w",
        parser=path_in,
        help="state_dict (or training checkpoint) to load into the factory's model.",
    ),
    weights_key: str = typer.Option(
        None,
        "--weights-key",
        help="Checkpoint key holding the state_dict (default: state_dict, model_state, model, net, ema ...).",
    ),
    ignore_keys: str = typer.Option(
        None, "--ignore-keys", help="REGEX of state_dict keys to drop (e.g. a loss's parameters); listed in the report."
    ),
    inputs: list[str] = typer.Option(
        [],
        "--input",
        "-i",
        help="NAME:SHAPE[:DTYPE[:LOW..HIGH]] per forward() argument, e.g. images:1x3x224x224.",
    ),
    dynamic: list[str] = typer.Option([], "--dynamic", help="NAME:AXIS=LABEL, e.g. images:0=batch."),
    output_names: str = typer.Option(None, "--output-names", help="Comma-separated output names."),
    opset: int = typer.Option(17, parser=opt.Number(low=1, high=1000, integer=True), help="ONNX opset to target."),
    exporter: str = typer.Option(
        "auto",
        help="auto (TorchScript below opset 18, else dynamo; the other on failure) | dynamo | torchscript.",
    ),
    simplify: bool = typer.Option(False, "--simplify", help="Simplify with onnxslim (still verified)."),
    verify_backends: str = typer.Option(
        DEFAULT_BACKEND, "--verify-backends", help="Comma-separated backends that must match PyTorch."
    ),
    atol: float = typer.Option(
        None, parser=opt.Number(low=0), help="Absolute tolerance (default by precision: f32 1e-4)."
    ),
    rtol: float = typer.Option(
        None, parser=opt.Number(low=0), help="Relative tolerance (default by precision: f32 1e-3)."
    ),
    keep_on_mismatch: bool = typer.Option(
        False, "--keep-on-mismatch", help="Write the .onnx even if the verification fails (still exits 1)."
    ),
    trust_pickle: bool = typer.Option(False, "--trust-pickle", help=TRUST_PICKLE_HELP),
    report_dir: Path = typer.Option(None, "--report", readable=False, parser=folder_out, help=REPORT_HELP),
    seed: int = typer.Option(0, parser=opt.SEED, help="Seed for the random example inputs."),
    timeout: float = typer.Option(
        900,
        "--timeout",
        metavar="DURATION",
        parser=opt.Duration(),
        help="How long the PyTorch side (your factory, PyTorch, the export) and each backend may take.",
    ),
    platform: str = PLATFORM_OPTION,
) -> None:
    """Export a PyTorch model to ONNX; fail (and write nothing) unless it matches PyTorch.

    Your model's code (the factory, the module, the archive) runs in a worker process: if it hangs past
    --timeout, crashes, or exits, the conversion fails with that reason and writes nothing."""
    from deploykit.convert.specs import parse_dynamic, parse_input_spec
    from deploykit.convert.torch import TorchExportSettings, convert_torch
    from deploykit.verify import VerifySettings

    specs = [parse_input_spec(text) for text in inputs]
    with (
        report_destination("convert torch", report_dir, inputs=[weights], output=output) as report_path,
        _shown_on_failure(report_path),
    ):
        report = convert_torch(
            source,
            output=output,
            export=TorchExportSettings(
                output_names=tuple(n.strip() for n in output_names.split(",")) if output_names else None,
                dynamic=parse_dynamic(dynamic, specs),
                opset=opset,
                exporter=exporter,
                simplify=simplify,
                trust_pickle=trust_pickle,
                seed=seed,
                weights=str(weights) if weights is not None else None,
                weights_key=weights_key,
                ignore_keys=ignore_keys,
            ),
            checks=VerifySettings(
                thresholds=opt.thresholds(atol, rtol, None, None, None, None), timeout_s=timeout, platforms=platform
            ),
            inputs=specs,
            verify_backends=[b.strip() for b in verify_backends.split(",") if b.strip()],
            keep_on_mismatch=keep_on_mismatch,
            report_path=report_path,
        )
    finish(report, report_path)


@convert_app.command("darknet")
def darknet_command(
    cfg: Path = typer.Argument(..., parser=path_in, help="The Darknet .cfg file."),
    weights: Path = typer.Argument(..., parser=path_in, help="The Darknet .weights file."),
    output: Path = typer.Option(
        ..., "--output", "-o", readable=False, parser=file_out, help="The .onnx file to write."
    ),
    input_size: str = typer.Option(
        None, "--input-size", help="WIDTHxHEIGHT (default: the cfg's); a multiple of the stride."
    ),
    batch: str = typer.Option("1", help="Batch size, or 'dynamic'."),
    head: str = typer.Option("raw", help="raw (each [yolo]/[region] output) | decoded (one detections tensor)."),
    opset: int = typer.Option(13, parser=opt.Number(low=1, high=1000, integer=True), help="ONNX opset (13 to 21)."),
    opencv_threshold: float = typer.Option(
        None,
        "--opencv-threshold",
        parser=opt.FRACTION,
        help="With --head decoded: zero class scores ≤ this, as OpenCV 4.x does (0.2).",
    ),
    labels: Path = typer.Option(
        None, "--labels", parser=path_in, help="Class names file (one per line) to store in the model."
    ),
    verify_backends: str = typer.Option(
        DEFAULT_BACKEND, "--verify-backends", help="Comma-separated backends to verify on ('' to skip)."
    ),
    oracle: str = typer.Option("auto", "--oracle", help=DARKNET_ORACLE_HELP),
    keep_on_mismatch: bool = typer.Option(
        False, "--keep-on-mismatch", help="Write the .onnx even if verification fails."
    ),
    report_dir: Path = typer.Option(None, "--report", readable=False, parser=folder_out, help=REPORT_HELP),
    platform: str = PLATFORM_OPTION,
) -> None:
    """Convert Darknet .cfg + .weights to ONNX natively (no PyTorch) and verify it."""
    from deploykit.convert.darknet.convert import convert_darknet
    from deploykit.convert.darknet.oracles import check_oracle_choice
    from deploykit.convert.darknet.settings import DarknetExportSettings
    from deploykit.verify import VerifySettings

    with (
        report_destination("convert darknet", report_dir, inputs=[cfg, weights, labels], output=output) as report_path,
        _shown_on_failure(report_path),
    ):
        export = DarknetExportSettings(
            input_size=input_size, batch=batch, head=head, opset=opset, opencv_threshold=opencv_threshold
        )
        report = convert_darknet(
            cfg,
            weights,
            output,
            export,
            VerifySettings(oracle=check_oracle_choice(oracle), platforms=platform),
            labels=labels,
            verify_backends=[b.strip() for b in verify_backends.split(",") if b.strip()],
            keep_on_mismatch=keep_on_mismatch,
            report_path=report_path,
        )
    finish(report, report_path)


@contextlib.contextmanager
def _shown_on_failure(report_path: Path | None) -> Iterator[None]:
    """A failed verification's report is printed too (the error carries it) before the error."""
    try:
        yield
    except ParityError as exc:
        finish(exc.report if isinstance(exc.report, ConversionReport) else None, report_path)
        raise
