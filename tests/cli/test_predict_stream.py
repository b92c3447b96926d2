"""``deploykit predict`` on videos, many images, streams and URLs: JSON lines, drawn videos and folders,
refusals before the work, and a run ended by Ctrl-C or SIGTERM that leaves its outputs whole."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import cv2
import pytest
from typer.testing import CliRunner

from deploykit.cli.main import app
from tests.assets.paths import darknet_image, nudenet_model
from tests.assets.rtsp import rtsp_server
from tests.assets.signals import default_signals
from tests.assets.videos import http_file_server, http_server, pan_zoom_frames, read_video, write_video

CLI = [sys.executable, "-m", "deploykit.cli.main"]


@pytest.fixture(scope="module")
def model() -> str:
    return str(nudenet_model())


@pytest.fixture(scope="module")
def dog_frames():
    return pan_zoom_frames(cv2.imread(str(darknet_image("dog.jpg"))), 120)


@pytest.fixture(scope="module")
def clip(tmp_path_factory, dog_frames) -> Path:
    """60 frames of 1280×720 over dog.jpg at 24 fps, mp4v as cv2.VideoWriter writes it."""
    return write_video(tmp_path_factory.mktemp("clip") / "dog.mp4", dog_frames[::2], fps=24)


def _invoke(*args):
    return CliRunner().invoke(app, ["predict", *(str(a) for a in args)])


def _lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_video_draws_into_a_video_of_the_same_fps_and_size_and_prints_json_lines(model, clip, tmp_path):
    out = tmp_path / "drawn.mp4"
    result = _invoke(model, clip, "--draw", out, "--json", "-", "--conf", "0.05")
    assert result.exit_code == 0, result.output
    rows = _lines(result.stdout)
    assert [r["frame"] for r in rows] == list(range(60)) and all(r["source"] == str(clip) for r in rows)
    assert any(r["results"] for r in rows) and set(rows[0]["timing"]) >= {"decode_ms", "pre_ms", "infer_ms"}
    capture = cv2.VideoCapture(str(out))
    assert capture.get(cv2.CAP_PROP_FPS) == 24 and (capture.get(3), capture.get(4)) == (1280, 720)
    assert len(read_video(out)) == 60
    assert "60 frames" in result.stderr and "infer" in result.stderr  # the summary goes beside the JSON
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # as open() makes it (was mkstemp's 0600)


def test_every_max_frames_and_a_jsonl_file(model, clip, tmp_path):
    out = tmp_path / "rows.jsonl"
    result = _invoke(model, clip, "--every", "5", "--max-frames", "4", "-o", out)
    assert result.exit_code == 0, result.output
    assert [r["frame"] for r in _frames_in(out)] == [0, 5, 10, 15]  # after the header naming the run
    assert "frame-000015" in result.stdout


def test_several_images_a_glob_and_a_folder_draw_into_a_folder(model, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("dog.jpg", "horses.jpg", "eagle.jpg"):
        (photos / name).write_bytes(darknet_image(name).read_bytes())
    drawn = tmp_path / "drawn"
    result = _invoke(model, photos / "dog.jpg", str(photos / "h*.jpg"), photos, "--draw", drawn, "--json", "-")
    assert result.exit_code == 0, result.output
    assert [r["name"] for r in _lines(result.stdout)] == ["dog.jpg", "horses.jpg", "dog.jpg", "eagle.jpg", "horses.jpg"]
    assert sorted(p.name for p in drawn.iterdir()) == ["dog.jpg", "eagle.jpg", "horses.jpg"]
    assert cv2.imread(str(drawn / "eagle.jpg")).shape == cv2.imread(str(photos / "eagle.jpg")).shape


def test_an_mjpeg_stream_url_and_an_image_url(model, dog_frames):
    with http_server([cv2.resize(f, (640, 360)) for f in dog_frames[:30]], fps=30) as url:
        result = _invoke(model, url, "--max-frames", "5", "--json", "-")
    assert result.exit_code == 0, result.output
    rows = _lines(result.stdout)
    assert len(rows) == 5 and rows[0]["source"] == url  # not folded into http:/127.0.0.1
    with http_server(dog_frames[:1], content_type="image/jpeg") as url:
        result = _invoke(model, url, "--json", "-")
    assert result.exit_code == 0 and _lines(result.stdout)[0]["name"] == "stream"


def test_an_rtsp_camera_and_a_video_on_a_web_server(model, dog_frames, clip):
    with rtsp_server([cv2.resize(f, (640, 360)) for f in dog_frames[:40]], fps=10) as url:
        result = _invoke(model, url, "--max-frames", "5", "--json", "-")
    assert result.exit_code == 0, result.output
    rows = _lines(result.stdout)
    assert len(rows) == 5 and {r["source"] for r in rows} == {url}
    assert [r["frame"] for r in rows] == sorted({r["frame"] for r in rows})  # in order; a live source may drop
    with http_file_server(clip, "video/mp4") as url:
        result = _invoke(model, url, "--every", "20", "--json", "-")
    assert result.exit_code == 0, result.output  # a file's end is no fault, and no frame is dropped
    assert [r["frame"] for r in _lines(result.stdout)] == [0, 20, 40]


@pytest.mark.parametrize("server", [http_server, rtsp_server], ids=["mjpeg", "rtsp"])
def test_a_stream_that_stalls_ends_with_its_message_and_finalised_outputs(model, dog_frames, tmp_path, server):
    drawn, out = tmp_path / "drawn.mp4", tmp_path / "rows.jsonl"
    with server([cv2.resize(f, (320, 240)) for f in dog_frames[:8]], fps=8, after="stall") as url:
        result = _invoke(model, url, "--timeout", "2s", "--draw", drawn, "-o", out)
    assert result.exit_code == 1, result.output
    rows = _frames_in(out)
    assert 0 < len(rows) <= 8 and len(read_video(drawn)) == len(rows)  # the video so far is playable
    shown = " ".join(result.stderr.split())
    assert f"stream '{url}' | sent no frame for 2 s after " in shown and "the frames received were processed" in shown


@pytest.mark.parametrize(
    ("draw", "message"),
    [
        ("{clip}", "is the file this command reads"),
        ("{tmp}/drawn.gif", "no writer here writes '.gif'; expected .mp4, .avi, .mkv"),
        ("{tmp}/drawn", "no writer here writes '(no extension)'"),
    ],
)
def test_draw_onto_the_input_or_an_unwritable_format_is_refused_before_the_work(model, clip, tmp_path, draw, message):
    target = draw.format(clip=clip, tmp=tmp_path)
    before = clip.read_bytes()
    result = _invoke(model, clip, "--draw", target, "--json", "-")
    assert result.exit_code == 2 and message in result.stderr, result.output
    assert not _lines(result.stdout) and clip.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name != clip.name]


def test_many_images_refuse_a_draw_file_and_a_json_file(model, tmp_path):
    photo = darknet_image("dog.jpg")
    result = _invoke(model, photo, photo, "--draw", tmp_path / "one.jpg")
    assert result.exit_code == 2 and "names a file, but several images are drawn into a folder" in result.stderr
    result = _invoke(model, photo, photo, "--json", tmp_path / "rows.json")
    assert (
        result.exit_code == 2
        and "give one JSON line per frame" in result.stderr
        and "--json for stdout" in result.stderr
    )


def test_two_images_of_one_name_from_two_folders_are_not_drawn_over_each_other(model, tmp_path):
    for folder, name in (("a", "dog.jpg"), ("b", "horses.jpg")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "photo.jpg").write_bytes(darknet_image(name).read_bytes())
    drawn = tmp_path / "drawn"
    for sources in ([tmp_path / "a" / "photo.jpg", tmp_path / "b" / "photo.jpg"], [tmp_path / "a", tmp_path / "b"]):
        result = _invoke(model, *sources, "--draw", drawn, "--json")
        assert result.exit_code != 0 and "Traceback" not in result.output, result.output
        shown = " ".join(result.stderr.split())
        assert (
            f"--draw '{drawn}' | images '{tmp_path / 'a' / 'photo.jpg'}' and '{tmp_path / 'b' / 'photo.jpg'}' have"
            in (shown)
        )
        assert "the same name, 'photo.jpg': one drawing would overwrite the other" in shown
        assert not _lines(result.stdout) and not drawn.exists()
    same = tmp_path / "a" / "photo.jpg"  # one image given twice is drawn once, over itself
    assert _invoke(model, same, tmp_path / "a" / ".." / "a" / "photo.jpg", "--draw", drawn).exit_code == 0
    assert [p.name for p in drawn.iterdir()] == ["photo.jpg"]


def test_a_video_with_output_of_a_rows_folder_is_refused_before_the_work(model, clip, tmp_path):
    """-o without .jsonl is the folder of rows, one per image: a video there was one row saying "not an image"
    and exit 0."""
    rows = tmp_path / "rows"
    result = _invoke(model, clip, "-o", rows)
    assert result.exit_code != 0 and "Traceback" not in result.output, result.output
    shown = " ".join(result.stderr.split())
    assert f"--output FOLDER | writes one row per image, and '{clip}' is a video." in shown
    assert "pass -o FILE.jsonl for one JSON line per frame" in shown and not rows.exists()


def test_missing_sources_and_silent_urls_fail_with_their_names(model, tmp_path):
    result = _invoke(model, tmp_path / "missing.mp4")
    assert result.exit_code == 1 and f"source '{tmp_path / 'missing.mp4'}' | no such file, folder or camera" in (
        result.stderr
    )
    result = _invoke(model, "rtsp://127.0.0.1:1/stream")
    assert result.exit_code == 1 and "stream 'rtsp://127.0.0.1:1/stream' | did not open" in result.stderr
    result = _invoke(model, "63")
    assert result.exit_code == 1 and "camera '63' | does not exist or is busy" in result.stderr


def test_a_truncated_video_processes_the_frames_before_the_damage_and_exits_1(model, dog_frames, tmp_path):
    whole = write_video(tmp_path / "whole.mkv", [cv2.resize(f, (640, 360)) for f in dog_frames[:40]])
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    out = tmp_path / "drawn.mp4"
    result = _invoke(model, cut, "--json", "-", "--draw", out)
    assert result.exit_code == 1, result.output
    rows = _lines(result.stdout)
    assert 0 < len(rows) < 40
    assert f"decoding stopped at frame {len(rows)} of the 40" in result.stderr
    assert len(read_video(out)) == len(rows)  # the drawn video so far is finalised


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_mid_video_leaves_a_playable_video_and_whole_json_lines(
    model, dog_frames, tmp_path, signum, code
):
    video = write_video(tmp_path / "long.mp4", dog_frames)  # 120 frames: still running when the signal comes
    out = tmp_path / "drawn.mp4"
    process = subprocess.Popen([*CLI, "predict", model, str(video), "--draw", str(out), "--json", "-"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=default_signals)  # fmt: skip
    try:
        first = process.stdout.readline()  # blocks until the first frame is out (bounded by the 600 s below)
        assert first.startswith("{"), process.stderr.read()
        process.send_signal(signum)
        rest, errors = process.communicate(timeout=600)
    finally:
        process.kill()
    assert process.returncode == code, errors
    rows = [json.loads(line) for line in (first + rest).splitlines()]  # every line whole
    assert 0 < len(rows) < 120
    assert len(read_video(out)) in (len(rows) - 1, len(rows))  # a signal between a line and its frame (µs)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".drawn")]  # no temporary left


def run_with_ctrl_c_at(patch: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``deploykit ARGS`` in a child process after ``patch`` (Python source) has wrapped one of deploykit's
    functions to send the process a Ctrl-C (``ctrl_c()``) at a chosen point: the signal comes there, with
    the command's own handlers, instead of wherever a timer lands."""
    script = "\n".join(
        [
            "import os, signal, sys",
            "from deploykit.cli import launch",
            "def ctrl_c():",
            "    os.kill(os.getpid(), signal.SIGINT)",
            patch,
            "sys.argv = ['deploykit', *sys.argv[1:]]",
            "launch.main()",
        ]
    )
    command = [sys.executable, "-c", script, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, preexec_fn=default_signals)


