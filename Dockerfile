# syntax=docker/dockerfile:1
# One image for every informer-bus command: `reflector` and `processor` are arguments to the
# `informer-bus` entrypoint (see docker-compose.yml, deploy/kubernetes/). The API simulator,
# which is not part of the product, has an image of its own for docker-compose's demo profile:
#
#   docker build -t informer-bus:0.1.0 .
#   docker build --target apiserver-sim -t informer-bus-apiserver-sim:0.1.0 .
#
# No Docker engine runs where this project is developed: tests/app/deploy/test_dockerfile.py checks
# this file statically and runs its HEALTHCHECK command against a live service.

# --- build: wheels for the project, the simulator and their dependencies, so the final stages
# need no compiler and carry no source tree or build cache.
FROM python:3.11.13-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY common ./common
COPY reflector_svc ./reflector_svc
COPY processor_svc ./processor_svc
COPY informer_bus ./informer_bus
COPY apiserver_sim ./apiserver_sim
RUN pip wheel --no-cache-dir --wheel-dir /wheels ./apiserver_sim .

# --- the API simulator alone (docker-compose's demo profile), never in the product's image
FROM python:3.11.13-slim-bookworm AS apiserver-sim
RUN groupadd --system --gid 10001 informer \
    && useradd --system --uid 10001 --gid informer --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin informer
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels apiserver-sim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
EXPOSE 8001
USER 10001:10001
WORKDIR /tmp
ENTRYPOINT ["apiserver-sim"]

# --- runtime: the product (the last stage, what a plain `docker build` makes)
FROM python:3.11.13-slim-bookworm
# A fixed numeric uid/gid: Kubernetes' runAsNonRoot can only verify a numeric USER, and the
# manifests' runAsUser names the same id.
RUN groupadd --system --gid 10001 informer \
    && useradd --system --uid 10001 --gid informer --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin informer
# The project without its dev extras, from the wheels built above (nothing left behind).
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels informer-bus
# No .pyc writes: the root filesystem is read-only in Kubernetes. Every service listens for
# /metrics, /healthz and /readyz on 8080 inside its own container (the processor's default
# outside a container is 8081, so that it can run beside a reflector on one host).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    INFORMER_BUS_HTTP_PORT=8080
EXPOSE 8080
USER 10001:10001
WORKDIR /tmp
# slim images have no curl: the probe is Python's urllib (a non-2xx answer raises, exit 1).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('INFORMER_BUS_HTTP_PORT', '8080') + '/healthz', timeout=4)"]
ENTRYPOINT ["informer-bus"]
CMD ["--help"]
