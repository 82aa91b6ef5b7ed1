# The RLAX image: every workspace package in one virtual environment, for every role.
# The role is the command (see the gke launcher's manifests), e.g.
#   rlax serve param-server --config /etc/rlax/run/run.yaml
#   rlax train /etc/rlax/run/run.yaml --run-dir gs://BUCKET/runs/NAME --role trainer
#   rlax train /etc/rlax/run/run.yaml --run-dir gs://BUCKET/runs/NAME --role worker --worker-id 0-0
# Build from the repository root:
#   docker build -t REGISTRY/rlax:0.1.0 .            # JAX for TPUs (libtpu from PyPI)
#   docker build --build-arg JAX_EXTRA= -t rlax:cpu . # JAX for CPUs only
FROM python:3.11-slim-bookworm

# The local sandbox runs programs under bubblewrap; C++ problems need g++.
RUN apt-get update \
 && apt-get install -y --no-install-recommends bubblewrap g++ \
 && rm -rf /var/lib/apt/lists/*

RUN pip install --no-cache-dir uv==0.13.9
ENV UV_PROJECT_ENVIRONMENT=/opt/rlax/venv \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1 \
    PATH=/opt/rlax/venv/bin:$PATH
WORKDIR /opt/rlax/src

# The lock decides every version; the dev group (linters, test tools) stays out.
COPY pyproject.toml uv.lock README.md ./
COPY packages ./packages
RUN uv sync --locked --no-dev --all-packages --no-editable

# JAX's accelerator extra at the locked JAX version (jax[tpu] pins jaxlib and libtpu).
ARG JAX_EXTRA=tpu
RUN if [ -n "$JAX_EXTRA" ]; then \
      uv pip install --python /opt/rlax/venv/bin/python \
        "jax[$JAX_EXTRA]==$(/opt/rlax/venv/bin/python -c 'import jax; print(jax.__version__)')"; \
    fi

WORKDIR /opt/rlax
RUN rlax plugins
CMD ["rlax", "--help"]
