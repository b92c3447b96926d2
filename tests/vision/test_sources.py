"""Sources of frames: image files, globs, folders, videos made here from a shipped photo, loopback MJPEG,
RTSP and web servers, and every fault a user meets (missing file, damaged video, absent camera, silent URL,
a stream that stalls)."""

from __future__ import annotations

import shutil
import socket
import time

import cv2
import numpy as np
import pytest

from deploykit.errors import InputError
from deploykit.vision.sources import ImageFiles, LiveSource, VideoFile, open_source, open_sources
from tests.assets.paths import darknet_image
from tests.assets.rtsp import rtsp_server
from tests.assets.videos import http_file_server, http_server, pan_zoom_frames, read_video, silent_server, write_video


@pytest.fixture(scope="module")
def dog() -> np.ndarray:
    return cv2.imread(str(darknet_image("dog.jpg")))


@pytest.fixture(scope="module")
def clip(tmp_path_factory, dog):
    """60 frames of 1280×720 panning and zooming over dog.jpg, mp4v in .mp4 as cv2.VideoWriter writes it."""
    return write_video(tmp_path_factory.mktemp("clip") / "dog.mp4", pan_zoom_frames(dog, 60))


def _frames(sources):
    return [frame for source in sources for frame in source.frames()]


def test_a_video_file_yields_every_frame_in_order_with_timestamps(clip):
    (source,) = open_source(clip)
    assert isinstance(source, VideoFile) and source.fps == 30 and source.size == (1280, 720)
    frames = list(source.frames())
    expected = read_video(clip)
    assert len(frames) == len(expected) == 60 and source.dropped == 0
    assert [f.index for f in frames] == list(range(60))
    assert all(np.array_equal(f.image, e) for f, e in zip(frames, expected, strict=True))
    np.testing.assert_allclose([f.timestamp_s for f in frames], np.arange(60) / 30, atol=1e-3)
    source.close()


@pytest.mark.parametrize("suffix", [".avi", ".mkv"])
def test_other_containers_decode_too(tmp_path, dog, suffix):
    video = write_video(tmp_path / f"dog{suffix}", pan_zoom_frames(dog, 10, (640, 360)))
    (source,) = open_source(str(video))
    assert len(list(source.frames())) == 10


def test_several_images_a_glob_and_a_folder(tmp_path, dog):
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("b.jpg", "a.png", "c.jpg"):
        cv2.imwrite(str(photos / name), dog)
    (photos / "notes.txt").write_text("not an image")
    write_video(photos / "clip.avi", pan_zoom_frames(dog, 5, (320, 240)))
    folder = open_source(photos)
    assert [type(s) for s in folder] == [ImageFiles, VideoFile]
    assert [f.name for f in folder[0].frames()] == ["a.png", "b.jpg", "c.jpg"]
    assert len(list(folder[1].frames())) == 5
    globbed = open_sources([str(photos / "*.jpg")])
    assert [f.name for f in _frames(globbed)] == ["b.jpg", "c.jpg"]
    several = open_sources([photos / "c.jpg", str(photos / "a.png")])
    assert [f.name for f in _frames(several)] == ["c.jpg", "a.png"]
    assert np.array_equal(_frames(several)[0].image, cv2.imread(str(photos / "c.jpg")))


