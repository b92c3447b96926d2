"""Feeds for runs, benches and verification: seeded random data or arrays from files.

Every backend in a comparison must see exactly the same arrays, so inputs are
made once here and passed to each session.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploykit.errors import InputError, UsageError
from deploykit.tensors import TensorSpec, parse_shape

MAX_RANDOM_BYTES = 4 * 2**30
"""Random data deploykit makes for one input is refused past this (or half the machine's memory)."""


@dataclass(frozen=True)
class InputSetting:
    """What the user said about one input: ``NAME:SHAPE[:LOW..HIGH]`` (``--shape``)."""

    shape: tuple[int, ...] | None = None
    low: int | None = None
    high: int | None = None


def parse_input_settings(values: Sequence[str]) -> dict[str, InputSetting]:
    """``--shape`` values: ``images:1x3x640x640``, ``ids:1x16:0..30000``, ``sr:1:16000..16000``.

    Raises:
        UsageError: a value that is not NAME:SHAPE with an optional inclusive integer range.
    """
    settings: dict[str, InputSetting] = {}
    for value in values:
        name, sep, rest = value.partition(":")
        shape_text, _, range_text = rest.partition(":")
        if not sep or not name or not shape_text:
            raise UsageError(
                f"--shape '{value}' | expected NAME:SHAPE or NAME:SHAPE:LOW..HIGH.",
                hint="e.g. --shape images:1x3x640x640, or --shape sample_rate:1:16000..16000 for an integer input.",
            )
        low = high = None
        if range_text:
            low_text, dots, high_text = range_text.partition("..")
            try:
                low, high = int(low_text), int(high_text)
            except ValueError:
                low = high = None
            if not dots or low is None or high is None or low > high:
                raise UsageError(
                    f"--shape '{value}' | the range '{range_text}' is not LOW..HIGH with integers LOW ≤ HIGH.",
                    hint="the range is inclusive: 0..29999 for a vocabulary of 30000, 16000..16000 for one value.",
                )
        settings[name] = InputSetting(parse_shape(shape_text), low, high)
    return settings


def parse_batch_axes(values: Sequence[str]) -> dict[str, int]:
    """``--batch-axis state:1`` → ``{"state": 1}``."""
    axes: dict[str, int] = {}
    for value in values:
        name, sep, axis = value.partition(":")
        if not sep or not name or not axis.strip().isdigit():
            raise UsageError(
                f"--batch-axis '{value}' | expected NAME:AXIS with a non-negative axis index.",
                hint="e.g. --batch-axis state:1 for an LSTM state of shape (layers, batch, hidden).",
            )
        axes[name] = int(axis)
    return axes


def image_size_from_metadata(metadata: Mapping[str, str]) -> tuple[tuple[int, int], str] | None:
    """(height, width) and where it came from: deploykit's metadata, then Ultralytics' ``imgsz``.

    Raises:
        MetadataError: deploykit's ``deploykit.input`` holds a value that cannot be a size.
    """
    from deploykit.metadata import read_metadata

    stored = read_metadata(metadata)
    return (stored.size, stored.size_source) if stored.size else None


@dataclass
class InputPlan:
    """Concrete shapes for every input, which axis of each carries the batch, and why each size.

    Attributes:
        shapes: input name → the shape to feed.
        batch_axes: input name → its batch axis, or None for inputs that are not batched.
        batch: the batch those axes get.
        sources: input name → where its sizes came from (for reports and messages).
    """

    shapes: dict[str, tuple[int, ...]]
    batch_axes: dict[str, int | None]
    batch: int
    sources: dict[str, str] = field(default_factory=dict)


def model_batch(specs: Sequence[TensorSpec], batch_axes: Mapping[str, int] | None = None) -> int:
    """The batch a model runs with by default: a fixed size on a batch axis the user named, else 1."""
    for spec in specs:
        axis = (batch_axes or {}).get(spec.name)
        if axis is not None and spec.shape and axis < len(spec.shape) and isinstance(spec.shape[axis], int):
            return int(spec.shape[axis])  # type: ignore[arg-type]
    return 1


def batch_axis_of(spec: TensorSpec, batch_symbols: set[str], given: Mapping[str, int]) -> int | None:
    """The axis of ``spec`` that carries the batch, or None.

    The user's ``--batch-axis`` wins; else a dynamic first axis; else an axis whose symbol is the
    one other inputs batch on (an LSTM state ``(layers, batch, hidden)``). A fixed first axis is
    not a batch: ``(2, ?, 128)`` is a state input, not a batch of two.
    """
    if spec.name in given:
        return given[spec.name]
    if not spec.shape:
        return None
    if not isinstance(spec.shape[0], int):
        return 0
    for axis, dim in enumerate(spec.shape):
        if isinstance(dim, str) and dim in batch_symbols:
            return axis
    return None


def plan_inputs(
    specs: Sequence[TensorSpec],
    metadata: Mapping[str, str] | None = None,
    *,
    batch: int | None = None,
    settings: Mapping[str, InputSetting] | None = None,
    batch_axes: Mapping[str, int] | None = None,
    model_name: str = "the model",
) -> InputPlan:
    """Decide every input's shape, never by guessing: an unfixed size comes from ``--shape``,
    the batch, deploykit's metadata, Ultralytics' ``imgsz``, or it is an error naming the axis.

    Raises:
        UsageError: a size nobody fixed, a ``--shape`` that contradicts the model, a batch
            against a fixed batch axis, or a setting for an input the model does not have.
    """
    settings = dict(settings or {})
    given_axes = dict(batch_axes or {})
    names = [s.name for s in specs]
    for name in [*settings, *given_axes]:
        if name not in names:
            raise UsageError(
                f"input '{name}' | is not an input of {model_name}; its inputs are {', '.join(names)}.",
                hint="check the input names with 'deploykit inspect MODEL'.",
            )
    batch_symbols = {s.shape[0] for s in specs if s.shape and isinstance(s.shape[0], str)}
    axes = {s.name: batch_axis_of(s, batch_symbols, given_axes) for s in specs}
    for spec in specs:
        axis = axes[spec.name]
        if axis is not None and spec.shape is not None and axis >= len(spec.shape):
            raise UsageError(
                f"--batch-axis {spec.name}:{axis} | input '{spec.name}' has rank {len(spec.shape)} "
                f"{spec.shape_text()}.",
                hint=f"name an axis from 0 to {len(spec.shape) - 1}.",
            )
    if batch is not None and batch < 1:
        raise UsageError(f"batch {batch} | must be at least 1.", hint="e.g. --batch 1.")
    chosen = batch or model_batch(specs, given_axes)
    if batch is not None and all(axis is None for axis in axes.values()):
        fixed = next((s for s in specs if s.shape and isinstance(s.shape[0], int) and s.shape[0] != batch), None)
        if fixed is not None:
            assert fixed.shape is not None
            raise UsageError(
                f"batch {batch} | input '{fixed.name}' of {model_name} has a fixed batch of {fixed.shape[0]}.",
                hint=f"use --batch {fixed.shape[0]}, or re-export the model with a dynamic batch "
                f"(deploykit convert ... --dynamic {fixed.name}:0=batch).",
            )
    image = image_size_from_metadata(metadata or {})
    shapes: dict[str, tuple[int, ...]] = {}
    sources: dict[str, str] = {}
    for spec in specs:
        setting = settings.get(spec.name, InputSetting())
        if setting.shape is not None:
            shapes[spec.name] = _check_given_shape(spec, setting.shape)
            sources[spec.name] = "--shape"
            continue
        if spec.shape is None:
            raise UsageError(
                f"input '{spec.name}' | has unknown rank in {model_name}, so no data can be made for it.",
                hint=f"give its shape: --shape {spec.name}:1x3x224x224 (or pass real inputs).",
            )
        dims: list[int] = []
        reasons = set()
        for index, dim in enumerate(spec.shape):
            if index == axes[spec.name]:
                if isinstance(dim, int) and dim != chosen:
                    raise UsageError(
                        f"batch {chosen} | input '{spec.name}' of {model_name} has a fixed batch of {dim}.",
                        hint=f"use --batch {dim}, or re-export the model with a dynamic batch "
                        f"(deploykit convert ... --dynamic {spec.name}:{index}=batch).",
                    )
                dims.append(chosen)
                reasons.add("batch")
            elif isinstance(dim, int):
                if dim == 0:
                    raise UsageError(
                        f"input '{spec.name}' | axis {index} of {spec.shape_text()} is declared with size 0 in "
                        f"{model_name}: a zero-size input holds no values, so there is nothing to run, time or "
                        "verify on it.",
                        hint="re-export the model with a real size (or a dynamic axis) there; to run it empty "
                        "anyway, feed arrays of that shape from a file (--inputs, or -i NAME=FILE for run).",
                    )
                dims.append(dim)
            elif image is not None and len(spec.shape) == 4 and index in (2, 3):
                dims.append(image[0][index - 2])
                reasons.add(image[1])
            else:
                label = f"'{dim}'" if isinstance(dim, str) else "unnamed"
                example = "x".join(str(d) if isinstance(d, int) else "N" for d in spec.shape)
                raise UsageError(
                    f"input '{spec.name}' | axis {index} ({label}) of {spec.shape_text()} is dynamic and "
                    f"{model_name} says no size for it (no deploykit or Ultralytics metadata).",
                    hint=f"give the shape to feed: --shape {spec.name}:{example} with N replaced by the size "
                    "(or shapes={...} in Python), or pass real inputs.",
                )
        shapes[spec.name] = tuple(dims)
        sources[spec.name] = ", ".join(sorted(reasons)) or "fixed by the model"
    return InputPlan(shapes, axes, chosen, sources)


def _check_given_shape(spec: TensorSpec, shape: tuple[int, ...]) -> tuple[int, ...]:
    if spec.shape is None:
        return shape
    if len(shape) != len(spec.shape) or any(
        isinstance(d, int) and d != s for d, s in zip(spec.shape, shape, strict=False)
    ):
        raise UsageError(
            f"--shape {spec.name}:{'x'.join(map(str, shape))} | does not fit input '{spec.name}' {spec.shape_text()}.",
            hint="keep the rank and every fixed size; choose only the dynamic ones.",
        )
    return shape


def _memory_limit_bytes() -> int:
    """The most one array may take: 4 GiB, half the machine's memory, a quarter of an address-space
    limit (``ulimit -v``: the runtimes' own mappings take much of it)."""
    limit = MAX_RANDOM_BYTES
    try:
        limit = min(limit, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2)
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import resource

        address_space = resource.getrlimit(resource.RLIMIT_AS)[0]
        if address_space != resource.RLIM_INFINITY:
            limit = min(limit, address_space // 4)
    except (ImportError, ValueError, OSError):
        pass
    return int(limit)


def _format_bytes(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if count < 1024 or unit == "EiB":
            return f"{count:.3g} {unit}"
        count /= 1024
    return f"{count:.3g} EiB"


def check_allocation(name: str, shape: Sequence[int], dtype: np.dtype[Any]) -> None:
    """Refuse to make an array that cannot fit, before numpy tries.

    Raises:
        InputError: naming the input, the shape, the size it would take and the limit.
    """
    count = 1
    for dim in shape:
        count *= int(dim)
    size = count * np.dtype(dtype).itemsize
    limit = _memory_limit_bytes()
    if size > limit:
        raise InputError(
            f"input '{name}' | random data of shape {tuple(int(d) for d in shape)} ({np.dtype(dtype).name}) would "
            f"take {_format_bytes(size)}; deploykit makes at most {_format_bytes(limit)} per input.",
            hint="pass a smaller --shape, or real data from a .npy/.npz file.",
        )


_NUMPY_FLOATS = (np.float16, np.float32, np.float64)


def random_array(
    spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator, setting: InputSetting | None = None
) -> np.ndarray:
    """Data that suits the dtype: floats in [-1, 1), ints in [0, 8) or the given inclusive range, bools."""
    check_allocation(spec.name, shape, spec.dtype)
    kind = spec.dtype.kind
    if setting is not None and setting.low is not None and setting.high is not None:
        if kind not in "iu":
            raise UsageError(
                f"--shape {spec.name} | a LOW..HIGH range is for integer inputs; '{spec.name}' is {spec.dtype.name}.",
                hint=f"drop the range: --shape {spec.name}:{'x'.join(map(str, shape))}.",
            )
        info = np.iinfo(spec.dtype)
        if setting.low < info.min or setting.high > info.max:
            raise UsageError(
                f"--shape {spec.name} | range {setting.low}..{setting.high} does not fit {spec.dtype.name}.",
                hint=f"{spec.dtype.name} holds {info.min}..{info.max}.",
            )
        return rng.integers(setting.low, setting.high, size=shape, endpoint=True).astype(spec.dtype)
    if kind == "f" and spec.dtype.type in _NUMPY_FLOATS:  # ml_dtypes' float8_e5m2 says 'f' too; runtimes differ
        return rng.uniform(-1.0, 1.0, size=shape).astype(spec.dtype)
    if kind in "iu":
        return rng.integers(0, 8, size=shape).astype(spec.dtype)
    if kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    kinds = {
        "O": "a string tensor (ONNX STRING)",
        "U": "a string tensor",
        "S": "a bytes tensor",
        "c": "a complex tensor",
    }
    what = kinds.get(kind, f"a {spec.dtype.name} tensor")
    raise InputError(
        f"input '{spec.name}' | is {what}; deploykit makes random data only for numbers and booleans.",
        hint=f"pass real data: -i {spec.name}=file.npy, or an .npz holding '{spec.name}'.",
    )


def make_inputs(
    specs: Mapping[str, TensorSpec] | Sequence[TensorSpec],
    *,
    seed: int = 0,
    metadata: Mapping[str, str] | None = None,
    batch: int | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    settings: Mapping[str, InputSetting] | None = None,
    batch_axes: Mapping[str, int] | None = None,
    model_name: str = "the model",
) -> dict[str, np.ndarray]:
    """Seeded random feeds for every input; the same seed gives the same arrays.

    Shapes follow ``plan_inputs``: a size the model does not fix must come from ``shapes`` /
    ``settings``, the batch, or the model's metadata, else ``UsageError`` names the axis.
    """
    items = list(specs.values()) if isinstance(specs, Mapping) else list(specs)
    merged = dict(settings or {})
    for name, shape in (shapes or {}).items():
        merged[name] = InputSetting(
            tuple(int(d) for d in shape), *((merged[name].low, merged[name].high) if name in merged else (None, None))
        )
    plan = plan_inputs(items, metadata, batch=batch, settings=merged, batch_axes=batch_axes, model_name=model_name)
    rng = np.random.default_rng(check_seed(seed))
    return {s.name: random_array(s, plan.shapes[s.name], rng, merged.get(s.name)) for s in items}


def check_seed(seed: int) -> int:
    """A seed numpy accepts (``deploykit.validation.check_seed``), returned for use in an expression.

    Raises:
        UsageError: a negative seed or one past 2**32 - 1.
    """
    from deploykit.validation import check_seed as check

    check(seed)
    return seed


def fed_batch(feeds: Mapping[str, np.ndarray], batch_axes: Mapping[str, int | None]) -> int:
    """The batch actually fed: the size on the first batched input's batch axis (1 when none)."""
    for name, axis in batch_axes.items():
        if axis is not None and name in feeds and feeds[name].ndim > axis:
            return int(feeds[name].shape[axis])
    return 1


def load_arrays(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Arrays from an ``.npz`` (name → array) file.

    Raises:
        UsageError: the file is missing or not an npz archive.
    """
    from deploykit.io import regular_file_problem, shown

    file = Path(path)
    problem = regular_file_problem(path)
    if problem is not None:
        raise UsageError(
            f"inputs file '{shown(path)}' | {'does not exist' if problem == 'no such file' else problem}; "
            "expected a regular .npz file.",
            hint="pass an .npz file whose array names are the model's input names.",
        )
    import zipfile

    if not zipfile.is_zipfile(file):
        raise UsageError(
            f"inputs file '{shown(path)}' | is not an .npz archive (an .npz is a zip of .npy arrays).",
            hint="save the arrays with numpy.savez('inputs.npz', images=array, ...).",
        )
    _check_members(file, shown(path))
    from deploykit.workers import read_arrays

    try:
        with np.load(file, allow_pickle=False) as archive:
            if not hasattr(archive, "files"):
                raise ValueError("a single array, not an archive")
        return read_arrays(file)
    except Exception as exc:
        raise UsageError(
            f"inputs file '{file}' | cannot be read as .npz: {exc}.",
            hint="save inputs with np.savez(path, input_name=array, ...).",
        ) from exc


def _check_members(file: Path, name: str) -> None:
    """Refuse, before anything is inflated, an .npz member that is no .npy array or would take more
    than one array may (``_memory_limit_bytes``): its .npy header says its shape and dtype in the first
    bytes, and the zip entry its inflated size, so a zip bomb (1 GiB deflated to 1 MB) costs nothing."""
    import zipfile

    limit = _memory_limit_bytes()
    hint = "save smaller arrays (np.savez('inputs.npz', images=array, ...)), or feed them in batches."
    try:
        with zipfile.ZipFile(file) as archive:
            for entry in archive.infolist():
                member = f"inputs file '{name}' member '{entry.filename}'"
                if not entry.filename.endswith(".npy"):
                    raise InputError(
                        f"{member} | is not an .npy array; an .npz holds one NAME.npy per array.", hint=hint
                    )
                if entry.file_size > limit + 2**16:  # the header is small; the rest is the data
                    raise InputError(
                        f"{member} | inflates to {_format_bytes(entry.file_size)}; deploykit reads at most "
                        f"{_format_bytes(limit)} per array.",
                        hint=hint,
                    )
                with archive.open(entry) as stream:
                    version = np.lib.format.read_magic(stream)
                    shape, _, dtype = (
                        np.lib.format.read_array_header_1_0(stream)
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0(stream)
                    )
                size = int(np.prod(shape, dtype=object)) * dtype.itemsize
                if size > limit:
                    raise InputError(
                        f"{member} | declares shape {tuple(shape)} ({dtype.name}), which would take "
                        f"{_format_bytes(size)}; deploykit reads at most {_format_bytes(limit)} per array.",
                        hint=hint,
                    )
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):  # np.load says what is wrong, with its reason
        return


def _once(given: dict[str, str], name: str, value: str) -> None:
    if name in given:
        raise UsageError(
            f"--input '{name}' | is given twice ({given[name]} and {value}); expected each input once.",
            hint=f"keep one --input for '{name}'.",
        )
    given[name] = value


def parse_input_options(
    values: Sequence[str],
    specs: Mapping[str, TensorSpec],
    *,
    seed: int = 0,
    metadata: Mapping[str, str] | None = None,
    settings: Mapping[str, InputSetting] | None = None,
) -> dict[str, np.ndarray]:
    """Feeds from CLI ``--input`` values: ``name=random``, ``name=random:1x3x8x8``,
    ``name=file.npy``, or ``file.npz`` for several inputs at once. Inputs not named
    get seeded random data, shaped as ``plan_inputs`` decides."""
    feeds: dict[str, np.ndarray] = {}
    merged = dict(settings or {})
    given: dict[str, str] = {}  # input name → the --input value that set it: each input is set once
    for value in values:
        name, sep, source = value.partition("=")
        if not sep:
            arrays = load_arrays(value)
            if not arrays:  # feeding nothing would quietly make every input random
                raise UsageError(
                    f"--input '{value}' | the .npz holds no arrays; expected one array per input it feeds.",
                    hint="save the arrays with numpy.savez('inputs.npz', x=array, ...), or pass NAME=random.",
                )
            for key in arrays:
                _once(given, key, f"{value} (its array '{key}')")
            feeds.update(arrays)
            continue
        _once(given, name, value)
        if name not in specs:
            raise UsageError(
                f"--input '{value}' | '{name}' is not an input of the model; inputs are {', '.join(specs)}.",
                hint="check the input names with 'deploykit inspect MODEL'.",
            )
        if source == "random" or source.startswith("random:"):
            if source.startswith("random:"):
                merged[name] = InputSetting(parse_shape(source.partition(":")[2]))
            continue
        feeds[name] = _load_npy(name, source)
    missing = {n: s for n, s in specs.items() if n not in feeds}
    if missing:
        symbols = _fed_symbols(specs, feeds)
        for name, spec in missing.items():
            if name not in merged and spec.shape and all(isinstance(d, int) or d in symbols for d in spec.shape):
                merged[name] = InputSetting(tuple(d if isinstance(d, int) else symbols[str(d)] for d in spec.shape))
        batch_axes = {s.name: batch_axis_of(s, set(), {}) for s in specs.values()}
        batched = any(axis is not None and name in feeds for name, axis in batch_axes.items())
        plan = plan_inputs(
            list(missing.values()),
            metadata,
            settings={n: v for n, v in merged.items() if n in missing},
            batch=fed_batch(feeds, batch_axes) if batched else None,
        )
        rng = np.random.default_rng(check_seed(seed))
        feeds.update({n: random_array(s, plan.shapes[n], rng, merged.get(n)) for n, s in missing.items()})
    return feeds


def _fed_symbols(specs: Mapping[str, TensorSpec], feeds: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Sizes of symbolic dimensions as the given arrays fix them."""
    symbols: dict[str, int] = {}
    for name, array in feeds.items():
        shape = specs[name].shape if name in specs else None
        if shape and len(shape) == np.ndim(array):
            for dim, size in zip(shape, np.shape(array), strict=True):
                if isinstance(dim, str):
                    symbols.setdefault(dim, int(size))
    return symbols


def _load_npy(name: str, source: str) -> Any:
    from deploykit.io import shown, special_file_problem

    path = Path(source)
    problem = special_file_problem(path) if path.suffix == ".npy" or os.path.lexists(path) else None
    if problem is not None:
        raise UsageError(
            f"--input '{name}={shown(source)}' | {problem}; expected a .npy file.",
            hint="save an array with np.save('x.npy', array).",
        )
    if path.suffix != ".npy" or not path.is_file():
        raise UsageError(
            f"--input '{name}={source}' | expected 'random', 'random:SHAPE' or an existing .npy file.",
            hint="save an array with np.save('x.npy', array).",
        )
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic != b"\x93NUMPY":
        raise UsageError(
            f"--input '{name}={source}' | is not a .npy file (it does not start with NumPy's header).",
            hint="save an array with np.save('x.npy', array); text or CSV data must be converted first.",
        )
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:
        raise UsageError(
            f"--input '{name}={source}' | cannot read the .npy file: {exc}.",
            hint="save an array with np.save('x.npy', array).",
        ) from exc
