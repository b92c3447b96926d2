"""A model's metadata, read once through one typed reader.

deploykit's converters and recipes stamp ``metadata_props`` with ``deploykit.*`` keys (the task,
the image input's size and pre-processing, the labels, Darknet's heads); Ultralytics exports write
``task``, ``names`` and ``imgsz``. Every consumer (pipelines, predict, the task metric, the server)
reads them here, so a value of the wrong type, a negative or absurd size, a NaN scale or labels
that are not strings is one clear error that names the key, never a traceback or a silent default
somewhere downstream::

    model 'm.onnx' metadata 'deploykit.input' | 'size' is [-32, 32]; expected [height, width], two
    integers from 1 to 16384. Hint: fix the key (onnx.load, edit metadata_props, onnx.save) or ...

Foreign keys (Ultralytics') that cannot be parsed are left unused, as if absent: deploykit does not
own their format. Unknown keys are ignored.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from deploykit.errors import MetadataError
from deploykit.tasks import TASKS as REGISTERED_TASKS

TASK = "deploykit.task"
INPUT = "deploykit.input"
LABELS = "deploykit.labels"
HEAD = "deploykit.head"
DARKNET_HEADS = "deploykit.darknet.heads"
RECIPE = "deploykit.recipe"
WEIGHTS = "deploykit.weights"
CONVERTER = "deploykit.converter"
SOURCE = "deploykit.source"
QUANTIZE = "deploykit.quantize"

TASKS = tuple(REGISTERED_TASKS)  # the task registry's names: one spelling each
RESIZES = ("letterbox", "stretch", "center-crop")
CHANNEL_ORDERS = ("RGB", "BGR")
HEAD_FORMS = ("raw", "decoded", "none")
MAX_SIDE = 16384  # pixels: larger than any camera frame a model takes; 100000² would be 30 GB of floats
MAX_LABELS = 1_000_000
_HINT = (
    "fix or remove the key (onnx.load the model, edit model.metadata_props, onnx.save), or convert the model "
    "again with deploykit."
)


@dataclass(frozen=True)
class InputMetadata:
    """The image input as ``deploykit.input`` describes it; a field not stored is None."""

    name: str | None = None
    size: tuple[int, int] | None = None
    channels: int | None = None
    channel_order: str | None = None
    scale: float | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    resize: str | None = None
    pad_value: float | None = None  # 0..1 of the full range


@dataclass(frozen=True)
class ModelMetadata:
    """What a model's metadata says, checked.

    Attributes:
        task: a registered task (``deploykit.tasks``; deploykit's key, else Ultralytics' ``task: detect``), or None.
        input: the image input's settings (``deploykit.input``).
        size: (height, width) from ``deploykit.input``, else Ultralytics' ``imgsz``, or None.
        size_source: where ``size`` came from, as messages say it.
        labels: class names (``deploykit.labels``, else Ultralytics' ``names``), or None.
        head: ``raw``/``decoded``/``none`` for Darknet conversions, else None.
        darknet_heads: the Darknet YOLO heads (output name, type, classes, anchors, grid ...), checked.
        recipe: the recipe that built the model (``deploykit.recipe``), or None.
        weights: where the recipe's weights came from (``deploykit.weights``), or None.
        converter: the converter that wrote it (``deploykit.converter``: ``darknet``, ``torch 2.x ...``).
        source: what it was converted from (``deploykit.source``), or None.
        quantize: ``deploykit quantize``'s record of a reduced model (``deploykit.quantize``), or None.
        raw: every key as stored.
    """

    task: str | None = None
    input: InputMetadata = field(default_factory=InputMetadata)
    size: tuple[int, int] | None = None
    size_source: str = ""
    labels: tuple[str, ...] | None = None
    head: str | None = None
    darknet_heads: tuple[Mapping[str, Any], ...] = ()
    recipe: str | None = None
    weights: str | None = None
    converter: str | None = None
    source: str | None = None
    quantize: Mapping[str, Any] | None = None
    raw: Mapping[str, str] = field(default_factory=dict)


def read_metadata(metadata: Mapping[str, str] | ModelMetadata, model: str = "the model") -> ModelMetadata:
    """Check and type a model's ``metadata_props`` (key → string); ``model`` names it in errors.
    Metadata already typed (a ``Model``'s ``metadata``) is returned as it is, not read again.

    Raises:
        MetadataError: a ``deploykit.*`` value is not valid JSON, has the wrong type or an impossible value.
    """
    if isinstance(metadata, ModelMetadata):
        return metadata
    reader = _Reader(model)
    stored = reader.input(metadata.get(INPUT))
    size, size_source = stored.size, "deploykit metadata" if stored.size else ""
    if size is None and (imgsz := _ultralytics_size(metadata.get("imgsz"))) is not None:
        size, size_source = imgsz, "Ultralytics imgsz metadata"
    labels = reader.labels(metadata.get(LABELS))
    if labels is None:
        labels = _ultralytics_names(metadata.get("names"))
    task = reader.choice(TASK, metadata.get(TASK), TASKS)
    if task is None and metadata.get("task") == "detect":
        task = "detect"
    return ModelMetadata(
        task=task,
        input=stored,
        size=size,
        size_source=size_source,
        labels=labels,
        head=reader.choice(HEAD, metadata.get(HEAD), HEAD_FORMS),
        darknet_heads=reader.heads(metadata.get(DARKNET_HEADS)),
        recipe=metadata.get(RECIPE),
        weights=metadata.get(WEIGHTS),
        converter=metadata.get(CONVERTER),
        source=metadata.get(SOURCE),
        quantize=reader.record(QUANTIZE, metadata.get(QUANTIZE)),
        raw=dict(metadata),
    )


class _Reader:
    def __init__(self, model: str) -> None:
        self.model = model

    def fail(self, key: str, problem: str) -> MetadataError:
        return MetadataError(f"model '{self.model}' metadata '{key}' | {problem}", hint=_HINT)

    def json(self, key: str, text: str) -> Any:
        try:
            return json.loads(text, parse_constant=lambda name: _Invalid(name))
        except json.JSONDecodeError as exc:
            raise self.fail(key, f"is not valid JSON ({exc.msg} at character {exc.pos}).") from exc
        except ValueError as exc:
            raise self.fail(key, f"is not valid JSON ({exc}).") from exc
        except RecursionError as exc:
            raise self.fail(key, "is JSON nested too deeply to read.") from exc

    def choice(self, key: str, text: str | None, allowed: Sequence[str]) -> str | None:
        if text is None:
            return None
        if text not in allowed:
            raise self.fail(key, f"is {_show(text)}; expected one of {', '.join(allowed)}.")
        return text

    def input(self, text: str | None) -> InputMetadata:
        if text is None:
            return InputMetadata()
        value = self.json(INPUT, text)
        if not isinstance(value, dict):
            raise self.fail(
                INPUT,
                f"is a JSON {_kind(value)}; expected an object such as "
                '{"size": [416, 416], "channel_order": "RGB", "scale": 0.0039}.',
            )
        channels = self.integer(value, "channels", low=1, high=64)
        count = channels or 3
        return InputMetadata(
            name=self.text(value, "name"),
            size=self.size(value),
            channels=channels,
            channel_order=self.option(value, "channel_order", CHANNEL_ORDERS),
            scale=self.number(value, "scale", positive=True),
            mean=self.numbers(value, "mean", count),
            std=self.numbers(value, "std", count, positive=True),
            resize=self.option(value, "resize", RESIZES),
            pad_value=self.number(value, "pad_value", low=0.0, high=1.0),
        )

    def _value(self, value: Mapping[str, Any], name: str) -> Any:
        item = value.get(name)
        if isinstance(item, _Invalid):
            raise self.fail(INPUT, f"'{name}' is {item.name}; expected a finite number.")
        return item

    def text(self, value: Mapping[str, Any], name: str) -> str | None:
        item = self._value(value, name)
        if item is not None and not isinstance(item, str):
            raise self.fail(INPUT, f"'{name}' is {_show(item)}; expected a string.")
        return item

    def option(self, value: Mapping[str, Any], name: str, allowed: Sequence[str]) -> str | None:
        item = self._value(value, name)
        if item is not None and item not in allowed:
            raise self.fail(INPUT, f"'{name}' is {_show(item)}; expected one of {', '.join(allowed)}.")
        return item

    def integer(self, value: Mapping[str, Any], name: str, *, low: int, high: int) -> int | None:
        item = self._value(value, name)
        if item is None:
            return None
        if isinstance(item, bool) or not isinstance(item, int) or not low <= item <= high:
            raise self.fail(INPUT, f"'{name}' is {_show(item)}; expected an integer from {low} to {high}.")
        return item

    def size(self, value: Mapping[str, Any]) -> tuple[int, int] | None:
        item = self._value(value, "size")
        if item is None:
            return None
        if not isinstance(item, list) or len(item) != 2 or not all(_is_side(s) for s in item):
            raise self.fail(
                INPUT, f"'size' is {_show(item)}; expected [height, width], two integers from 1 to {MAX_SIDE}."
            )
        return int(item[0]), int(item[1])

    def number(
        self,
        value: Mapping[str, Any],
        name: str,
        *,
        positive: bool = False,
        low: float | None = None,
        high: float | None = None,
    ) -> float | None:
        item = self._value(value, name)
        if item is None:
            return None
        ok = isinstance(item, int | float) and not isinstance(item, bool) and math.isfinite(item)
        ok = ok and (not positive or item > 0) and (low is None or item >= low) and (high is None or item <= high)
        if not ok:
            expected = (
                "a finite number above 0"
                if positive
                else f"a number from {low:g} to {high:g}"
                if low is not None and high is not None
                else "a finite number"
            )
            raise self.fail(INPUT, f"'{name}' is {_show(item)}; expected {expected}.")
        return float(item)

    def numbers(
        self, value: Mapping[str, Any], name: str, count: int, *, positive: bool = False
    ) -> tuple[float, ...] | None:
        item = self._value(value, name)
        if item is None:
            return None
        expected = f"a list of {count} finite numbers" + (" above 0" if positive else "") + " (one per channel)"
        if not isinstance(item, list) or len(item) != count:
            raise self.fail(INPUT, f"'{name}' is {_show(item)}; expected {expected}.")
        for element in item:
            if (
                isinstance(element, bool)
                or not isinstance(element, int | float)
                or not math.isfinite(element)
                or (positive and element <= 0)
            ):
                raise self.fail(INPUT, f"'{name}' is {_show(item)}; expected {expected}.")
        return tuple(float(e) for e in item)

    def labels(self, text: str | None) -> tuple[str, ...] | None:
        if text is None:
            return None
        value = self.json(LABELS, text)
        if not isinstance(value, list) or not value or not all(isinstance(n, str) for n in value):
            raise self.fail(LABELS, f"is {_show(value)}; expected a JSON list of class names (strings).")
        if len(value) > MAX_LABELS:
            raise self.fail(LABELS, f"has {len(value)} names; expected at most {MAX_LABELS}.")
        return tuple(value)

    def record(self, key: str, text: str | None) -> Mapping[str, Any] | None:
        if text is None:
            return None
        value = self.json(key, text)
        if not isinstance(value, dict):
            raise self.fail(key, f"is a JSON {_kind(value)}; expected an object.")
        return _plain(value)  # a record may hold NaN (an accuracy not measured): kept as the float it was

    def heads(self, text: str | None) -> tuple[Mapping[str, Any], ...]:
        if text is None:
            return ()
        value = self.json(DARKNET_HEADS, text)
        if not isinstance(value, list):
            raise self.fail(DARKNET_HEADS, f"is a JSON {_kind(value)}; expected a list of head objects.")
        for index, head in enumerate(value):
            problem = _head_problem(head)
            if problem:
                raise self.fail(DARKNET_HEADS, f"head {index} {problem}")
        return tuple(value)


def _head_problem(head: Any) -> str | None:
    if not isinstance(head, dict):
        return f"is {_show(head)}; expected an object."
    if not isinstance(head.get("output"), str):
        return f"has output {_show(head.get('output'))}; expected the name of a model output."
    if head.get("type") not in ("yolo", "region"):
        return f"has type {_show(head.get('type'))}; expected yolo or region."
    classes = head.get("classes")
    if isinstance(classes, bool) or not isinstance(classes, int) or not 1 <= classes <= MAX_LABELS:
        return f"has classes {_show(classes)}; expected an integer from 1 to {MAX_LABELS}."
    anchors = head.get("anchors")
    if not isinstance(anchors, list) or not anchors or not all(_positive_pair(a, float) for a in anchors):
        return f"has anchors {_show(anchors)}; expected a list of [width, height] pairs of finite numbers above 0."
    for name in ("grid", "input_size"):
        if name in head and not _positive_pair(head[name], int):
            return f"has {name} {_show(head[name])}; expected two integers from 1 to {MAX_SIDE}."
    return None


def _is_side(value: Any) -> bool:
    """An image side in pixels: an integer (not a bool) from 1 to MAX_SIDE."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_SIDE


def _positive_pair(item: Any, kind: type) -> bool:
    if not isinstance(item, list) or len(item) != 2:
        return False
    for element in item:
        if isinstance(element, bool) or not isinstance(element, int | float):
            return False
        if kind is int and (not isinstance(element, int) or element > MAX_SIDE):
            return False
        if not (math.isfinite(element) and element > 0):
            return False
    return True


def _ultralytics_size(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        size = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    size = [size, size] if isinstance(size, int) else size
    if isinstance(size, list | tuple) and len(size) == 2 and all(_is_side(s) for s in size):
        return int(size[0]), int(size[1])
    return None


def _ultralytics_names(text: str | None) -> tuple[str, ...] | None:
    """Ultralytics' ``names``: a Python dict literal ``{0: 'person', ...}`` (or a list)."""
    if text is None:
        return None
    try:
        names = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if isinstance(names, dict) and all(isinstance(k, int) for k in names):
        names = [names[k] for k in sorted(names)]
    if isinstance(names, list | tuple) and names and all(isinstance(n, str) for n in names):
        return tuple(names)
    return None


class _Invalid:
    """NaN, Infinity or -Infinity in JSON (Python's json accepts them; the metadata must not)."""

    def __init__(self, name: str) -> None:
        self.name = name


def _plain(value: Any) -> Any:
    """``value`` with NaN/Infinity as floats again, so it is shown as the file wrote it."""
    if isinstance(value, _Invalid):
        return float(value.name)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _show(value: Any, limit: int = 80) -> str:
    if isinstance(value, _Invalid):
        return value.name
    text = json.dumps(_plain(value), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"
