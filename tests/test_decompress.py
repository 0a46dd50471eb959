"""One stream layer: ``gputriage logs`` and ``gputriage nccl`` decompress the same bytes
the same way (members read on, padding skipped, what follows the last member
reported, a cut or corrupt stream kept up to the cut)."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from typing import Any

import pytest

from gputriage.io.decompress import compression, data_of, decompressed, peek, seekable
from gputriage.logscan import scan_paths
from gputriage.nccl.inputs import read_inputs

LINE = "dgx-b01:{pid}:{pid} [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
PACK = {"gzip": gzip.compress, "xz": lzma.compress, "bzip2": bz2.compress}


def _members(kind: str, n: int = 3, per: int = 200) -> tuple[bytes, int]:
    pack = PACK[kind]
    parts = [pack("".join(LINE.format(pid=1000 * m + i) for i in range(per)).encode())
             for m in range(n)]
    return parts[0] + b"\x00" * 7 + b"".join(parts[1:]), n * per


def _read_both(tmp_path, data: bytes) -> tuple[tuple, tuple]:
    path = tmp_path / "job.log.gz"
    path.write_bytes(data)
    scan = scan_paths([str(path)])
    found = read_inputs([str(path)])
    return (scan.lines, scan.problems), (found.log.nccl_lines, found.problems)


@pytest.mark.parametrize("kind", ["gzip", "xz", "bzip2"])
def test_both_commands_read_every_member(tmp_path, kind):
    data, lines = _members(kind)
    logs, nccl = _read_both(tmp_path, data)
    assert logs == nccl == (lines, [])


def test_both_commands_report_what_follows_the_last_member_alike(tmp_path):
    data, lines = _members("gzip")
    logs, nccl = _read_both(tmp_path, data + b"\x00\x00not gzip\n")
    path = tmp_path / "job.log.gz"
    assert logs == nccl == (lines, [f"{path}: data after the end of the gzip stream ignored"])


def test_both_commands_keep_a_cut_stream_up_to_the_cut(tmp_path):
    data, _ = _members("gzip", n=1, per=20_000)
    logs, nccl = _read_both(tmp_path, data[: len(data) // 2])
    assert 0 < nccl[0] < 20_000 and logs[0] == nccl[0] + 1  # logs counts the cut line
    assert logs[1] == nccl[1] and "truncated gzip data" in logs[1][0]


def test_a_member_boundary_at_a_read_boundary_is_no_trailing_data():
    """The next member's magic split across reads still starts a member."""
    first, second = gzip.compress(b"a\n" * 10), gzip.compress(b"b\n" * 10)
    reads = iter([second[:1], second[1:]])
    problems: list[str] = []
    out = b"".join(decompressed("gzip", first, lambda n: next(reads, b""), "x", problems,
                                1 << 20))
    assert out == b"a\n" * 10 + b"b\n" * 10 and problems == []


def test_magic_bytes():
    assert [compression(PACK[k](b"x")) for k in PACK] == list(PACK)
    assert compression(b"BZhx") is None and compression(b"plain text") is None


@pytest.mark.parametrize("compress", [gzip.compress, lzma.compress, bz2.compress])
def test_one_function_reads_plain_and_every_compression_alike(compress: Any) -> None:
    body = b"".join(b"line %d\n" % i for i in range(5000))
    for data in (body, compress(body)):
        rest = io.BytesIO(data)
        first = rest.read(100)
        got = b"".join(data_of(first, rest.read, "x", problems := [], 4096))
        assert got == body and not problems


def test_peek_and_seekable_see_through_compression(tmp_path: Any) -> None:
    body = b"0123456789" * 1000
    for compress in (gzip.compress, lzma.compress, bz2.compress):
        assert peek(compress(body), 16) == body[:16]
        path = tmp_path / "f"
        path.write_bytes(compress(body))
        with path.open("rb") as raw:
            fh, compressed = seekable(raw)
            fh.seek(5000)
            assert compressed and fh.read(10) == body[5000:5010]
    assert peek(b"plain text", 5) == b"plain"
