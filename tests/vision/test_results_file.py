"""Resumable JSON lines: a header names the run, a torn last line is cut off, frames already written are
handed back, and a file that is not deploykit's (or another run's) is refused and left as it was."""

from __future__ import annotations

import json

import pytest

from deploykit.errors import UsageError
from deploykit.vision.results_file import ResultsFile

RUN = {"model_sha256": "ab" * 32, "task": "detect", "conf": 0.25, "sources": ["clip.mp4"]}


def _row(index: int, source: str = "clip.mp4") -> dict:
    return {"source": source, "frame": index, "name": f"frame-{index:06d}", "results": []}


def _written(path, rows) -> None:
    with ResultsFile(path, RUN) as results:
        for row in rows:
            results.write(row)


def test_a_new_file_gets_a_header_then_one_line_per_frame(tmp_path):
    path = tmp_path / "rows.jsonl"
    with ResultsFile(path, RUN) as results:
        assert not path.exists()  # nothing is written before the first frame: a run that fails leaves no file
        results.write(_row(0))
        results.write(_row(1))
    header, *frames = [json.loads(line) for line in path.read_text().splitlines()]
    assert header == {"deploykit": "predict", "format": 1, "run": RUN}
    assert [f["frame"] for f in frames] == [0, 1]


def test_a_stopped_file_resumes_after_its_last_whole_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    _written(path, [_row(i) for i in range(3)] + [_row(0, "b.jpg")])
    whole = path.read_bytes()
    path.write_bytes(whole + json.dumps(_row(3)).encode()[:17])  # a write cut short by a kill
    with ResultsFile(path, RUN) as results:
        assert results.done == {"clip.mp4": {"frame-000000", "frame-000001", "frame-000002"}, "b.jpg": {"frame-000000"}}
        assert results.resumed == 4 and path.read_bytes() == whole  # the torn line is cut off at once
        results.write(_row(3))
    assert [json.loads(line)["frame"] for line in path.read_text().splitlines()[1:]] == [0, 1, 2, 0, 3]


def test_a_header_torn_by_a_stop_before_the_first_frame_starts_again(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"deploykit": "predict", "form')
    with ResultsFile(path, RUN) as results:
        assert results.resumed == 0 and path.read_bytes() == b""
        results.write(_row(0))
    assert json.loads(path.read_text().splitlines()[0])["run"] == RUN


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("name,score\ndog,0.9\n", "its first line is not a deploykit header"),
        ('{"source": "clip.mp4", "name": "frame-000000"}\n', "its first line is not a deploykit header"),
        ("not json and no newline", "its first line is not a deploykit header"),
        (
            '{"deploykit": "predict", "format": 99, "run": {}}\n',
            "its header says format 99, and this deploykit reads 1",
        ),
        (json.dumps({"deploykit": "predict", "format": 1, "run": RUN}) + "\nhello\n{}\n", "its line 2 is not a frame"),
    ],
    ids=["csv", "no-header", "one-torn-line", "other-format", "bad-middle-line"],
)
def test_a_file_deploykit_did_not_write_is_refused_and_left_as_it_was(tmp_path, text, why):
    path = tmp_path / "rows.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError, match="exists and was not written by deploykit predict") as error:
        ResultsFile(path, RUN).open()
    assert why in str(error.value) and "never overwritten" in str(error.value)
    assert path.read_text() == text


def test_another_runs_file_is_refused_naming_what_differs(tmp_path):
    path = tmp_path / "rows.jsonl"
    _written(path, [_row(0)])
    before = path.read_bytes()
    other = {**RUN, "conf": 0.5, "sources": ["other.mp4"]}
    with pytest.raises(UsageError) as error:
        ResultsFile(path, other).open()
    message = str(error.value)
    assert "holds the results of another run (conf: 0.25 there, 0.5 now; sources: ['clip.mp4'] there" in message
    assert "this file is left as it is" in message and "Hint: write to a new file" in message
    assert path.read_bytes() == before