# Ctrl-C as the task starts drawing frame 5.
_CTRL_C_WHILE_DRAWING = """
from deploykit.vision import results
real, drawn = results.draw, []
def draw(image, found):
    drawn.append(image)
    if len(drawn) == 6:
        ctrl_c()
    return real(image, found)
results.draw = draw
"""


def test_ctrl_c_while_a_frame_is_drawn_leaves_as_many_drawn_frames_as_json_lines(model, dog_frames, tmp_path):
    video = write_video(tmp_path / "short.mp4", [cv2.resize(f, (640, 360)) for f in dog_frames[:20]])
    out = tmp_path / "drawn.mp4"
    process = run_with_ctrl_c_at(_CTRL_C_WHILE_DRAWING, "predict", model, str(video), "--draw", str(out), "--json")
    assert process.returncode == 130, process.stderr
    rows = [json.loads(line) for line in process.stdout.splitlines()]
    assert [row["frame"] for row in rows] == list(range(5))  # frame 5 was being drawn: no line for it
    assert len(read_video(out)) == 5


def _frames_in(path: Path) -> list[dict]:
    header, *rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert header["deploykit"] == "predict"
    return rows


def test_a_jsonl_file_stopped_by_sigterm_resumes_without_running_its_frames_again(model, clip, tmp_path):
    out = tmp_path / "rows.jsonl"
    command = [*CLI, "predict", model, str(clip), "-o", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        process.stdout.readline()  # the first frame's line on the terminal: its JSON line was written before
        process.send_signal(signal.SIGTERM)
        _, errors = process.communicate(timeout=600)
    finally:
        process.kill()
    assert process.returncode == 143, errors
    before = out.read_bytes()
    done = len(_frames_in(out))
    assert 0 < done < 60
    with out.open("ab") as file:  # a line torn by a crash in the middle of its write
        file.write(b'{"source": "' + str(clip).encode() + b'", "frame": 99, "na')
    result = _invoke(model, clip, "-o", out)
    assert result.exit_code == 0, result.output
    assert f"resuming '{out}': {done} frames already there are not run again" in result.stderr
    assert f"{60 - done} frames" in result.stderr  # the summary counts what this run did
    assert out.read_bytes().startswith(before)  # the lines written before are kept as they were
    assert [r["frame"] for r in _frames_in(out)] == list(range(60))  # each frame once, the torn line gone
    again = _invoke(model, clip, "-o", out)  # a finished file: nothing to run
    assert again.exit_code == 0 and "0 frames" in again.stderr and len(_frames_in(out)) == 60


def test_a_resumed_folder_and_every_carry_on_where_max_frames_stopped(model, clip, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("dog.jpg", "horses.jpg", "eagle.jpg"):
        (photos / name).write_bytes(darknet_image(name).read_bytes())
    out = tmp_path / "rows.jsonl"
    first = _invoke(model, photos, clip, "--every", "2", "--max-frames", "4", "-o", out)
    assert first.exit_code == 0, first.output
    assert [(r["name"], r["frame"]) for r in _frames_in(out)] == [("dog.jpg", 0), ("horses.jpg", 2),
                                                                  ("frame-000000", 0), ("frame-000002", 2)]  # fmt: skip
    result = _invoke(model, photos, clip, "--every", "2", "-o", out)
    assert result.exit_code == 0, result.output
    assert [r["frame"] for r in _frames_in(out)[4:]] == list(range(4, 60, 2))
    assert "dog.jpg" not in result.stdout and "frame-000002" not in result.stdout and "frame-000004" in result.stdout


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        ("frame,label\n0,dog\n", [], "exists and was not written by deploykit predict (its first line is not a "
                                     "deploykit header); it is left as it is, never overwritten"),
        (None, ["--conf", "0.5"], "holds the results of another run (conf: 0.25 there, 0.5 now)"),
        (None, ["--every", "2"], "holds the results of another run (every: 1 there, 2 now)"),
    ],
    ids=["not-deploykit", "other-conf", "other-every"],
)  # fmt: skip
def test_a_jsonl_file_of_something_else_is_refused_and_kept(model, clip, tmp_path, text, args, message):
    out = tmp_path / "rows.jsonl"
    if text is None:
        assert _invoke(model, clip, "--max-frames", "1", "-o", out).exit_code == 0
    else:
        out.write_text(text)
    before = out.read_bytes()
    result = _invoke(model, clip, *args, "-o", out)
    assert result.exit_code == 2, result.output
    assert "".join(message.split()) in "".join(result.stderr.replace("│", "").split()), result.stderr  # any wrap
    assert out.read_bytes() == before


