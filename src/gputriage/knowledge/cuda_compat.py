"""CUDA compatibility as arithmetic: which CUDA a driver runs, which driver a CUDA
release needs, which CUDA builds for a GPU, and where forward compatibility works.

Pure functions over two tables of this package: ``cuda_toolkits.csv`` (each CUDA
release's toolkit driver and its family's minor-version floor) and ``gpu_arch.csv``
(compute capability: the GPUs that have it, the CUDA releases that build for it). The
rules (NVIDIA's CUDA compatibility guide, see shared/reference/cuda_compat_rules.md):

- backward: a driver runs every CUDA release up to the newest it supports;
- minor version (CUDA 11 and later): a newer minor release of the same major runs on
  a driver at or above the family's floor, except where the driver must JIT-compile
  the program's PTX (error 222) or the program calls something newer (error 36);
- forward (``cuda-compat``): a newer major release through a user-space libcuda, on
  data-center GPUs only (804 elsewhere).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import Enum

from gputriage.knowledge import csv_rows, gpu_profile
from gputriage.text.fields import as_int

__all__ = ["Fit", "Toolkit", "arch_of", "capability_of", "cuda_from_int", "cuda_from_tag",
           "family_floor", "first_cuda_for", "forward_compat_supported", "last_cuda_for",
           "min_driver", "newest_cuda", "runs_on", "sm_name", "torch_tag_for", "version_key"]

# PyTorch wheel index tags (download.pytorch.org/whl/<tag>), oldest first
_TORCH_TAGS = ("cu92", "cu100", "cu101", "cu102", "cu110", "cu111", "cu113", "cu116", "cu117",
               "cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130")


class Fit(str, Enum):
    """Whether a program built for one CUDA release runs on a driver."""

    YES = "yes"  # the driver supports that release
    MINOR = "minor"  # through minor-version compatibility: no PTX JIT, no newer calls
    NO = "no"


@dataclass(frozen=True)
class Toolkit:
    cuda: str  # "12.8"
    release: str  # "12.8 GA"
    min_driver: str  # the toolkit's driver
    family_floor: str | None  # the family's minor-version floor; None before CUDA 11


def version_key(version: str | None) -> tuple[int, ...]:
    """``"535.104.05"`` -> ``(535, 104, 5)``; the leading numbers only."""
    m = re.match(r"\s*v?([0-9]+(?:\.[0-9]+)*)", version or "")
    return tuple(int(x) for x in m.group(1).split(".")) if m else ()


def _minor(cuda: str | None) -> str | None:
    """``"12.8.0"`` -> ``"12.8"``."""
    key = version_key(cuda)
    return f"{key[0]}.{key[1] if len(key) > 1 else 0}" if key else None


def cuda_from_int(value: int | str) -> str | None:
    """A CUDA version as the driver API encodes it (``1000*major + 10*minor``):
    ``11040`` -> ``"11.4"``, ``9000`` -> ``"9.0"``."""
    n = as_int(value)
    if n is None or n < 1000:
        return None
    major, rest = divmod(n, 1000)
    return f"{major}.{rest // 10}"


def cuda_from_tag(tag: str | None) -> str | None:
    """A wheel's CUDA tag: ``cu128`` -> ``"12.8"``, ``cu92`` -> ``"9.2"``."""
    m = re.fullmatch(r"cu([0-9])([0-9]{1,2})", (tag or "").strip().lower())
    if not m:
        return None
    digits = m.group(1) + m.group(2)
    return f"{int(digits[:-1])}.{digits[-1]}"


@functools.cache
def _toolkits() -> tuple[Toolkit, ...]:
    rows = [Toolkit(r["cuda"].strip(), r["release"].strip(), r["min_driver"].strip(),
                    r["family_floor"].strip() or None) for r in csv_rows("cuda_toolkits.csv")]
    return tuple(sorted(rows, key=lambda t: version_key(t.cuda), reverse=True))


def _toolkit(cuda: str | None) -> Toolkit | None:
    want = version_key(_minor(cuda))
    return next((t for t in _toolkits() if version_key(t.cuda) == want), None)


def newest_cuda(driver: str | None) -> str | None:
    """The newest CUDA release a driver supports (its toolkit driver is not newer)."""
    have = version_key(driver)
    if not have:
        return None
    return next((t.cuda for t in _toolkits() if version_key(t.min_driver) <= have), None)


def min_driver(cuda: str | None) -> str | None:
    """The driver a CUDA release's toolkit needs for full support."""
    tk = _toolkit(cuda)
    if tk is not None:
        return tk.min_driver
    later = [t for t in _toolkits() if version_key(t.cuda) > version_key(cuda)]
    return later[-1].min_driver if later and version_key(cuda) else None


