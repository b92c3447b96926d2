# deploykit on NVIDIA GPUs: ONNX Runtime GPU (CUDA 13 / cuDNN 9 from the runtime base image) + OpenCV
# (headless, CPU) + OpenVINO (CPU). For Jetson (arm64, JetPack), build from an L4T base instead:
#   docker build -f docker/cuda.Dockerfile --build-arg BASE_IMAGE=nvcr.io/nvidia/l4t-jetpack:r36.4.0 .
# Size budget: ≤ 6 GB (the CUDA runtime + cuDNN base is most of it).
#   docker build -f docker/cuda.Dockerfile -t deploykit:cuda .
#   docker run --rm --gpus all -v $PWD:/work deploykit:cuda run /work/model.onnx -b ort -d cuda
ARG BASE_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1 DEBIAN_FRONTEND=noninteractive

# Ubuntu's python3 and pip come from the base image's release; the Python packages are what is pinned.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-pip \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/deploykit
COPY pyproject.toml README.md ./
COPY constraints/ci.txt constraints/ci.txt
COPY deploykit deploykit
COPY cli cli
COPY models models
ARG EXTRAS=onnxruntime-gpu,openvino,opencv
# pip's CA bundle for this build only, where a proxy re-signs TLS (docker/build.sh mounts the host's)
ARG PIP_CERT
RUN python3 -m pip install -c constraints/ci.txt ".[${EXTRAS}]" \
    && python3 -m pip check

RUN useradd --create-home --uid 1001 --user-group deploykit
USER 1001:1001
WORKDIR /work
ENTRYPOINT ["deploykit"]
CMD ["backends"]
