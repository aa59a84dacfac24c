# syntax=docker/dockerfile:1
# shardq: one image for dispatchers, workers, one-shot commands (queue create, redis check) and, as
# the `loadtest` target, Locust.  Build:  docker build -t shardq:0.1.0 .
# The tag follows the version in pyproject.toml; tests/deploy/test_deploy.py checks that the compose
# file, the k8s manifests and the labels below agree on it.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: the wheel, with lua/ packed in as shardq/lua ------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY shardq/ shardq/
COPY lua/ lua/
RUN pip wheel --no-deps --wheel-dir /wheels .

# ---- runtime ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="shardq" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.description="Delayed-job scheduler over the partitions of a Redis Cluster"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SHARDQ_METRICS_PORT=9100
RUN groupadd --system --gid 10001 shardq \
 && useradd --system --uid 10001 --gid shardq --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin shardq
# The wheel pulls its dependencies (redis[hiredis], orjson, click, prometheus-client) from PyPI
# as binary wheels: no compiler in the image.  Then the `web` extra, for the console (`shardq
# web`), with the same requirements as pyproject.toml (tests/deploy/test_deploy.py checks).
COPY --from=build /wheels/ /wheels/
RUN pip install /wheels/shardq-*.whl && rm -rf /wheels \
 && pip install "starlette>=0.37" "uvicorn>=0.29" "jinja2>=3.1" "python-multipart>=0.0.9"
WORKDIR /app
USER 10001:10001
# Prometheus metrics of `dispatcher run` and `worker run` (SHARDQ_METRICS_PORT above).
EXPOSE 9100
# Redis reachable (every primary, in cluster mode); URL and password from SHARDQ_REDIS_URL and
# SHARDQ_REDIS_PASSWORD.  Exit 0/1.
HEALTHCHECK --interval=15s --timeout=10s --start-period=20s --retries=3 CMD ["shardq", "redis", "check"]
ENTRYPOINT ["shardq"]
CMD ["--help"]

# ---- loadtest: the runtime plus Locust (docker-compose.cluster.yml, profile "loadtest") ------
# The Locust requirement matches the `dev` extra in pyproject.toml (tests/deploy/test_deploy.py checks).
FROM runtime AS loadtest
USER 0
RUN pip install "locust>=2.20"
USER 10001:10001
EXPOSE 8089
HEALTHCHECK NONE
ENTRYPOINT ["locust"]
CMD ["-f", "/app/loadtest/locustfile.py"]
