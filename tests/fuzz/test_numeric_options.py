"""Every numeric and duration option of every command, under values that are no value: NaN, infinities,
negatives, zero where one is needed, just past each bound, text, units nobody knows.

The options are found by walking the real command tree, so a new command or option is fuzzed the day it
is added, and one declared as a bare ``int``/``float`` (which would take ``nan`` or ``-1`` and print
nonsense) fails ``test_every_numeric_option_has_one_validated_type``. A refused value is a usage error
(exit 2) that names the flag, before any work; the hypothesis test draws arbitrary text and numbers and
checks that what the parser accepts is a finite number in its range, and what it refuses the command
refuses naming the flag.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from hypothesis import given, settings
from hypothesis import strategies as st

from deploykit.cli import options as opt
from deploykit.cli.main import app

from .harness import invoke_checked, usage_said

# Options that parse their own numbers on purpose, each built on the shared types (the type to fuzz them with).
OWN_PARSERS = {("serve", "--max-queue-delay"): opt.Duration(allow_zero=True)}
# Options whose names say "duration" must take the duration grammar.
DURATION_WORDS = ("timeout", "duration", "delay", "budget")


def _commands() -> Iterator[tuple[list[str], Any]]:
    def walk(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        children = getattr(command, "commands", None)
        if children:
            for name, child in children.items():
                yield from walk(child, [*path, name])
        else:
            yield path, command

    yield from walk(typer.main.get_command(app), [])


def _bare(annotation: Any) -> Any:
    """``float | None`` → float."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        return rest[0] if len(rest) == 1 else annotation
    return annotation


def _options() -> list[tuple[list[str], str, Any, Any]]:
    """(command path, flag, annotation, parser) of every option."""
    found = []
    for path, command in _commands():
        for param in command.params:
            if not getattr(param, "opts", None) or param.param_type_name != "option":
                continue
            descriptor = param.type_descriptor
            flag = max(param.opts, key=len)
            found.append((path, flag, _bare(descriptor.annotation), descriptor.parameter_info.parser))
    return found


OPTIONS = _options()
NUMERIC = [
    (path, flag, OWN_PARSERS.get((" ".join(path), flag), parser))
    for path, flag, _, parser in OPTIONS
    if isinstance(OWN_PARSERS.get((" ".join(path), flag), parser), opt.Number | opt.Duration)
]
CASES = [(path, flag, value) for path, flag, parser in NUMERIC for value in parser.bad_values()]


def test_every_numeric_option_has_one_validated_type():
    assert len(NUMERIC) >= 40, "the walk found too few numeric options"
    untyped = [
        f"{' '.join(path)} {flag}"
        for path, flag, annotation, parser in OPTIONS
        if annotation in (int, float) and not isinstance(parser, opt.Number | opt.Duration)
        and (" ".join(path), flag) not in OWN_PARSERS
    ]  # fmt: skip
    assert not untyped, f"numeric options without options.Number/Duration: {untyped}"
    durations = [
        f"{' '.join(path)} {flag}"
        for path, flag, _, parser in OPTIONS
        if any(word in flag for word in DURATION_WORDS)
        and not isinstance(OWN_PARSERS.get((" ".join(path), flag), parser), opt.Duration)
    ]
    assert not durations, f"duration options without the one grammar (options.Duration): {durations}"


@pytest.mark.parametrize(("path", "flag", "value"), CASES, ids=[f"{' '.join(p)} {f} {v!r}" for p, f, v in CASES])
def test_a_value_that_is_no_value_is_a_usage_error_naming_the_flag(path, flag, value):
    # The bad option comes first: click checks it before the (missing) arguments, so the command does no work.
    result = invoke_checked([*path, flag, value])
    said = usage_said(result.output)
    assert result.exit_code == 2, said
    assert f"Invalid value for '{flag}'" in said, said
    assert "expected" in said or "is not" in said, said


@settings(max_examples=150, derandomize=True, deadline=None)
@given(
    case=st.sampled_from([(path, flag, parser) for path, flag, parser in NUMERIC]),
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
        st.text(max_size=12),
        st.sampled_from(["1h", "2m", "500us", "1.5s", "0", "-0", "1e3", "0.0001", ".5", "5.", " 7 "]),
    ),
)
def test_what_a_parser_accepts_is_a_finite_number_in_range(case, value):
    path, flag, parser = case
    try:
        parsed = parser(value)
    except typer.BadParameter:
        if value.startswith("-") or not value.strip() or "\x00" in value:
            return  # click reads '-…' as an option and '' as nothing; the parser's refusal is checked directly
        result = invoke_checked([*path, flag, value])
        assert result.exit_code == 2 and f"Invalid value for '{flag}'" in usage_said(result.output), result.output
        return
    assert isinstance(parsed, int | float) and not isinstance(parsed, bool)
    assert math.isfinite(parsed), (flag, value, parsed)
    if isinstance(parser, opt.Number):
        assert parser.low is None or parsed >= parser.low, (flag, value, parsed)
        assert parser.high is None or parsed <= parser.high, (flag, value, parsed)
        assert not parser.integer or isinstance(parsed, int)
    else:
        assert 0 <= parsed <= 7 * 24 * 3600 and (parsed > 0 or parser.allow_zero), (flag, value, parsed)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500us", 5e-4),
        ("2ms", 2e-3),
        ("1.5s", 1.5),
        ("90s", 90.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("90", 90.0),
    ],
)
def test_one_duration_grammar_and_a_bare_number_is_seconds(text, seconds):
    assert opt.Duration()(text) == pytest.approx(seconds)


def test_the_old_bare_milliseconds_of_max_queue_delay_still_work_and_say_so():
    from deploykit.cli.serve_cmd import _queue_delay_ms

    assert _queue_delay_ms("2ms") == pytest.approx(2.0)
    assert _queue_delay_ms("500us") == pytest.approx(0.5)
    assert _queue_delay_ms("0") == 0
    result = invoke_checked(["serve", "--max-queue-delay", "5", "--http-port", "nope"])
    assert "--max-queue-delay 5 has no unit and is read as 5 ms" in usage_said(result.output)
