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
# torch comes with the base image: keep it, install the rest (vllm pins its own torch; let it, if it must).
RUN grep -v -E '^torch(==|$)' /tmp/requirements.txt > /tmp/req-notorch.txt \
 && pip install --no-cache-dir -r /tmp/req-notorch.txt vllm
COPY src /opt/rlloop-src
RUN pip install --no-cache-dir --no-deps /opt/rlloop-src \
 && useradd --uid 1000 --create-home rlloop
ENV PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
USER rlloop
WORKDIR /home/rlloop
CMD ["python", "-m", "trainers", "--list"]
