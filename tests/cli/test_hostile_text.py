"""Text from files never reaches the terminal raw, and a name given twice is refused (issue #21)."""

from __future__ import annotations

import json

import onnx
from typer.testing import CliRunner

from deploykit.cli.main import app

runner = CliRunner()
ESCAPES = "\x1b]0;pwned\x07\x1b[31mRED\x1b[0m \x9b2J"


def _evil_model(source, path):
    model = onnx.load(source)
    entry = model.metadata_props.add()
    entry.key, entry.value = "note", ESCAPES
    onnx.save(model, path)
    return path


def test_control_characters_in_metadata_are_shown_not_sent(catalog_paths, tmp_path):
    model = _evil_model(catalog_paths["conv_bn_act"], tmp_path / "evil.onnx")
    result = runner.invoke(app, ["inspect", str(model)])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout and "\x9b" not in result.stdout
    assert "␛]0;pwned" in result.stdout and "␛[31mRED␛[0m" in result.stdout  # visible pictures (rich drops the BEL)


def test_control_characters_in_an_error_are_shown_not_sent(tmp_path):
    result = runner.invoke(app, ["inspect", str(tmp_path / "a\x1b[2Jb.onnx")])
    assert result.exit_code == 1
    assert "\x1b" not in result.stderr and "a␛[2Jb.onnx" in result.stderr


def test_an_input_given_twice_is_refused(catalog_paths):
    result = runner.invoke(
        app, ["run", str(catalog_paths["conv_bn_act"]), "-i", "x=random", "-i", "x=random:1x3x16x16"]
    )
    assert result.exit_code == 2
    assert "--input 'x' | is given twice (x=random and x=random:1x3x16x16); expected each input once" in result.stderr


def test_an_option_given_twice_is_refused(catalog_paths):
    result = runner.invoke(app, ["run", str(catalog_paths["conv_bn_act"]), "-o", "threads=1", "-o", "threads=2"])
    assert result.exit_code == 2
    assert "--option 'threads' | is given twice (threads=1 and threads=2)" in result.stderr


def test_a_newline_or_cr_inside_a_one_line_field_is_shown_not_sent(tiny, tmp_path):
    """A label, metadata value, tensor name or path with LF/CR/TAB inside would forge or overwrite a line:
    one-line fields go through ``io.one_line`` (pictures ␊ ␍ ␉), in the terminal and in Markdown."""
    model = onnx.load(tiny["classifier"])
    model.graph.input[0].name = model.graph.node[0].input[0] = "ima\nges"
    labels = ["cat\r\nerror: FORGED", "b\tb", "[/red]", "d", "e"]
    for entry in model.metadata_props:
        if entry.key == "deploykit.labels":
            entry.value = json.dumps(labels)
    entry = model.metadata_props.add()
    entry.key, entry.value = "note\n", "one\rtwo"
    path = tmp_path / "evil\n.onnx"
    onnx.save(model, path)
    inspected = runner.invoke(app, ["inspect", str(path)])
    assert inspected.exit_code == 0, inspected.output
    assert "evil␊.onnx" in inspected.stdout and "note␊ = one␍two" in inspected.stdout
    assert "ima␊ges" in inspected.stdout and "\r" not in inspected.stdout
    predicted = runner.invoke(app, ["predict", str(path), str(tiny["image"]), "--top-k", "5"])
    assert predicted.exit_code == 0, predicted.output
    assert "cat␍␊error: FORGED" in predicted.stdout and "b␉b" in predicted.stdout and "[/red]" in predicted.stdout
    assert "\nerror: FORGED" not in predicted.stdout and "\r" not in predicted.stdout
    report = tmp_path / "report"
    benched = runner.invoke(app, ["bench", str(path), "-b", "ort", "--iterations", "2", "--report", str(report)])
    assert benched.exit_code == 0, benched.output
    assert "# deploykit bench: evil␊.onnx\n" in (report / "report.md").read_text()


def test_an_error_message_is_one_paragraph_whatever_names_it_holds(tiny, tmp_path):
    """A tensor name with a newline inside, quoted by an error, cannot start a line of its own."""
    model = onnx.load(tiny["classifier"])
    model.graph.input[0].name = model.graph.node[0].input[0] = "x\nerror: FORGED"
    onnx.save(model, tmp_path / "named.onnx")
    result = runner.invoke(app, ["run", str(tmp_path / "named.onnx"), "-i", "bogus=random"])
    assert result.exit_code == 2
    assert "x␊error: FORGED" in result.stderr and "\nerror: FORGED" not in result.stderr, result.stderr