def test_a_resumed_run_refuses_to_replace_its_drawn_video(model, clip, tmp_path):
    out, drawn = tmp_path / "rows.jsonl", tmp_path / "drawn.mp4"
    assert _invoke(model, clip, "--max-frames", "2", "-o", out, "--draw", drawn).exit_code == 0
    result = _invoke(model, clip, "-o", out, "--draw", drawn)
    assert result.exit_code == 2 and "would replace the drawn video with the remaining frames only" in result.stderr
    assert len(read_video(drawn)) == 2


# Ctrl-C the moment a temporary output file whose name starts with PREFIX exists, before deploykit has
# recorded it: the window in which an interrupt used to leave it behind.
_CTRL_C_AS_A_TEMPORARY_FILE_IS_MADE = """
import tempfile
real = tempfile.mkstemp
def mkstemp(*args, **kwargs):
    made = real(*args, **kwargs)
    if os.path.basename(made[1]).startswith("{prefix}"):
        ctrl_c()
    return made
tempfile.mkstemp = mkstemp
"""


def test_ctrl_c_as_the_drawn_videos_temporary_file_is_made_leaves_nothing(model, dog_frames, tmp_path):
    video = write_video(tmp_path / "short.mp4", [cv2.resize(f, (640, 360)) for f in dog_frames[:10]])
    out = tmp_path / "drawn.mp4"
    patch = _CTRL_C_AS_A_TEMPORARY_FILE_IS_MADE.format(prefix=".drawn.")
    process = run_with_ctrl_c_at(patch, "predict", model, str(video), "--draw", str(out), "--json")
    assert process.returncode == 130, process.stderr
    assert "Traceback" not in process.stderr, process.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["short.mp4"]  # no video, no temporary: no frame was written


def test_ctrl_c_as_an_atomic_outputs_temporary_file_is_made_leaves_nothing(model, tmp_path):
    out = tmp_path / "outputs.npz"
    patch = _CTRL_C_AS_A_TEMPORARY_FILE_IS_MADE.format(prefix=".deploykit-outputs.npz.")
    process = run_with_ctrl_c_at(patch, "run", model, "-i", "images=random:1x3x64x64", "-o", str(out))
    assert process.returncode == 130, process.stderr
    assert "Traceback" not in process.stderr, process.stderr
    assert list(tmp_path.iterdir()) == []  # neither the output nor its temporary
