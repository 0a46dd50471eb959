"""Malformed numbers in input text never crash a parser (exit 70): the NCCL log's
``rank --1`` / ``nRanks --1`` / ``cudaDriverVersion ²`` (issue 10, item 5), odd digits in
nvlink and kernel-log inputs, and the one helper pair every parser uses for them."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.cli import EXIT_INTERNAL, Environment, main
from gputriage.parsers.base import strict_float, strict_int
from gputriage.parsers.nccl_log import parse_nccl_log
from gputriage.parsers.nvlink import parse_nvlink_errors, parse_nvlink_status

PREFIX = "gpu-a01:4411:4502 [0] NCCL INFO "
BAD_NCCL = [
    "cudaDriverVersion ²",
    "comm 0x55d0c1a2b3c0 rank --1 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
    "comm 0x55d0c1a2b3c1 rank 1 nRanks --1 nNodes 2 localRanks 8 localRank 0 MNNVL 0",
]
GOOD_NCCL = ["NCCL version 2.21.5+cuda12.4", "cudaDriverVersion 12040",
             "Bootstrap : Using eth0:10.0.0.11<0>"]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


def _nccl_log(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "job.log"
    path.write_text("".join(PREFIX + line + "\n" for line in GOOD_NCCL + lines))
    return path


@pytest.mark.parametrize("line", BAD_NCCL)
@pytest.mark.parametrize("command", ["nccl", "analyze"])
def test_malformed_nccl_numbers_are_not_internal_errors(tmp_path: Path, command: str,
                                                        line: str) -> None:
    code, _, err = _run([command, str(_nccl_log(tmp_path, [line]))])
    assert code != EXIT_INTERNAL and code in (0, 1, 2, 3), err
    assert "internal error" not in err


def test_malformed_numbers_are_left_out_not_misread() -> None:
    text = "".join(PREFIX + line + "\n" for line in [*BAD_NCCL, "cudaDriverVersion ١٢٠٤٠"])
    log = parse_nccl_log(text)
    (proc,) = log.processes
    assert proc.cuda_driver is None
    assert all(c.rank in (None, 1) and c.nranks in (None, 16) for c in proc.comms)
    assert -1 not in proc.ranks


def test_odd_hca_index_in_a_gdr_line_is_not_an_internal_error(tmp_path: Path) -> None:
    path = _nccl_log(tmp_path, ["NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.0.0.1<0>",
                                "NET/IB : GPU Direct RDMA Disabled for HCA ² (distance 5 > 4)",
                                "Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0"])
    code, _, err = _run(["nccl", str(path)])
    assert code in (0, 1, 2, 3), err


@pytest.mark.parametrize("text", ["²", "١٢", "--1", "1_000", " 1 ", "1 ", "+-1", "", "-",
                                  "0x10", "1e3", "nan", "½", "1" * 21, "12\n"])
def test_strict_int_rejects(text: str) -> None:
    assert strict_int(text) is None


@pytest.mark.parametrize("text", ["²", "١٢", "--1", "1_0", " 1 ", "nan", "NaN", "inf",
                                  "-Infinity", "1e999", "1.2.3", ".", "e5", "1e", "0x1p3",
                                  "١.٥", "1,5"])
def test_strict_float_rejects(text: str) -> None:
    assert strict_float(text) is None


def test_strict_helpers_accept_plain_ascii_forms() -> None:
    assert [strict_int(t) for t in ("0", "-1", "+7", "007", "1" * 20)] == \
        [0, -1, 7, 7, int("1" * 20)]
    assert strict_int("-1", signed=False) is None and strict_int("12", signed=False) == 12
    assert [strict_float(t) for t in ("1", "-0.5", ".5", "5.", "1.2e+03", "2E-1")] == \
        [1.0, -0.5, 0.5, 5.0, 1200.0, 0.2]


_ASCII_INT = re.compile(r"[-+]?[0-9]{1,20}")
_ASCII_FLOAT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_NUMBERISH = st.text(alphabet=st.sampled_from(list("0123456789+-._eE ²١٢½nafi\n")),
                     max_size=24)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=30), _NUMBERISH))
def test_helpers_never_raise_and_take_only_ascii_numbers(text: str) -> None:
    n = strict_int(text)
    assert (n is not None) == bool(_ASCII_INT.fullmatch(text))
    if n is not None:
        assert n == int(text)
    x = strict_float(text)
    if x is not None:
        assert _ASCII_FLOAT.fullmatch(text) and x == float(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(10 ** 19), max_value=10 ** 19),
       st.floats(allow_nan=False, allow_infinity=False))
def test_helpers_round_trip(n: int, x: float) -> None:
    assert strict_int(str(n)) == n
    assert strict_float(repr(x)) == x


NVLINK_ODD = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-1111-2222-3333-444444444444)
\t Link 0: 25 GB/s
\t Link ١: 26.562 GB/s
\t Link 1: ٢٦.٥ GB/s
\t Link 0: Replay Errors: 5
\t Links ١-٣: Replay Errors: 7
\t Links 0-²: CRC Errors: 1
\t Link 2: Recovery Errors: 1_000
\t Link 3: Replay Errors: nan
"""


def test_nvlink_odd_digits_are_not_numbers() -> None:
    (gpu,) = parse_nvlink_status(NVLINK_ODD).gpus
    assert [(link.link, link.speed_gbps) for link in gpu.links] == [(0, 25.0)]
    (counted,) = parse_nvlink_errors(NVLINK_ODD).gpus
    assert counted.counters == {0: {"Replay Errors": 5}}


@pytest.mark.parametrize("name, text", [
    ("nvlink.txt", NVLINK_ODD),
    ("kern.log", "[ 4254.197860] NVRM: Xid (PCI:0000:5d:00): ٧٩, pid='<unknown>', "
                 "name=<unknown>, GPU has fallen off the bus.\n"
                 "[ 4255.000000] nvidia-nvswitch٣: SXid (PCI:0000:05:00.0): ١٢٠٢٢, "
                 "Non-fatal, Link ²(0x1)\n"),
])
@pytest.mark.parametrize("command", ["analyze", "logs"])
def test_odd_digits_in_inputs_are_not_internal_errors(tmp_path: Path, name: str, text: str,
                                                      command: str) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    code, _, err = _run([command, str(path)])
    assert code != EXIT_INTERNAL and "internal error" not in err, err


SRC = Path(__file__).resolve().parents[2] / "src" / "gputriage"


def test_no_pattern_takes_unicode_digits() -> None:
    """``\\d`` matches every Unicode decimal digit ("١٢", "߁") and int("٧٩") is 79: a
    pattern that finds a number names ASCII digits, ``[0-9]``, as the tools print them."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        with path.open(encoding="utf-8") as fh:
            for tok in tokenize.generate_tokens(fh.readline):
                if tok.type == tokenize.STRING and re.search(r"(?<!\\)(?:\\\\)*\\[dD]",
                                                             tok.string):
                    found.append(f"{path.relative_to(SRC)}:{tok.start[0]}")
    assert not found, found
