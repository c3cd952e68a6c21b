# rlloop agent image (CPU): the trainer image plus the rest of AutoRL-Bench's agent-side requirements (requests,
# loguru, ...) and the openai SDK for LLM-driven agents (their model is reached through rlloop's gateway), so an
# external agent written for AutoRL-Bench runs unchanged under `rlloop bench --agents DIR`; and the coding agents
# PostTrainBench and AutoRL-Bench run (Claude Code, Codex CLI, OpenCode) with the Node.js Codex's launcher needs,
# for `rlloop bench --agents claude-code,codex,opencode`.
# The trainer image stays lean for rlloop's own trials.
#
# Built by `rlloop sandbox build --agent` (sandbox/images.py), whose context holds:
#   wheelhouse/      wheels of the packages the trainer image lacks + requirements.txt (every AutoRL-Bench agent
#                    package, pinned to the host's versions; those the trainer image has are already satisfied)
#   agent-clis.tar   node_modules/ as `npm install` made it on the host at the pinned versions (sandbox.images
#                    AGENT_CLIS, AGENT_NODE): each CLI with its platform binary, and node-linux-<arch>'s node
ARG TRAINER_IMAGE=rlloop/trainer:cpu
FROM ${TRAINER_IMAGE}
USER root
COPY wheelhouse /tmp/agent-wheelhouse
RUN /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/agent-wheelhouse \
      -r /tmp/agent-wheelhouse/requirements.txt \
 && rm -rf /tmp/agent-wheelhouse \
 && /opt/venv/bin/python -c "import accelerate, datasets, huggingface_hub, loguru, numpy, openai, pandas, peft, pydantic, requests, torch, transformers, trl, yaml"
# A local tar is unpacked by ADD itself, hard links kept (each platform binary is also named by its launcher package).
ADD agent-clis.tar /opt/agent-clis/
# Each command answers its version here, at build time, so a broken install fails the build, not a run.
# A login shell (Codex runs its commands with `bash -lc`) resets PATH in /etc/profile: profile.d puts the venv back.
RUN ln -s /opt/agent-clis/node_modules/.bin/node /usr/local/bin/node \
 && echo 'case ":$PATH:" in *:/opt/venv/bin:*) ;; *) export PATH="/opt/venv/bin:$PATH" ;; esac' \
      > /etc/profile.d/rlloop-venv.sh \
 && for cli in claude codex opencode; do ln -s "/opt/agent-clis/node_modules/.bin/$cli" "/usr/local/bin/$cli"; done \
 && mkdir /tmp/version-home \
 && HOME=/tmp/version-home node --version && HOME=/tmp/version-home claude --version \
 && HOME=/tmp/version-home codex --version && HOME=/tmp/version-home opencode --version \
 && rm -rf /tmp/version-home \
 && [ "$(bash -lc 'command -v python')" = /opt/venv/bin/python ]
# The labels last: a changed input hash re-labels the image without re-running the layers above (Docker's cache)
ARG RLLOOP_INPUTS=unknown
ARG AGENT_CLIS=unknown
LABEL rlloop.image="agent-cpu" rlloop.inputs="${RLLOOP_INPUTS}" rlloop.agent_clis="${AGENT_CLIS}"
USER rlloop