def family_floor(cuda: str | None) -> str | None:
    """The oldest driver that runs the release's major family under minor-version
    compatibility (11.x: 450.80.02, 12.x: 525.60.13, 13.x: 580); None before CUDA 11."""
    major = version_key(cuda)[:1]
    return next((t.family_floor for t in _toolkits()
                 if version_key(t.cuda)[:1] == major and t.family_floor), None)


def runs_on(cuda: str | None, driver: str | None) -> Fit | None:
    """Whether a program built for ``cuda`` runs on ``driver`` (None: cannot tell)."""
    need, have = _minor(cuda), version_key(driver)
    if need is None or not have:
        return None
    newest = newest_cuda(driver)
    if newest is not None and version_key(newest) >= version_key(need):
        return Fit.YES
    floor = family_floor(need)
    if floor is not None and have >= version_key(floor):
        return Fit.MINOR
    return Fit.NO


def torch_tag_for(cuda: str | None, driver: str | None = None) -> str | None:
    """The newest PyTorch wheel tag (``cu118``) that runs on a driver supporting
    ``cuda``: its own major family under minor-version compatibility when the driver
    is at the floor, else the newest tag not newer than ``cuda``."""
    top = version_key(_minor(cuda))
    if not top:
        return None
    best = None
    for tag in _TORCH_TAGS:
        v = version_key(cuda_from_tag(tag))
        fits = v <= top
        if not fits and driver is not None:
            fits = v[:1] == top[:1] and runs_on(cuda_from_tag(tag), driver) is Fit.MINOR
        if fits:
            best = tag
    return best


# --- architectures --------------------------------------------------------------------

@dataclass(frozen=True)
class Arch:
    capability: str  # "8.9"
    name: str  # "Ada Lovelace"
    first_cuda: str
    last_cuda: str | None
    pattern: re.Pattern[str]


@functools.cache
def _arches() -> tuple[Arch, ...]:
    return tuple(Arch(r["capability"].strip(), r["architecture"].strip(),
                      r["first_cuda"].strip(), r["last_cuda"].strip() or None,
                      re.compile(r["name_pattern"], re.IGNORECASE))
                 for r in csv_rows("gpu_arch.csv"))


def _capability(value: str | None) -> str | None:
    """``"sm_89"``, ``"89"``, ``"8.9"``, ``"compute_120"`` -> ``"8.9"`` / ``"12.0"``."""
    text = (value or "").strip().lower()
    if m := re.fullmatch(r"([0-9]{1,2})\.([0-9])", text):
        return f"{int(m.group(1))}.{m.group(2)}"
    if m := re.fullmatch(r"(?:sm_|compute_)?([0-9]{1,2})([0-9])[af]?", text):
        return f"{int(m.group(1))}.{m.group(2)}"
    return None


def sm_name(capability: str | None) -> str | None:
    """``"8.9"`` -> ``"sm_89"``, ``"12.0"`` -> ``"sm_120"``."""
    cc = _capability(capability)
    return f"sm_{cc.replace('.', '')}" if cc else None


def arch_of(capability: str | None) -> Arch | None:
    cc = _capability(capability)
    return next((a for a in _arches() if a.capability == cc), None)


def capability_of(gpu_name: str | None) -> str | None:
    """The compute capability of a GPU by its product name; None when unknown."""
    if not gpu_name:
        return None
    return next((a.capability for a in _arches() if a.pattern.search(gpu_name)), None)


def first_cuda_for(capability: str | None) -> str | None:
    """The first CUDA release that builds native code for a compute capability."""
    arch = arch_of(capability)
    return arch.first_cuda if arch else None


def last_cuda_for(capability: str | None) -> str | None:
    """The last CUDA release that builds for it (None: current releases still do)."""
    arch = arch_of(capability)
    return arch.last_cuda if arch else None


_CONSUMER = re.compile(r"GeForce|TITAN|Quadro|\bRTX\b|\bGTX\b", re.IGNORECASE)
_DATACENTER = re.compile(r"\bTesla\b|\b[ABHLT][0-9]{1,3}[A-Z]?\b|\bG[BH][0-9]{3}\b|\bB[0-9]{3}\b",
                         re.IGNORECASE)


def forward_compat_supported(gpu_name: str | None) -> bool | None:
    """Whether forward compatibility (the ``cuda-compat`` package) can work on a GPU:
    data-center GPUs yes, GeForce, TITAN, Quadro and RTX workstation cards no (a few
    NGC-ready RTX SKUs aside); None when the name does not tell."""
    if not gpu_name:
        return None
    profile = gpu_profile(name=gpu_name)
    if profile is not None:
        return profile.datacenter
    if _CONSUMER.search(gpu_name):
        return False
    if _DATACENTER.search(gpu_name):
        return True
    return None
