# deploykit on CPU: ONNX Runtime + OpenVINO + OpenCV (headless). Multi-arch: builds on amd64 and on
# arm64 (Jetson/Raspberry Pi 64-bit) from the same file; OpenVINO's CPU plug-in has arm64 wheels.
# Size budget: ≤ 900 MB (python:3.11-slim ≈ 130 MB + runtimes ≈ 600 MB).
#   docker build -f docker/cpu.Dockerfile -t deploykit:cpu .
#   docker run --rm -v $PWD:/work deploykit:cpu bench /work/model.onnx --report /work/out
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1=12.2.0-14+deb12u1 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/deploykit
COPY pyproject.toml README.md ./
COPY constraints/ci.txt constraints/ci.txt
COPY deploykit deploykit
COPY cli cli
COPY models models
RUN pip install -c constraints/ci.txt "onnxruntime==1.31.1" "openvino==2026.4.1" "opencv-python-headless==5.0.0.93" \
        "numpy==2.4.6" "onnx==1.23.2" "typer==0.29.2" "rich==15.0.0" "psutil==7.2.2" \
    && pip install --no-deps .

RUN useradd --create-home --uid 1000 --user-group deploykit
USER 1000:1000
WORKDIR /work
ENTRYPOINT ["deploykit"]
CMD ["backends"]
