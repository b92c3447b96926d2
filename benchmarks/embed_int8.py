"""How far INT8 moves an encoder's embeddings: MobileNetV2's ImageNet backbone (the recipe, cut
after its global average pool, ``deploykit.task = "embed"``), quantized by ``deploykit quantize``
(ORT engine) on 5 of Darknet's 7 photos, then both models on ONNX Runtime over all 7 (the 5
calibrated on included; the quantize report's own figure is on the 2 held out).

Prints one JSON line: the worst and mean cosine of the pooled embeddings (the ``embed`` task's
metric) and the quantize report's own task metric on its held-out photos. The int8 default
threshold of ``deploykit/tasks/embed.py`` comes from this figure.

Run: ``.venv/bin/python benchmarks/embed_int8.py`` (needs the recipe's weights package and Debian's darknet data).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deploykit
from deploykit.recipes import build
from deploykit.tasks.embed import cosines, pooled
from deploykit.vision.image import image_cases
from tests.assets.paths import darknet_image
from tests.assets.samples import mobilenet_v2_encoder

PHOTOS = ("dog.jpg", "eagle.jpg", "giraffe.jpg", "horses.jpg", "kite.jpg", "person.jpg", "scream.jpg")


def encoder(folder: Path) -> Path:
    classifier = folder / "mobilenet_v2.onnx"
    build("mobilenet_v2", classifier, verify_backends=[])
    return mobilenet_v2_encoder(classifier, folder / "encoder.onnx")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="deploykit-embed-") as scratch:
        folder = Path(scratch)
        photos = folder / "photos"
        photos.mkdir()
        for name in PHOTOS:
            shutil.copy(darknet_image(name), photos / name)
        float_model = encoder(folder)
        int8_model = folder / "encoder.int8.onnx"
        report = deploykit.quantize(
            float_model, int8_model, deploykit.QuantizeSettings(held_out=0.3, measure_speed=False), calibrate=photos
        )
        cases, _ = image_cases(float_model, photos)
        with deploykit.load(float_model) as f32, deploykit.load(int8_model) as int8:
            reference = np.concatenate([pooled(next(iter(f32.run(c).values()))) for c in cases])
            candidate = np.concatenate([pooled(next(iter(int8.run(c).values()))) for c in cases])
        measured = cosines(reference, candidate)
        task = report.accuracy.task
        print(json.dumps({
            "model": "mobilenet_v2 backbone (embed)", "engine": report.engine, "images": int(measured.size),
            "calibration_images": report.calibration.get("calibration_size"),
            "cosine_min": round(float(measured.min()), 4), "cosine_mean": round(float(measured.mean()), 4),
            "quantize_task_metric": None if task is None else round(task.to_dict().get("value", 0.0), 4),
            "judge": report.accuracy.backend,
        }))  # fmt: skip


if __name__ == "__main__":
    main()
