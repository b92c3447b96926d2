"""One meaning of ``--json`` in every command, checked on the real command tree, and 0.1's forms of it
still working for one release with a deprecation line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from deploykit.cli.main import app
from deploykit.cli.vocabulary import DEPRECATED, modernize

runner = CliRunner()

NO_JSON = {
    "demo": "a guided tour that writes a folder of files and tells the story as it goes",
    "report": "shows a report.json (already JSON) as tables, or merges reports into HTML; a regression is its exit status",
    "serve": "a server: its answers are the KServe v2 JSON over HTTP and gRPC",
    "convert torch": "writes a model; its report goes to --report DIR (report.json)",
    "convert darknet": "writes a model; its report goes to --report DIR (report.json)",
    "export ncnn": "writes ncnn's .param/.bin files and says where",
    "export mnn": "writes MNN's .mnn file and its .json and says where",
    "export litert": "writes the .tflite file and its .json and says where",
    "converters add": "creates a converter environment in the cache; says where and how long it took",
    "converters remove": "removes a converter environment from the cache",
    "models build": "writes a model; its report goes to --report DIR (report.json)",
    "fleet join": "starts a Ray worker and waits; it has no result to print",
    "platforms add": "prepares an emulated target in the cache; says what it installed",
    "platforms remove": "removes an emulated target from the cache",
}
"""Commands without ``--json``, each with why it has no machine-readable result on stdout."""


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every command and group of the real app, by its command line (``models list``); the root is ''."""
    yield " ".join(path), command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = dict(_commands(typer.main.get_command(app)))
LEAVES = sorted(name for name, command in COMMANDS.items() if not getattr(command, "commands", None))


def _json_options(command: Any) -> list[Any]:
    return [param for param in command.params if any(opt.startswith("--json") for opt in param.opts)]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_json_is_a_flag_that_prints_json_on_stdout(name):
    for option in _json_options(COMMANDS[name]):
        if option.hidden:  # 0.1's file form, reached only through the deprecation table
            continue
        assert option.opts == ["--json"] and not option.secondary_opts, (name, option.opts)
        assert option.is_flag and not option.multiple and option.default is False, f"'{name} --json' takes a value"
        assert "JSON on stdout" in option.help, (name, option.help)


@pytest.mark.parametrize("name", LEAVES)
def test_every_command_prints_json_or_says_why_not(name):
    has_json = any(not option.hidden for option in _json_options(COMMANDS[name]))
    assert has_json != (name in NO_JSON), (
        f"'{name}': a command with a result takes --json (cli.options.Json), or is listed in NO_JSON with why not"
    )


def test_a_hidden_option_is_only_the_target_of_a_deprecated_spelling():
    """A hidden option exists so that an old form keeps working: the deprecation table rewrites to it."""
    targets = {(command, d.new) for d in DEPRECATED for command in d.commands}
    for name, command in COMMANDS.items():
        for param in command.params:
            if getattr(param, "hidden", False):
                assert any((name, opt) in targets for opt in param.opts), (name, param.opts)


def test_no_command_in_the_exemptions_is_gone():
    assert set(NO_JSON) <= set(LEAVES)


@pytest.mark.parametrize(
    "args, expected, line",
    [
        (["predict", "m.onnx", "clip.mp4", "--json", "-"], ["predict", "m.onnx", "clip.mp4", "--json"],
         "'deploykit predict --json -' is deprecated; use --json (--json is a flag in every command: JSON on stdout)"),
        (["predict", "m.onnx", "clip.mp4", "--json=-"], ["predict", "m.onnx", "clip.mp4", "--json"], "--json -"),
        (["predict", "m.onnx", "dog.jpg", "--json", "dog.json"], ["predict", "m.onnx", "dog.jpg", "--output", "dog.json"],
         "'deploykit predict --json FILE' is deprecated; use -o FILE.json (--json is a flag in every command: "
         "JSON on stdout; -o writes the file)"),
        (["quantize", "m.onnx", "-c", "photos", "--json", "q.JSON"],
         ["quantize", "m.onnx", "-c", "photos", "--json-file", "q.JSON"],
         "'deploykit quantize --json FILE' is deprecated; use --json > FILE"),
        (["predict", "--json", "m.onnx", "dog.jpg"], ["predict", "--json", "m.onnx", "dog.jpg"], None),
        (["quantize", "m.onnx", "--json", "-c", "photos"], ["quantize", "m.onnx", "--json", "-c", "photos"], None),
        (["bench", "m.onnx", "--json", "x.json"], ["bench", "m.onnx", "--json", "x.json"], None),
    ],
)  # fmt: skip
def test_old_json_forms_are_rewritten_with_one_line(args, expected, line):
    said: list[str] = []
    assert modernize(args, said.append) == expected
    if line is None:
        assert said == []
    else:
        assert len(said) == 1 and line in said[0] and "goes in the next release" in said[0]


