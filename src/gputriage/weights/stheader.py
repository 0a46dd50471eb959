"""A safetensors file's header, read and checked with bounds: the format's documented
layout (an 8-byte little-endian length, then that many bytes of JSON: per tensor its
``dtype``, ``shape`` and ``data_offsets`` into the data that follows).

Every tensor entry is checked here, so no library is needed: a known dtype, a shape of
non-negative integers, offsets inside the data whose span is the dtype's bytes times
the elements, and no two tensors overlapping.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Any

from gputriage.errors import InputError

__all__ = ["MAX_HEADER_BYTES", "ST_DTYPE_BITS", "StTensor", "read_safetensors_header",
           "safetensors_tensors"]

# a header larger than this is not a model's (the format's own limit is 100 MB)
MAX_HEADER_BYTES = 100 * 1000 * 1000
# bits per element of every dtype the format names
ST_DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
    "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64,
    "U64": 64,
}
MAX_RANK = 16
MAX_ELEMENTS = 1 << 50  # a petabyte of int8: no tensor is larger
_RESERVED = ("__metadata__", "__header_bytes__")


@dataclass(frozen=True)
class StTensor:
    """One tensor entry, checked: its dtype, element count and bytes."""

    dtype: str
    elements: int
    nbytes: int


def read_safetensors_header(path: str) -> dict[str, Any]:
    """The JSON header of a safetensors file, read with bounds; InputError when the file
    is not one (too short, a declared length past the end or over 100 MB, bad JSON).
    ``__header_bytes__`` is added: the declared length."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if len(head) < 8:
                raise InputError(f"{path}: not a safetensors file (shorter than its "
                                 "8-byte header length)")
            (length,) = struct.unpack("<Q", head)
            if length > MAX_HEADER_BYTES or 8 + length > size:
                raise InputError(f"{path}: not a safetensors file (declares a "
                                 f"{length}-byte header in a {size}-byte file)")
            raw = fh.read(length)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError:  # bad UTF-8, bad JSON, an integer past Python's digit limit
        raise InputError(f"{path}: not a safetensors file (its header is not JSON)") from None
    except RecursionError:
        raise InputError(f"{path}: not a safetensors file (its header nests too deep)") \
            from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: not a safetensors file (its header is not an object)")
    header["__header_bytes__"] = length
    return header


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _tensor(entry: Any, data_bytes: int) -> tuple[StTensor, int] | str:
    """The checked entry and its first offset, or what is wrong with it."""
    if not isinstance(entry, dict):
        return "not an object"
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in ST_DTYPE_BITS:
        return f"unknown dtype {str(dtype)[:20]!r}"
    if (not isinstance(shape, list) or len(shape) > MAX_RANK
            or not all(_is_int(d) and 0 <= d <= MAX_ELEMENTS for d in shape)):
        return f"shape is not a list of at most {MAX_RANK} non-negative integers"
    elements = 1
    for d in shape:
        elements = min(elements * d, MAX_ELEMENTS + 1)
    if elements > MAX_ELEMENTS:
        return f"more than {MAX_ELEMENTS} elements"
    bits = elements * ST_DTYPE_BITS[dtype]
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_is_int, offsets))
            or not 0 <= offsets[0] <= offsets[1] <= data_bytes):
        return f"data_offsets are not [begin, end] within the {data_bytes} data bytes"
    if bits % 8 or offsets[1] - offsets[0] != bits // 8:
        return (f"data_offsets span {offsets[1] - offsets[0]} bytes; {dtype} {shape} "
                f"takes {bits / 8:g}")
    return StTensor(dtype, elements, bits // 8), offsets[0]


def safetensors_tensors(path: str, header: dict[str, Any], size: int) -> list[StTensor]:
    """Every tensor of a header read by :func:`read_safetensors_header` from a file of
    ``size`` bytes, checked; InputError naming the first bad one."""
    data_bytes = size - 8 - int(header["__header_bytes__"])
    spans: list[tuple[int, int, str]] = []
    out = []
    for name, entry in header.items():
        if name in _RESERVED:
            continue
        checked = _tensor(entry, data_bytes)
        if isinstance(checked, str):
            raise InputError(f"{path}: not a safetensors file (tensor {name[:60]!r}: "
                             f"{checked})")
        tensor, begin = checked
        spans.append((begin, begin + tensor.nbytes, name))
        out.append(tensor)
    spans.sort()
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise InputError(f"{path}: not a safetensors file (tensors {first[:60]!r} and "
                             f"{second[:60]!r} overlap)")
    return out
