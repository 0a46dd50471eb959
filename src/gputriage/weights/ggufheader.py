"""A GGUF file's header, read with bounds: the layout of ggml's ``docs/gguf.md``.

``GGUF`` magic, a version (2 or 3; 1 used 32-bit counts and is not read), the tensor
count and the key-value count, the key-value pairs (skipped but for
``general.alignment``), then one record per tensor: name, dimensions, ggml type and
offset into the data section. Every count, string and array is checked against the
bytes left in the file and a cap before it is read or skipped, so a hostile header
costs at most a walk over the file's own bytes; nothing is allocated from a count.
Either byte order is read (the version tells which).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import BinaryIO

from gputriage.errors import InputError

__all__ = ["GGML_TYPES", "GgufHeader", "GgufTensor", "read_gguf_header"]

# ggml type id -> (name, elements per block, bytes per block); K-quants and most IQ
# types pack 256 elements (QK_K) per block, the older quants 32. Q8_1 is ggml's
# current block (two FP16 scales and 32 bytes: 36); gguf-py still says 40, the old
# FP32 layout. Q8_1 and Q8_K are ggml's dot-product intermediates, rare in files.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8),
    28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
    34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
# metadata value types: fixed-size ones by struct code; 8 is a string, 9 an array
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
            11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9

MAX_TENSORS = 100_000  # a large mixture of experts has a few thousand
MAX_KV = 65_536  # real files have tens
MAX_ARRAY = 1 << 24  # elements of one array (vocabularies are ~10^5)
MAX_NAME = 65_536  # bytes of a key or a tensor name (ggml's own limit is 64)
MAX_DIMS = 8
MAX_DEPTH = 4  # arrays of arrays
DEFAULT_ALIGNMENT = 32


@dataclass(frozen=True)
class GgufTensor:
    """One tensor record: its ggml type's name, elements, and bytes in the file."""

    type_name: str
    elements: int
    nbytes: int


@dataclass
class GgufHeader:
    """What the header declares."""

    version: int
    alignment: int = DEFAULT_ALIGNMENT
    data_start: int = 0
    tensors: list[GgufTensor] = field(default_factory=list)


class _Cursor:
    """Reads of a file that never pass its end; every refusal names the file."""

    def __init__(self, fh: BinaryIO, path: str, size: int) -> None:
        self.fh, self.path, self.size, self.pos = fh, path, size, 0
        self.order = "<"

    def fail(self, why: str) -> InputError:
        return InputError(f"{self.path}: not a readable GGUF file ({why})")

    def left(self) -> int:
        return self.size - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n > self.left():
            raise self.fail(f"{what} of {n} bytes runs past the end of the file")
        raw = self.fh.read(n)
        if len(raw) != n:
            raise self.fail(f"{what}: the file ended early")
        self.pos += n
        return raw

    def skip(self, n: int, what: str) -> None:
        if n > self.left():
            raise self.fail(f"{what} of {n} bytes runs past the end of the file")
        self.fh.seek(n, os.SEEK_CUR)
        self.pos += n

    def unpack(self, code: str, what: str) -> int:
        fmt = self.order + code
        value: int = struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]
        return value

    def count(self, what: str, cap: int, least_bytes: int) -> int:
        """A 64-bit count of items each at least ``least_bytes`` long."""
        n = self.unpack("Q", what)
        if n > cap or n * least_bytes > self.left():
            raise self.fail(f"{what} {n} does not fit the file (at most {cap})")
        return n

    def string(self, what: str, cap: int) -> bytes:
        n = self.count(f"{what} length", cap, 1)
        return self.take(n, what)


