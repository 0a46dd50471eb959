"""Newlines counted by deleting them (gputriage.text.newlines) against ``bytes.count``."""

from __future__ import annotations

import mmap
import random

import pytest

from gputriage.text import newlines as nl


def _log(rng: random.Random, size: int) -> bytes:
    """``size`` bytes of lines of one density (short, around ``SPARSE`` or exactly at it,
    long) with runs of empty lines."""
    top = rng.choice([3, nl.SPARSE - 1, nl.SPARSE + 1, 200])
    out = bytearray()
    while len(out) < size:
        out += b"x" * (nl.SPARSE - 1 if top == nl.SPARSE - 1 else rng.randint(0, top))
        out += b"\n" * (rng.randint(2, 9) if rng.random() < 0.05 else 1)
    return bytes(out[:size])


@pytest.mark.parametrize("seed", range(6))
def test_newlines_are_counted_exactly_however_dense(seed, tmp_path):
    """Whole buffers and pieces of them, small (counted in place) and large (deleted
    from, in pieces), in bytes, a read buffer and a mapping: the count is ``count``'s."""
    rng = random.Random(seed)
    for _ in range(30):
        size = rng.choice([0, 1, 31, 32, 33, 1000, nl._SMALL - 1, nl._SMALL, 20_000,
                           3 * nl._PIECE + 17])
        data = _log(rng, size)
        path = tmp_path / "log"
        path.write_bytes(data or b"\n")
        lo = rng.randint(0, len(data))
        hi = rng.choice([None, rng.randint(lo, len(data) + 5)])
        want = data.count(b"\n", lo, len(data) if hi is None else hi)
        assert nl.newlines(data, lo, hi) == want
        assert nl.newlines(bytearray(data), lo, hi) == want
        assert nl.newlines(data) == data.count(b"\n")
        if data:
            with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                assert nl.newlines(mm, lo, hi) == want
