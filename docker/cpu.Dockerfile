# deploykit on CPU: ONNX Runtime + OpenVINO + OpenCV (headless). Multi-arch: builds on amd64 and on
# arm64 (Jetson/Raspberry Pi 64-bit) from the same file; OpenVINO's CPU plug-in has arm64 wheels.
# deploykit and its dependencies come from pyproject.toml (core + the extras below), at the versions of
# constraints/ci.txt: no second list of packages to drift from the first.
#   docker build -f docker/cpu.Dockerfile -t deploykit:cpu .
#   docker run --rm -v $PWD:/work deploykit:cpu bench /work/model.onnx --report /work/out
# Without a registry, `make docker` builds the base from Debian's packages (docs/docker.md).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH

RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1=12.2.0-14+deb12u1 \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/deploykit
COPY pyproject.toml README.md ./
COPY constraints/ci.txt constraints/ci.txt
COPY deploykit deploykit
COPY cli cli
COPY models models
ARG EXTRAS=onnxruntime,openvino,opencv
# pip's CA bundle for this build only, where a proxy re-signs TLS (docker/build.sh mounts the host's)
ARG PIP_CERT
RUN python3 -m venv /opt/venv \
    && pip install -c constraints/ci.txt ".[${EXTRAS}]" \
    && pip check

RUN useradd --create-home --uid 1000 --user-group deploykit
USER 1000:1000
WORKDIR /work
ENTRYPOINT ["deploykit"]
CMD ["backends"]