def _skip_value(cur: _Cursor, kind: int, depth: int = 0) -> None:
    """Pass over one metadata value of type ``kind``."""
    if kind in _SCALARS:
        cur.skip(struct.calcsize(_SCALARS[kind]), "a value")
    elif kind == _STRING:
        cur.skip(cur.count("a string length", cur.left(), 1), "a string")
    elif kind == _ARRAY:
        if depth >= MAX_DEPTH:
            raise cur.fail(f"arrays nested deeper than {MAX_DEPTH}")
        inner = cur.unpack("I", "an array's type")
        if inner in _SCALARS:
            size = struct.calcsize(_SCALARS[inner])
            cur.skip(cur.count("an array length", MAX_ARRAY, size) * size, "an array")
        elif inner in (_STRING, _ARRAY):
            least = 8 if inner == _STRING else 12  # a length; an inner type and a length
            for _ in range(cur.count("an array length", MAX_ARRAY, least)):
                _skip_value(cur, inner, depth + 1)
        else:
            raise cur.fail(f"unknown array element type {inner}")
    else:
        raise cur.fail(f"unknown metadata value type {kind}")


def _metadata(cur: _Cursor, head: GgufHeader, kv_count: int) -> None:
    for _ in range(kv_count):
        key = cur.string("a key", MAX_NAME)
        kind = cur.unpack("I", "a value type")
        if key == b"general.alignment" and kind == 4:  # uint32, as the spec says
            align = cur.unpack("I", "the alignment")
            if align == 0 or align % 8 or align > 1 << 20:
                raise cur.fail(f"general.alignment {align} is not a multiple of 8 "
                               "up to 1 MiB")
            head.alignment = align
        else:
            _skip_value(cur, kind)


def _tensor(cur: _Cursor) -> tuple[GgufTensor, int]:
    """One tensor record, and its offset into the data section."""
    cur.string("a tensor name", MAX_NAME)
    n_dims = cur.unpack("I", "a tensor's dimension count")
    if n_dims > MAX_DIMS:
        raise cur.fail(f"a tensor of {n_dims} dimensions (at most {MAX_DIMS})")
    dims = [cur.unpack("Q", "a dimension") for _ in range(n_dims)]
    kind = cur.unpack("I", "a tensor type")
    if kind not in GGML_TYPES:
        raise cur.fail(f"unknown ggml tensor type {kind}")
    name, block, block_bytes = GGML_TYPES[kind]
    if dims and dims[0] % block:
        raise cur.fail(f"a {name} tensor whose rows ({dims[0]}) are not whole "
                       f"{block}-element blocks")
    elements = 1
    for d in dims:
        elements *= d
    offset = cur.unpack("Q", "a tensor offset")
    return GgufTensor(name, elements, elements // block * block_bytes), offset


def _walk(cur: _Cursor) -> GgufHeader:
    if cur.take(4, "the magic") != b"GGUF":
        raise cur.fail("no GGUF magic")
    raw = cur.take(4, "the version")
    version = struct.unpack("<I", raw)[0]
    if version not in (2, 3) and struct.unpack(">I", raw)[0] in (2, 3):
        cur.order, version = ">", struct.unpack(">I", raw)[0]
    if version not in (2, 3):
        raise cur.fail(f"version {version}; versions 2 and 3 are read")
    head = GgufHeader(version)
    n_tensors = cur.count("tensor count", MAX_TENSORS, 24)  # name length, dims, type, offset
    n_kv = cur.count("key-value count", MAX_KV, 13)  # key length, type, one byte
    _metadata(cur, head, n_kv)
    records = [_tensor(cur) for _ in range(n_tensors)]
    head.data_start = -(-cur.pos // head.alignment) * head.alignment
    room = cur.size - head.data_start
    for tensor, offset in records:
        if offset + tensor.nbytes > room:
            raise cur.fail(f"a {tensor.type_name} tensor of {tensor.nbytes} bytes at offset "
                           f"{offset} lies past the end of the file (truncated?)")
    head.tensors = [t for t, _ in records]
    return head


def read_gguf_header(path: str) -> GgufHeader:
    """The header of the GGUF file ``path``; InputError with one line saying what is
    wrong when it is not one this reader can walk."""
    try:
        with open(path, "rb", buffering=1 << 16) as fh:
            return _walk(_Cursor(fh, path, os.fstat(fh.fileno()).st_size))
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None
