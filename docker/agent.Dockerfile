# rlloop agent image (CPU): the trainer image plus the rest of AutoRL-Bench's agent-side requirements (requests,
# loguru, ...) and the openai SDK for LLM-driven agents (their model is reached through rlloop's gateway), so an
# external agent written for AutoRL-Bench runs unchanged under `rlloop bench --agents DIR`.
# The trainer image stays lean for rlloop's own trials.
#
# Built by `rlloop sandbox build --agent` (sandbox/images.py), whose context holds:
#   wheelhouse/      wheels of the packages the trainer image lacks + requirements.txt (every AutoRL-Bench agent
#                    package, pinned to the host's versions; those the trainer image has are already satisfied)
ARG TRAINER_IMAGE=rlloop/trainer:cpu
FROM ${TRAINER_IMAGE}
ARG RLLOOP_INPUTS=unknown
LABEL rlloop.image="agent-cpu" rlloop.inputs="${RLLOOP_INPUTS}"
USER root
COPY wheelhouse /tmp/agent-wheelhouse
RUN /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/agent-wheelhouse \
      -r /tmp/agent-wheelhouse/requirements.txt \
 && rm -rf /tmp/agent-wheelhouse \
 && /opt/venv/bin/python -c "import accelerate, datasets, huggingface_hub, loguru, numpy, openai, pandas, peft, pydantic, requests, torch, transformers, trl, yaml"
USER rlloop
