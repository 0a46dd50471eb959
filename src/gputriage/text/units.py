"""Units of the weights arithmetic: dtypes, parameter counts, sizes and rates.

Sizes are decimal (GB = 1e9 bytes) as storage and links are sold; ``GiB`` is accepted
where people write it. A rate in bits (``Gb/s``, ``Gbit/s``) is a link's; bytes
(``GB/s``) a disk's or a file system's.
"""

from __future__ import annotations

import math
import re

from gputriage.text.fields import strict_float

__all__ = ["DTYPE_BYTES", "dtype_bytes", "format_bytes", "format_duration", "format_params",
           "normalise_dtype", "parse_params", "parse_rate", "parse_size"]

# bytes per element, by the names safetensors, GGUF summaries, config.json and people use
DTYPE_BYTES: dict[str, float] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5,
    "int16": 2, "int32": 4, "int64": 8, "bool": 1, "fp4": 0.5,
}
_ALIASES = {
    "f64": "fp64", "float64": "fp64", "double": "fp64",
    "f32": "fp32", "float32": "fp32", "float": "fp32",
    "f16": "fp16", "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16",
    "f8": "fp8", "f8_e4m3": "fp8", "f8_e5m2": "fp8", "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8",
    "i8": "int8", "u8": "int8", "uint8": "int8", "q8": "int8",
    "i4": "int4", "u4": "int4", "q4": "int4", "nf4": "int4", "f4": "fp4",
    "i16": "int16", "u16": "int16", "i32": "int32", "u32": "int32", "i64": "int64",
    "u64": "int64",
}
# the dtypes a person asks about (--dtype), in the order tables print them
REPORTED = ("fp32", "bf16", "fp16", "fp8", "int8", "int4")


def normalise_dtype(name: str) -> str | None:
    """The table's name of a dtype (``BF16`` → ``bf16``, ``torch.float16`` → ``fp16``);
    None when unknown."""
    key = name.strip().lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    return key if key in DTYPE_BYTES else None


def dtype_bytes(name: str) -> float:
    """Bytes per element of a dtype; ValueError when unknown."""
    key = normalise_dtype(name)
    if key is None:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(REPORTED)})")
    return DTYPE_BYTES[key]


MAX_PARAMS = 10**15
MAX_QUANTITY = 1e18  # an exabyte (per second): past any disk, link or model
_SCALE = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_PARAMS = re.compile(r"^\s*([0-9.]+)\s*([kmbgt]?)\s*$", re.IGNORECASE)


def parse_params(text: str) -> int:
    """A parameter count: ``70B``, ``7.5b``, ``405B``, ``125M``, ``8e9``; ValueError."""
    m = _PARAMS.match(text)
    number = strict_float(m.group(1) if m else text.strip())
    if number is None:
        raise ValueError(f"not a parameter count: {text[:40]!r} (write 70B, 8B, 125M)")
    value, scale = number, _SCALE[m.group(2).lower()] if m else 1.0
    if not 0 < value * scale <= MAX_PARAMS:
        raise ValueError(f"not a parameter count: {text[:40]!r} (1 to 10^15)")
    return int(round(value * scale))


_UNIT = re.compile(r"^\s*([0-9.]+)\s*([kmgtp]?)(i?)(b|bit|byte|bytes)?\s*$",
                   re.IGNORECASE)
_PREFIX = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def _quantity(text: str, *, rate: bool) -> float:
    """Bytes (or bytes per second) of ``140GB``, ``1.2GiB``, ``100Gb`` (bits)."""
    body = text.strip()
    if rate:
        low = body.lower()
        for suffix in ("/s", "ps", "/sec"):
            if low.endswith(suffix):
                body = body[: -len(suffix)]
                break
        else:
            raise ValueError(f"not a rate: {text[:40]!r} (write 1.2GB/s, 100Gb/s, 500MB/s)")
    m = _UNIT.match(body)
    if m is None or not (m.group(4) or not rate):
        what = "rate" if rate else "size"
        raise ValueError(f"not a {what}: {text[:40]!r} (GB = bytes, Gb = bits: 1.2GB/s, "
                         "100Gb/s)")
    number, prefix, binary, unit = m.groups()
    mantissa = strict_float(number)
    if mantissa is None:
        raise ValueError(f"{text[:40]!r} is not a number")
    value: float = mantissa * float(1024 if binary else 1000) ** _PREFIX[prefix.lower()]
    if unit and (unit == "b" or unit.lower() == "bit"):  # a lower-case b: bits
        value /= 8
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text[:40]!r} is not a positive number")
    if value > MAX_QUANTITY:
        raise ValueError(f"{text[:40]!r} is too large (at most 1 EB)")
    return value


def parse_size(text: str) -> float:
    """Bytes of ``140GB``, ``1.5TiB``, ``512M`` (bytes unless written in bits); ValueError."""
    return _quantity(text, rate=False)


def parse_rate(text: str) -> float:
    """Bytes per second of ``1.2GB/s``, ``100Gb/s``, ``25Gbps``, ``800MiB/s``; ValueError."""
    return _quantity(text, rate=True)


def format_bytes(n: float) -> str:
    """``140.0 GB``, ``327.7 kB``, ``7.00 TB`` (decimal units)."""
    for unit, scale in (("PB", 1e15), ("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= scale:
            value = n / scale
            return f"{value:.2f} {unit}" if value < 10 else f"{value:.1f} {unit}"
    return f"{n:.0f} B"


def format_params(n: int) -> str:
    """``70.55B``, ``8.03B``, ``124M``."""
    if n >= 1e9:
        return f"{n / 1e9:.2f}B"
    if n >= 1e6:
        return f"{n / 1e6:.0f}M"
    return str(n)


def format_duration(seconds: float) -> str:
    """``9 min 20 s``, ``47 s``, ``2.1 h``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s"
    return f"{seconds / 3600:.1f} h"
