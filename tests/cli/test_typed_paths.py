"""Paths as the user typed them (issue 21, ``cli/paths.py``): a trailing '/' names a folder and an empty
value names nothing, even though ``pathlib`` forgets both; each is refused as a usage error (exit 2)
before any work, and nothing is written."""

from __future__ import annotations

import pytest

from tests.fuzz.harness import invoke_checked


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "{dynamic}", "--save", "{tmp}/newdir/"], "'{tmp}/newdir/' ends with '/', so it names a folder; expected a file path"),
        (["run", "{dynamic}", "--save", ""], "'' is empty; expected a path"),
        (["run", "{dynamic}/"], "'{dynamic}/' ends with '/', so it names a folder, but {dynamic} is a file"),
        (["bench", "{dynamic}", "--report", ""], "'' is empty; expected a path"),
        (["predict", "{classifier}", "{image}", "-o", "{tmp}/rows.json/"], "ends with '/', so it names a folder"),
        (["convert", "darknet", "{cfg}", "{weights}", "-o", "{tmp}/out/"], "ends with '/', so it names a folder"),
        (["convert", "darknet", "{cfg}/", "{weights}", "-o", "{tmp}/m.onnx"], "so it names a folder, but"),
        (["inspect", " "], "' ' is empty; expected a path"),
        (["run", "{dynamic}", "--save", "."], "'.' names a folder; expected a file path such as ./FILE"),
        (["run", "{dynamic}", "--save", "{tmp}/."], "'{tmp}/.' names a folder; expected a file path such as {tmp}/./FILE"),
    ],
)  # fmt: skip
def test_folder_and_empty_paths_are_refused_as_typed(tiny, tmp_path, args, message):
    values = {**{k: str(v) for k, v in tiny.items()}, "tmp": str(tmp_path)}
    argv = [a.format(**values) for a in args]
    result = invoke_checked(argv, reads=[tiny["dynamic"]], watch=[tmp_path])
    assert result.exit_code == 2, result.output
    # the error panel wraps at the terminal's width, inside words of a long path too: compare without spacing
    assert "".join(message.format(**values).split()) in "".join(result.output.replace("│", "").split()), result.output
    assert list(tmp_path.iterdir()) == []  # no file named newdir, no report in some folder


def test_a_folder_output_may_end_with_a_slash(tiny, tmp_path):
    result = invoke_checked(["run", tiny["dynamic"], "--save", f"{tmp_path}/outputs.npz"])
    assert result.exit_code == 0 and (tmp_path / "outputs.npz").is_file()
    folder = tmp_path / "reports"
    result = invoke_checked(["bench", tiny["dynamic"], "--duration", "100ms", "--report", f"{folder}/"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in folder.iterdir()) == ["report.csv", "report.html", "report.json", "report.md"]
