"""Validating a benchmark report read from disk against the report schema (``report_schema.json``, package
data of ``deploykit.bench``; ``docs/report-schema.json`` links to it).

A hand-edited, truncated or foreign report must fail with the JSON path of the first bad
field (``rows[3].latency: expected object, got null``), never with a ``TypeError`` deep in
the rendering code. The validator covers the JSON Schema keywords the schema uses (type,
required, properties, items, $ref, enum, const, oneOf, allOf, if/then, minimum,
exclusiveMinimum, maximum, pattern), so reading reports needs no extra package.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from deploykit.errors import ReportError

SCHEMA_NAME = "report_schema.json"

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


@cache
def report_schema() -> dict[str, Any]:
    """The report schema, installed with the package (a wheel carries it as package data).

    Raises:
        ReportError: the file is missing or unreadable (a broken installation): validation never turns
            itself off.
    """
    try:
        schema: dict[str, Any] = json.loads(resources.files("deploykit.bench").joinpath(SCHEMA_NAME).read_text())
    except (OSError, ValueError) as exc:
        raise ReportError(
            f"report schema '{SCHEMA_NAME}' | cannot be read from this deploykit installation ({exc}); "
            "expected it beside deploykit/bench/report_schema.py.",
            hint="reinstall deploykit (pip install --force-reinstall deploykit).",
        ) from exc
    return schema


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string" if isinstance(value, str) else type(value).__name__


def _is_type(value: Any, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, _TYPES.get(name, object))


def first_problem(value: Any, schema: dict[str, Any], root: dict[str, Any], where: str = "") -> str | None:
    """The first place ``value`` breaks ``schema``, as ``path: what was wrong``, or None."""
    here = where or "(the report)"
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return first_problem(value, target, root, where)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, n) for n in names):
            return f"{here}: expected {' or '.join(names)}, got {_type_name(value)}"
    if "const" in schema and value != schema["const"]:
        return f"{here}: expected {schema['const']!r}, got {value!r}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{here}: expected one of {', '.join(map(repr, schema['enum']))}, got {value!r}"
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{here}: {value} is below the minimum {schema['minimum']}"
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            return f"{here}: {value} must be greater than {schema['exclusiveMinimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{here}: {value} is above the maximum {schema['maximum']}"
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return f"{here}: {value!r} does not match {schema['pattern']}"
    if isinstance(value, dict):
        for key in schema.get("required", []):
            if key not in value:
                return f"{here}: required field '{key}' is missing"
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                problem = first_problem(value[key], sub, root, f"{where}.{key}" if where else key)
                if problem:
                    return problem
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            problem = first_problem(item, schema["items"], root, f"{where}[{index}]")
            if problem:
                return problem
    for sub in schema.get("allOf", []):
        problem = first_problem(value, sub, root, where)
        if problem:
            return problem
    if "oneOf" in schema:
        problems = [first_problem(value, sub, root, where) for sub in schema["oneOf"]]
        if sum(p is None for p in problems) != 1:
            found = [p for p in problems if p]
            if not found:
                return f"{here}: matches more than one allowed form"
            # A branch that looked inside the value says most ("required field 'oracle' is missing",
            # not "expected null"); when every branch refused the type, name all the allowed types.
            wrong_type = re.compile(rf"^{re.escape(here)}: expected ([a-z ]+), got \w+$")
            inside = [p for p in found if not wrong_type.match(p)]
            if inside:
                return max(inside, key=lambda p: len(p.split(": ", 1)[0]))
            allowed = dict.fromkeys(m.group(1) for p in found if (m := wrong_type.match(p)))
            return f"{here}: expected {' or '.join(allowed)}, got {_type_name(value)}"
    if "if" in schema and first_problem(value, schema["if"], root, where) is None and "then" in schema:
        return first_problem(value, schema["then"], root, where)
    return None


def validate_report(data: Any, path: str | Path) -> None:
    """Refuse a report that does not follow the schema, naming the first bad field.

    Raises:
        ReportError: ``report 'x.json' | rows[0].latency: expected object, got null.``
    """
    schema = report_schema()
    problem = first_problem(data, schema, schema)
    if problem:
        raise ReportError(
            f"report '{path}' | does not follow the report schema: {problem}.",
            hint="the file was edited or written by another tool; re-run deploykit bench --report to get a valid one.",
        )
