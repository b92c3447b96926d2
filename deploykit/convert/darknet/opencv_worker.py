"""Worker entry: OpenCV 4.x's own Darknet importer on one image, in its own process.

A cfg OpenCV's importer chokes on can take the process down (an assertion in native code, a
segfault); run here, that costs the oracle, never the conversion. Reads a JSON job on stdin —
``{cfg, weights, image: input.npz, outputs: outputs.npz}`` — and prints one result line:
``{"status": "ok", "version": ...}`` (outputs saved), ``{"status": "missing"}`` (no importer:
OpenCV 5) or ``{"status": "error", "error": ...}``.
"""

from __future__ import annotations

import sys

from deploykit.workers import read_arrays, read_job, send_result, write_arrays


def main() -> int:
    job = read_job()
    try:
        import cv2
    except ImportError:
        result: dict[str, str] = {"status": "missing"}
    else:
        if not hasattr(cv2.dnn, "readNetFromDarknet"):
            result = {"status": "missing"}
        else:
            try:
                image = read_arrays(job["image"])["image"]
                net = cv2.dnn.readNetFromDarknet(job["cfg"], job["weights"])
                net.setInput(image)
                names = list(net.getUnconnectedOutLayersNames())
                write_arrays(job["outputs"], dict(zip(names, net.forward(names), strict=True)))
                result = {"status": "ok", "version": cv2.__version__}
            except cv2.error as exc:  # OpenCV's own refusal of this cfg, reported as the reason
                result = {"status": "error", "error": f"cv2.error: {str(exc).strip().splitlines()[-1][:300]}"}
    send_result(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
