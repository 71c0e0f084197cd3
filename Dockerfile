# embedding-search API image with the default table (GloVe 6B 50d, HNSW index) built in.
#
#   docker build -t embedding-search .                         (--build-arg EXTRAS=map: t-SNE and UMAP maps)
#   docker run --rm -p 8000:8000 --read-only --tmpfs /tmp embedding-search
#
# The container serves within seconds and needs no network: the table is built at image build time.
# Nothing is written outside /tmp, so the root filesystem can be read-only. Configuration: EMBEDDING_* variables.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --------------------------------------------------------------------------------------------------- build
FROM ${PYTHON_IMAGE} AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv
WORKDIR /src

# Dependencies in their own layer: rebuilt only when pyproject.toml changes, not on every code change. EXTRAS names
# optional ones, comma-separated: --build-arg EXTRAS=map for the explorer's t-SNE and UMAP maps.
ARG EXTRAS=""
COPY pyproject.toml ./
RUN python -c "import os, tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
extras = [e.strip() for e in os.environ.get('EXTRAS', '').split(',') if e.strip()]; \
unknown = sorted(set(extras) - set(p['optional-dependencies'])); \
assert not unknown, f'EXTRAS names no extra of pyproject.toml: {unknown}'; \
print('\n'.join(p['dependencies'] + [d for e in extras for d in p['optional-dependencies'][e]]))" \
        > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt

# The code, installed without touching the dependency layer.
COPY README.md ./
COPY index ./index
COPY service ./service
RUN pip install --no-cache-dir --no-deps . \
    && python -m compileall -q /opt/venv

# The default table, built once here so that containers start without network or build time.
RUN embedding-index build --data-dir /data

# ------------------------------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime

# OCI annotations, from pyproject.toml's [project] (tests/deploy/test_docker.py keeps them equal).
LABEL org.opencontainers.image.title="embedding-search" \
      org.opencontainers.image.description="Vector search over embedding tables: an offline builder and a JSON REST API." \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"

# One OpenMP/BLAS thread per process (embedding-serve's default too): a replica serves concurrent requests on
# several threads (FAISS releases the GIL), so per-query threads would only oversubscribe the cores. Raise them
# with care: workers x threads should not exceed the container's CPUs. embedding-serve also tunes glibc's
# malloc for a small footprint per worker (service/main.py, tune_malloc). numba (UMAP projections, in an image
# with the `map` extra) keeps its compiled code in NUMBA_CACHE_DIR on the writable /tmp: the first worker of a
# container compiles it, the others and restarted workers load it.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    NUMBA_CACHE_DIR=/tmp/numba \
    OMP_NUM_THREADS=1 \
    OPENBLAS_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 \
    EMBEDDING_THREADS=1 \
    EMBEDDING_DATA_DIR=/data

RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin app

COPY --from=build /opt/venv /opt/venv
# Owned by the app user so that the compose `builder` service can add tables to the `tables` volume, which Docker
# fills with this directory when it is new; the API replicas mount it read-only. No VOLUME: Docker would give
# every container an anonymous volume holding a writable copy of /data (the whole table copied at each
# start, left behind by a container removed without -v), under --read-only too, and the server would write its
# map layouts there. Without it /data is part of the read-only image, and a volume is mounted over it by choice.
COPY --from=build --chown=10001:10001 /data /data

USER 10001:10001
WORKDIR /tmp
EXPOSE 8000

# Failures during the start period do not count: it is as long as a replica may take to load and verify large
# tables on cold storage (Kubernetes' startup probe allows as much); a success ends it at once. Then a minute of
# failures in a row, as long as embedding-serve leaves a silent worker, makes the container unhealthy (replaced
# by a swarm): a container only slow on a loaded host is left to finish its requests.
HEALTHCHECK --interval=10s --timeout=3s --start-period=300s --retries=6 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2)"]

CMD ["embedding-serve", "--host", "0.0.0.0", "--port", "8000"]