def test_missing_file_empty_glob_and_empty_folder_say_what_is_wrong(tmp_path):
    with pytest.raises(InputError, match=r"source '.*missing.mp4' \| no such file, folder or camera\..*Hint: pass"):
        open_source(tmp_path / "missing.mp4")
    with pytest.raises(InputError, match=r"glob '.*\*.jpg' \| matches no image or video files.*quote the pattern"):
        open_source(str(tmp_path / "*.jpg"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"folder '.*empty' \| holds no images or videos"):
        open_source(tmp_path / "empty")


def test_a_file_that_is_not_a_video_is_refused_when_opened(tmp_path):
    fake = tmp_path / "fake.mp4"
    fake.write_text("this is not a video")
    with pytest.raises(InputError, match=r"video '.*fake.mp4' \| OpenCV's FFmpeg backend cannot open it.*Hint:"):
        open_source(fake)


def test_a_truncated_video_gives_the_frames_before_the_damage_then_says_so(tmp_path, dog):
    whole = write_video(tmp_path / "whole.mkv", pan_zoom_frames(dog, 40, (640, 360)))
    cut = tmp_path / "cut.mkv"
    data = whole.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    (source,) = open_source(cut)
    frames = []
    with pytest.raises(InputError) as caught:
        for frame in source.frames():
            frames.append(frame)
    assert 0 < len(frames) < 40
    message = str(caught.value)
    assert f"video '{cut}' | decoding stopped at frame {len(frames)} of the 40 its header gives" in message
    assert f"the {len(frames)} frames before the damage were processed" in message and "Hint:" in message


def test_a_camera_that_does_not_exist_is_refused_at_once():
    started = time.monotonic()
    with pytest.raises(InputError, match=r"camera '63' \| does not exist or is busy.*Hint: list cameras"):
        open_source("63")
    with pytest.raises(InputError, match=r"camera '/dev/video63' \| no such device"):
        open_source("/dev/video63")
    assert time.monotonic() - started < 30


def test_an_mjpeg_stream_over_http_is_live_and_says_when_it_ends(dog):
    frames = pan_zoom_frames(dog, 20, (320, 240))
    with http_server(frames, fps=50) as url:
        (source,) = open_source(url, timeout_s=5)
        assert isinstance(source, LiveSource) and source.live
        received = []
        with pytest.raises(InputError, match=rf"stream '{url}' \| ended after \d+ frames; the frames received"):
            for frame in source.frames():
                received.append(frame)
        source.close()
    assert 0 < len(received) <= 20 and len(received) + source.dropped == 20
    assert [f.index for f in received] == sorted({f.index for f in received})
    assert received[0].image.shape == (240, 320, 3)
    assert np.abs(received[0].image.astype(int) - frames[received[0].index]).mean() < 8  # JPEG, not a copy


def test_a_live_stream_keeps_the_latest_frame_for_a_slow_consumer_and_counts_the_rest(dog):
    frames = pan_zoom_frames(dog, 60, (320, 240))
    with http_server(frames, fps=100) as url:
        (source,) = open_source(url, timeout_s=5)
        taken = []
        with pytest.raises(InputError, match="ended after"):
            for frame in source.frames():
                taken.append(frame.index)
                time.sleep(0.1)  # 10 per second from a source that sends 100
        source.close()
    assert source.dropped > 0 and len(taken) + source.dropped == 60
    assert taken == sorted(taken) and taken[-1] == 59  # the last frame sent is never lost


def test_an_image_url_is_one_frame_and_a_web_page_is_refused(dog):
    with http_server([dog], content_type="image/jpeg") as url:
        (source,) = open_source(url)
        (frame,) = list(source.frames())
        assert frame.image.shape == dog.shape and frame.source == url
    with http_server([dog], content_type="text/html") as url:
        with pytest.raises(InputError, match=rf"URL '{url}' \| answered text/html, not an image or a video stream"):
            open_source(url)


def test_a_url_that_does_not_answer_times_out_with_the_url_in_the_message():
    with silent_server() as port:
        for url in (f"http://127.0.0.1:{port}/cam.mjpg", f"rtsp://127.0.0.1:{port}/stream"):
            started = time.monotonic()
            with pytest.raises(InputError) as caught:
                open_source(url, timeout_s=1)
            assert time.monotonic() - started < 20  # bounded by the timeout, not a hang
            assert url in str(caught.value) and "1 s" in str(caught.value) and "Hint:" in str(caught.value)


def test_a_refused_url_is_unreachable_not_a_timeout():
    """A refused connection answers at once: it is not "did not answer within 10 s"."""
    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x.jpg"
    with pytest.raises(InputError) as caught:
        open_source(url, timeout_s=10)
    assert f"URL '{url}' | cannot be reached (" in str(caught.value)
    assert "did not answer" not in str(caught.value)


def test_urls_are_never_folded_by_path():
    with silent_server() as port:
        with pytest.raises(InputError, match=rf"stream 'rtsp://127.0.0.1:{port}/live/a' \| did not open"):
            open_source(f"rtsp://127.0.0.1:{port}/live/a", timeout_s=1)
    with pytest.raises(InputError, match=r"source 'ftp://example.invalid/x.mp4' \| uses a scheme"):
        open_source("ftp://example.invalid/x.mp4")


def test_a_folder_copy_of_a_video_reads_the_same(tmp_path, clip):
    shutil.copy(clip, tmp_path / "copy.mp4")
    (source,) = open_source(tmp_path)
    assert len(list(source.frames())) == 60


def test_an_rtsp_camera_sends_every_frame_in_order_then_says_it_ended(dog):
    """RTSP as IP cameras speak it (DESCRIBE, SETUP over TCP after UDP is refused, PLAY, RTP/JPEG), read by
    OpenCV's FFmpeg backend."""
    frames = pan_zoom_frames(dog, 16, (640, 360))
    with rtsp_server(frames, fps=8) as url:
        (source,) = open_source(url, timeout_s=10)
        assert source.live and source.kind == "stream" and source.size == (640, 360)
        received = []
        with pytest.raises(InputError, match=rf"stream '{url}' \| ended after {16 - source.dropped} frames"):
            for frame in source.frames():
                received.append(frame)
        source.close()
    assert len(received) + source.dropped == 16 and received[-1].index == 15  # the last frame sent is never lost
    assert [f.index for f in received] == sorted({f.index for f in received})
    for frame in received:  # JPEG at quality 90: a few levels off, and each frame nearest to its own original
        errors = [np.abs(frame.image.astype(int) - original).mean() for original in frames]
        assert errors[frame.index] < 6 and int(np.argmin(errors)) == frame.index


@pytest.mark.parametrize("server", [http_server, rtsp_server], ids=["mjpeg", "rtsp"])
def test_a_stream_that_stalls_mid_way_ends_within_its_timeout_naming_the_frames_received(dog, server):
    frames = pan_zoom_frames(dog, 6, (320, 240))
    with server(frames, fps=12, after="stall") as url:
        (source,) = open_source(url, timeout_s=2)
        received = []
        started = time.monotonic()
        with pytest.raises(InputError) as caught:
            for frame in source.frames():
                received.append(frame)
                started = time.monotonic()
        waited = time.monotonic() - started
        source.close()
    assert len(received) + source.dropped == 6
    message = str(caught.value)
    assert f"stream '{url}' | sent no frame for 2 s after {len(received)} frames; the frames received" in message
    assert 1.5 < waited < 20  # the timeout, not a hang (and not an error before it)


@pytest.mark.parametrize(("suffix", "content_type"), [(".mp4", "video/mp4"), (".mkv", "video/x-matroska")])
def test_a_video_file_on_a_web_server_is_read_whole_like_a_file(tmp_path, dog, suffix, content_type):
    frames = pan_zoom_frames(dog, 24, (320, 240))
    video = write_video(tmp_path / f"clip{suffix}", frames)
    with http_file_server(video, content_type) as url:
        (source,) = open_source(url, timeout_s=10)
        assert isinstance(source, VideoFile) and not source.live
        received = list(source.frames())  # its end is the file's end, not a fault
        source.close()
    assert [f.index for f in received] == list(range(24)) and source.dropped == 0
    assert all(np.array_equal(a.image, b) for a, b in zip(received, read_video(video), strict=True))
