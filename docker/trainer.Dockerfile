# rlloop trainer image (CPU): what a trial needs to run `python -m trainers <recipe> --config FILE`, nothing more
# (no MLflow, LangGraph or FastAPI: those live on the host).
#
# Built by `rlloop sandbox build` (sandbox/images.py), which assembles the context:
#   wheelhouse/      wheels of the runtime deps + requirements.txt (pinned to the host's versions)
#   src/             a minimal pyproject.toml and the tasks/ trainers/ packages (never grader/ or agent/)
# Online it starts FROM python:3.11-slim; offline FROM rlloop/base:bookworm (debootstrap'ed Debian bookworm, whose
# python3 is 3.11 like the host, so the host's wheels fit).
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
COPY wheelhouse /tmp/wheelhouse
RUN python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheelhouse \
      -r /tmp/wheelhouse/requirements.txt
COPY src /opt/rlloop-src
# pip leaves .pyc files compiled: keep them, the root filesystem is read-only when trials run.
RUN /opt/venv/bin/pip install --no-cache-dir --no-index --no-deps --no-build-isolation /opt/rlloop-src

# The final image gets the venv only: the wheelhouse layer stays behind in the build stage.
FROM ${BASE_IMAGE}
ARG RLLOOP_INPUTS=unknown
LABEL rlloop.image="trainer-cpu" rlloop.inputs="${RLLOOP_INPUTS}"
RUN (groupadd --gid 1000 rlloop && useradd --uid 1000 --gid 1000 --home-dir /home/rlloop --create-home rlloop) \
    2>/dev/null \
 || (echo 'rlloop:x:1000:1000:rlloop:/home/rlloop:/bin/sh' >> /etc/passwd \
     && echo 'rlloop:x:1000:' >> /etc/group && mkdir -p /home/rlloop && chown 1000:1000 /home/rlloop)
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    HF_DATASETS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false
USER rlloop
WORKDIR /home/rlloop
CMD ["python", "-m", "trainers", "--list"]
