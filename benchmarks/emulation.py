"""What checking an ARM build under emulation costs (``--platform linux/arm64``).

1. Preparing the target cold (an empty cache: QEMU, the arm64 sysroot, the aarch64 wheels, the
   self-test) and warm (everything kept: only the self-test), with ``deploykit platforms add``.
2. Verifying MobileNetV2 (real photos) and YOLOv4-tiny (official weights, a real photo) per
   runtime under emulation against the host's oracle: wall seconds, the precision the aarch64
   build ran, the verdict, and the worker's one-pass load/run seconds. Target: MobileNetV2 on
   two runtimes within 60 s once the target exists.

Prints one JSON line each, with the workers' CPU seconds and the load average beside the wall
seconds (on shared cores wall seconds grow with the other jobs; CPU seconds do not). Run:
``.venv/bin/python benchmarks/emulation.py`` (``--skip-cold`` leaves out the cold preparation,
which downloads about 400 MB into a temporary cache; ``--only-mobilenet`` runs the 60 s target alone).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repo, for tests.assets
DEPLOYKIT = Path(sys.executable).with_name("deploykit")
PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg")


def emit(record: dict) -> None:
    print(json.dumps(record), flush=True)


def children_cpu_s() -> float:
    """CPU seconds the finished child processes (workers, pip, mmdebstrap) used so far: unlike wall
    seconds, this does not grow when other jobs share the cores."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def prepare(cache: Path | None, label: str) -> None:
    environment = dict(os.environ)
    if cache is not None:
        environment["DEPLOYKIT_CACHE_DIR"] = str(cache)
    started, cpu = time.perf_counter(), children_cpu_s()
    done = subprocess.run([str(DEPLOYKIT), "platforms", "add", "linux/arm64"], env=environment, capture_output=True,
                          text=True)  # fmt: skip
    seconds = time.perf_counter() - started
    target = (cache or _default_cache()) / "platforms" / "linux-arm64"
    manifest = json.loads((target / "target.json").read_text()) if done.returncode == 0 else {}
    error = done.stderr.strip()[-300:] if done.returncode else None
    emit({"benchmark": f"prepare linux/arm64 ({label})", "seconds": round(seconds, 1),
          "cpu_s": round(children_cpu_s() - cpu, 1), "rc": done.returncode,
          "steps_s": manifest.get("seconds"), "error": error})  # fmt: skip


def _default_cache() -> Path:
    from deploykit.platforms.emulated import cache_dir

    return cache_dir()


def verify(model: Path, inputs: Path, backends: list[str], name: str) -> None:
    from deploykit.verify import VerifySettings, compare

    started, cpu = time.perf_counter(), children_cpu_s()
    report = compare(model, backends, VerifySettings(precision=None, platforms="linux/arm64"), inputs=inputs)
    seconds = time.perf_counter() - started
    rows = []
    for verdict in report.verdicts:
        timing = report.emulated_seconds.get(verdict.candidate) or {}
        rows.append({"candidate": verdict.candidate, "status": verdict.status, "precision": verdict.precision,
                     "task": None if verdict.task is None else {verdict.task.metric: verdict.task.value},
                     "load_s": round(timing["load"], 2) if "load" in timing else None,
                     "run_s": [round(r, 2) for r in timing.get("run", [])]})  # fmt: skip
    emit({"benchmark": f"verify {name} under emulation", "backends": backends, "seconds": round(seconds, 1),
          "workers_cpu_s": round(children_cpu_s() - cpu, 1), "load_average": round(os.getloadavg()[0], 1),
          "inputs": report.input_source, "rows": rows})  # fmt: skip


def mobilenet_and_photos(scratch: Path) -> tuple[Path, Path]:
    from deploykit.recipes import build
    from tests.assets.paths import darknet_image

    photos = scratch / "photos"
    photos.mkdir()
    for name in PHOTOS:
        shutil.copy(darknet_image(name), photos / name)
    mobilenet = scratch / "mobilenet_v2.onnx"
    build("mobilenet_v2", mobilenet, verify_backends=("onnxruntime",))
    return mobilenet, photos


def main() -> None:
    from deploykit.recipes import build
    from tests.assets.paths import darknet_image

    both = ["onnxruntime", "openvino"]
    if "--only-mobilenet" in sys.argv:  # the 60 s target alone
        with tempfile.TemporaryDirectory(prefix="deploykit-emulation-") as scratch_dir:
            verify(*mobilenet_and_photos(Path(scratch_dir)), both, "MobileNetV2 (two runtimes side by side)")
        return
    if "--skip-cold" not in sys.argv:
        with tempfile.TemporaryDirectory(prefix="deploykit-cold-") as cold:
            prepare(Path(cold), "cold: empty cache")
            prepare(Path(cold), "warm: same cache again")
    prepare(None, "warm: deploykit's cache")
    with tempfile.TemporaryDirectory(prefix="deploykit-emulation-") as scratch_dir:
        scratch = Path(scratch_dir)
        mobilenet, photos = mobilenet_and_photos(scratch)
        for backend in both:
            verify(mobilenet, photos, [backend], "MobileNetV2")
        verify(mobilenet, photos, both, "MobileNetV2 (two runtimes side by side)")
        yolo = scratch / "yolov4-tiny.onnx"
        build("yolov4-tiny", yolo, verify_backends=("onnxruntime",))
        for backend in both:
            verify(yolo, darknet_image("dog.jpg"), [backend], "YOLOv4-tiny")


if __name__ == "__main__":
    main()
