"""Drawn outputs: a video finalised at the source's fps and size, nothing left behind when no frame came."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from deploykit.errors import UsageError
from deploykit.vision.outputs import VideoWriter, check_image_folder_output, check_video_output
from tests.assets.videos import read_video


@pytest.mark.parametrize("suffix", [".mp4", ".avi", ".mkv"])
def test_a_video_is_written_at_its_fps_and_first_frames_size(tmp_path, suffix):
    path = tmp_path / f"out{suffix}"
    with VideoWriter(path, 12.0) as writer:
        for level in range(0, 250, 25):
            writer.write(np.full((120, 160, 3), level, np.uint8))
        writer.write(np.zeros((60, 80, 3), np.uint8))  # another size: scaled to the first
    frames = read_video(path)
    assert len(frames) == 11 and frames[0].shape == (120, 160, 3)
    assert cv2.VideoCapture(str(path)).get(cv2.CAP_PROP_FPS) == 12
    assert abs(int(frames[4].mean()) - 100) <= 8  # lossy codecs and YUV round trips; levels are 25 apart
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_nothing_is_left_when_no_frame_was_written(tmp_path):
    VideoWriter(tmp_path / "out.mp4", None).close()
    writer = VideoWriter(tmp_path / "out.mp4", 25.0)
    writer._open((64, 48))  # opened, then interrupted before its first frame
    writer.close()
    assert not list(tmp_path.iterdir())


def test_formats_and_folders_are_refused_by_name(tmp_path):
    with pytest.raises(UsageError, match=r"--draw '.*out.gif' \| a video source draws into a video file.*\.mp4"):
        check_video_output(tmp_path / "out.gif")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match=r"--draw '.*file' \| is a file; several images are drawn into a folder"):
        check_image_folder_output(tmp_path / "file")