@pytest.fixture(scope="module")
def classifier(tiny):
    return tiny["classifier"], tiny["image"]


def test_predict_json_prints_json_lines_on_stdout(classifier):
    model, image = classifier
    result = runner.invoke(app, ["predict", str(model), str(image), "--json"])
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert json.loads(line)["source"]
    assert "deprecated" not in result.stderr


def test_predict_old_json_dash_still_prints_the_same_lines(classifier):
    model, image = classifier
    new = runner.invoke(app, ["predict", str(model), str(image), "--json"])
    old = runner.invoke(app, ["predict", str(model), str(image), "--json", "-"])
    assert old.exit_code == 0, old.output
    assert "'deploykit predict --json -' is deprecated; use --json" in old.stderr
    strip = [
        {k: v for k, v in json.loads(line).items() if k not in ("timing", "time_s")} for line in old.stdout.splitlines()
    ]
    assert strip == [
        {k: v for k, v in json.loads(line).items() if k not in ("timing", "time_s")} for line in new.stdout.splitlines()
    ]


def test_predict_one_image_document_goes_to_output_and_the_old_form_still_writes_it(classifier, tmp_path):
    model, image = classifier
    result = runner.invoke(app, ["predict", str(model), str(image), "-o", str(tmp_path / "new.json")])
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "new.json").read_text())
    assert document["task"] == "classify" and document["results"]
    old = runner.invoke(app, ["predict", str(model), str(image), "--json", str(tmp_path / "old.json")])
    assert old.exit_code == 0, old.output
    assert "'deploykit predict --json FILE' is deprecated; use -o FILE.json" in old.stderr
    assert json.loads((tmp_path / "old.json").read_text())["results"] == document["results"]


def test_predict_json_document_is_for_one_image(classifier, tmp_path):
    model, photo = classifier
    result = runner.invoke(app, ["predict", str(model), str(photo), str(photo), "-o", str(tmp_path / "rows.json")])
    assert result.exit_code == 2
    shown = " ".join(result.stderr.split())
    assert (
        "writes one JSON document for one image" in shown and "Hint: pass -o FILE.jsonl for a file, or --json" in shown
    )
    assert not (tmp_path / "rows.json").exists()


def test_the_one_image_document_onto_its_input_is_refused(classifier, tmp_path):
    model, image = classifier
    photo = tmp_path / "photo.json"  # a JPEG under a .json name: the image is read by its content
    photo.write_bytes(image.read_bytes())
    before = photo.read_bytes()
    result = runner.invoke(app, ["predict", str(model), str(photo), "-o", str(photo)])
    assert result.exit_code == 2
    assert "is the file this command reads" in result.stderr and photo.read_bytes() == before


@pytest.mark.parametrize(
    "args",
    [
        ["version"],
        ["backends"],
        ["inspect", "{dynamic}"],
        ["run", "{dynamic}", "-b", "ort"],
        ["compare", "{dynamic}", "-b", "ort"],
        ["bench", "{dynamic}", "-b", "ort", "-n", "2", "--warmup", "0"],
        ["models", "list"],
        ["models"],
        ["platforms", "list", "--no-self-test"],
    ],
    ids=lambda args: " ".join(a for a in args if not a.startswith("{")),
)
def test_json_output_is_one_json_document_on_stdout(tiny, args):
    """What ``--json`` prints parses as JSON whole: nothing else is mixed into stdout."""
    argv = [arg.format(**{k: str(v) for k, v in tiny.items()}) for arg in args]
    result = runner.invoke(app, [*argv, "--json"] if argv != ["models"] else ["models", "--json"])
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)
