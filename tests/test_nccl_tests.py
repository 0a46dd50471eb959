"""nccl-tests output: the corpus failure, synthetic full tables in the new and old layouts,
several runs in one text, footers, errors and line detection."""

from __future__ import annotations

import pytest

from gputriage.parsers.nccl_tests import is_nccl_tests_line, operation_of, parse_nccl_tests

NEW_HEAD = (
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)         "
    "   (us)  (GB/s)  (GB/s)       \n")
OLD_HEAD = (
    "#       size         count    type   redop     time   algbw   busbw  error     time   algbw"
    "   busbw  error\n"
    "#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
    "  (GB/s)       \n")


def _time(us: float) -> str:
    """nccl-tests prints times with fewer decimals as they grow."""
    return f"{us:7.0f}" if us >= 10000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def _rows(nranks: int, factor: float, sizes: list[int], peak: float, layout: str = "new",
          wrong: str = "0") -> tuple[str, list[tuple[int, float, float]]]:
    """Size rows whose algbw ramps up to ``peak`` GB/s; busbw = algbw * factor."""
    out, truth = [], []
    for size in sizes:
        lat_us = 25.0 + 1.5 * nranks
        t = lat_us + size / (peak * 1e3)  # us: bytes / (GB/s * 1e3)
        algbw = size / t / 1e3
        a, b = round(algbw, 2), round(algbw * factor, 2)
        count = size // 4
        ip_t = t * 1.01
        ip_a = round(size / ip_t / 1e3, 2)
        if layout == "new":
            cols = f"{size:12d}  {count:12d}     float     sum      -1"
        else:
            cols = f"{size:12d}  {count:12d}   float     sum"
        out.append(f"{cols}  {_time(t)}  {a:6.2f}  {b:6.2f}  {wrong:>5}  {_time(ip_t)}  "
                   f"{ip_a:6.2f}  {round(ip_a * factor, 2):6.2f}  {wrong:>5}")
        truth.append((size, a, b))
    return "\n".join(out) + "\n", truth


SIZES = [8 << i for i in range(31)]  # 8 B .. 8 GiB
RANKS16, TRUTH16 = _rows(16, 2 * 15 / 16, SIZES, 48.0)
DEVICES16 = "".join(
    f"#  Rank {r:2d} Group  0 Pid {51000 + r % 8:6d} on {'gpu-a01' if r < 8 else 'gpu-b07':>8} "
    f"device {r % 8:2d} [0x{[0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb][r % 8]:02x}] "
    "NVIDIA H100 80GB HBM3\n" for r in range(16))
AVG16 = round(sum(b for _, _, b in TRUTH16) / len(TRUTH16), 4)

ALLREDUCE_2NODE = (
    "$ mpirun -np 16 -N 8 --hostfile hosts -x NCCL_DEBUG=INFO ./build/all_reduce_perf "
    "-b 8 -e 8G -f 2 -g 1\n"
    "# nccl-tests version 2.13.11 nccl-headers=22105 nccl-library=22105\n"
    "# Collective test starting: all_reduce_perf\n"
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 "
    "iters: 20 agg iters: 1 validation: 1 graph: 0\n"
    "#\n# Using devices\n" + DEVICES16 +
    "gpu-a01:51000:51000 [0] NCCL INFO Bootstrap : Using ib0:10.12.0.11<0>\n"
    "gpu-a01:51000:51000 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    "gpu-a01:51000:51090 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    "#\n"
    "#                                                              out-of-place             "
    "          in-place          \n" + NEW_HEAD + RANKS16 +
    f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {AVG16} \n#\n"
    "# Collective test concluded: all_reduce_perf\n")


def test_corpus_header_then_cuda_failure(corpus):
    (run,) = parse_nccl_tests(corpus.sample("nccltests264-all-reduce-perf").text())
    assert (run.test, run.operation) == ("all_reduce_perf", "allreduce")
    assert run.line.endswith("./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8")
    assert run.params["nGpus"] == "8" and run.params["maxBytes"] == "134217728"
    assert run.params["step"] == "2(factor)" and run.params["warmup iters"] == "5"
    assert run.params["validation"] == "1" and run.params["graph"] == "0"
    assert run.rows == [] and run.devices == [] and run.avg_busbw is None and run.peak is None
    assert run.errors == ["test: Test CUDA failure common.cu:941 'system not yet initialized'",
                          ".. test pid 54340: Test failure common.cu:891"]


def test_full_two_node_allreduce_table():
    (run,) = parse_nccl_tests(ALLREDUCE_2NODE)
    assert (run.test, run.operation, run.nccl_version) == ("all_reduce_perf", "allreduce",
                                                           "2.21.5")
    assert run.line.startswith("$ mpirun -np 16")
    assert run.params["maxBytes"] == "8589934592" and run.params["agg iters"] == "1"
    assert run.nranks == 16 and run.hosts == ["gpu-a01", "gpu-b07"]
    d = run.devices[9]
    assert (d.rank, d.host, d.pid, d.device, d.bus, d.name) == (
        9, "gpu-b07", 51001, 1, "0x2a", "NVIDIA H100 80GB HBM3")
    assert [r.size for r in run.rows] == SIZES
    assert [(r.size, r.oop_algbw, r.oop_busbw) for r in run.rows] == TRUTH16
    for r in run.rows:
        assert (r.count, r.dtype, r.redop, r.root) == (r.size // 4, "float", "sum", -1)
        assert r.oop_busbw == pytest.approx(r.oop_algbw * 30 / 16, abs=0.02)
        assert r.ip_busbw == pytest.approx(r.ip_algbw * 30 / 16, abs=0.02)
        assert r.oop_wrong == 0 and r.ip_wrong == 0 and r.oop_time_us > 0
    big = run.rows[-1]
    assert big.size == 8589934592 and 46 < big.oop_algbw < 48 and 87 < big.oop_busbw < 90
    assert run.peak is big and run.wrong == 0
    assert (run.avg_busbw, run.out_of_bounds) == (AVG16, 0)
    assert run.avg_line.startswith("# Avg bus bandwidth")


def test_old_layout_without_redop_root_and_na_wrong():
    rows, truth = _rows(8, 7 / 8, [1 << 20, 1 << 24, 1 << 28], 230.0, layout="old", wrong="N/A")
    text = ("# nThread 1 nGpus 8 minBytes 1048576 maxBytes 268435456 step: 16(factor) "
            "warmup iters: 5 iters: 20 validation: 0\n#\n# Using devices\n"
            "#   Rank  0 Pid  40211 on   dgx01 device  0 [0x07] Tesla V100-SXM2-32GB\n"
            + OLD_HEAD + rows + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 101.2\n")
    (run,) = parse_nccl_tests(text)
    assert run.test is None and run.params["validation"] == "0" and "agg iters" not in run.params
    (dev,) = run.devices
    assert (dev.rank, dev.pid, dev.host, dev.bus, dev.name) == (
        0, 40211, "dgx01", "0x07", "Tesla V100-SXM2-32GB")
    assert [(r.size, r.oop_algbw, r.oop_busbw) for r in run.rows] == truth
    assert {(r.redop, r.root, r.oop_wrong, r.ip_wrong) for r in run.rows} == {("sum", -1, None,
                                                                              None)}
    assert run.wrong == 0 and run.peak.size == 1 << 28 and run.avg_busbw == 101.2


def test_oldest_float_error_column_and_wrong_counts():
    text = (OLD_HEAD +
            "     1048576        262144   float     sum    120.5    8.70   15.23  2e-07"
            "    119.9    8.75   15.31  2e-07\n"
            "     2097152        524288   float     sum    228.1    9.19   16.09      3"
            "    227.6    9.21   16.12      1\n")
    (run,) = parse_nccl_tests(text)
    first, second = run.rows
    assert first.oop_wrong is None and first.oop_busbw == 15.23 and first.ip_time_us == 119.9
    assert (second.oop_wrong, second.ip_wrong) == (3, 1) and run.wrong == 4


def test_several_runs_and_a_failed_one():
    ag_rows, ag_truth = _rows(8, 7 / 8, [1 << 30, 1 << 31], 360.0)
    text = (
        "[1,0]<stdout>:# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 2147483648 step: "
        "2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        + "".join(f"[1,0]<stdout>:{ln}\n" for ln in (NEW_HEAD + ag_rows).splitlines())
        + "[1,0]<stdout>:# Out of bounds values : 0 OK\n"
        "[1,0]<stdout>:# Avg bus bandwidth    : 283.9\n"
        "# Collective test starting: all_gather_perf\n"
        "# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 2147483648 step: 2(factor) warmup "
        "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        + NEW_HEAD.replace("redop    root", "redop    root") + ag_rows +
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 301.5\n"
        "$ ./build/reduce_scatter_perf -b 1G -e 2G -g 8\n"
        "# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 2147483648 step: 2(factor) warmup "
        "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n"
        "gpu-c03: Test NCCL failure common.cu:1005 'unhandled system error (run with "
        "NCCL_DEBUG=INFO for details)'\n"
        " .. gpu-c03 pid 77120: Test failure common.cu:891\n")
    first, second, third = parse_nccl_tests(text)
    assert first.test is None and first.avg_busbw == 283.9
    assert [(r.size, r.oop_algbw, r.oop_busbw) for r in first.rows] == ag_truth
    assert (second.test, second.operation, second.avg_busbw) == ("all_gather_perf", "allgather",
                                                                 301.5)
    assert len(second.rows) == 2 and second.out_of_bounds == 0
    assert (third.test, third.operation, third.rows) == ("reduce_scatter_perf", "reducescatter",
                                                         [])
    assert third.params["nGpus"] == "8" and len(third.errors) == 2
    assert "unhandled system error" in third.errors[0]


def test_out_of_bounds_and_peak_across_in_place():
    text = (NEW_HEAD +
            "   268435456      67108864     float     sum      -1   1510.2  177.75  333.27     12"
            "   1498.8  179.10  335.81      0\n"
            "   536870912     134217728     float     sum      -1   2975.1  180.45  338.34      0"
            "   2990.0  179.56  336.67      0\n"
            "# Out of bounds values : 12 FAILED\n# Avg bus bandwidth    : 335.9\n")
    (run,) = parse_nccl_tests(text)
    assert run.out_of_bounds == 12 and run.wrong == 12
    assert run.peak.size == 536870912  # 338.34 out-of-place beats 335.81 in-place


def test_other_operations_and_layout_of_alltoall():
    text = ("# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: "
            "20 agg iters: 1 validation: 1 graph: 0\n" + NEW_HEAD +
            "           8             2     float    none      -1    30.51    0.00    0.00      0"
            "    30.02    0.00    0.00    N/A\n")
    (run,) = parse_nccl_tests(text)
    (row,) = run.rows
    assert (row.redop, row.root, row.oop_wrong, row.ip_wrong) == ("none", -1, 0, None)
    assert [operation_of(t) for t in ("alltoall_perf", "broadcast_perf", "reduce_perf",
                                      "sendrecv_perf", "hypercube_perf", "gather_perf",
                                      "scatter_perf", "all_gather_perf_mpi", None)] == [
        "alltoall", "broadcast", "reduce", "sendrecv", "hypercube", "gather", "scatter",
        "allgather", None]


@pytest.mark.parametrize("text", ["", "hello\nworld\n", "\x00\x01\x02", "I ran all_reduce_perf"
                                  " yesterday and it was slow", "# just a comment\n#\n",
                                  "12 34 foo\n", "8 2 float sum -1 x y z 0 a b c 0\n"])
def test_no_run_in_junk(text):
    assert parse_nccl_tests(text) == []


def test_is_nccl_tests_line():
    yes = ["# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5",
           "# Using devices",
           "#  Rank  0 Group  0 Pid  54340 on       test device  0 [0x18] NVIDIA H100 80GB HBM3",
           NEW_HEAD.splitlines()[0], NEW_HEAD.splitlines()[1], OLD_HEAD.splitlines()[0],
           RANKS16.splitlines()[-1],
           "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 48.1",
           "# Collective test starting: all_reduce_perf",
           "# nccl-tests version 2.13.11 nccl-headers=22105 nccl-library=22105",
           "test: Test CUDA failure common.cu:941 'system not yet initialized'",
           "[1,0]<stdout>:# Avg bus bandwidth    : 283.9"]
    no = ["#", "# some comment", "[   12.3] NVRM: Xid (PCI:0000:18:00): 79",
          "host:1:2 [0] NCCL INFO Using network IB", "| 0  NVIDIA H100  On | 00000000:18:00.0 |",
          "           8             2     float"]
    assert all(is_nccl_tests_line(x) for x in yes), [x for x in yes if not is_nccl_tests_line(x)]
    assert not any(is_nccl_tests_line(x) for x in no)


# --- review fixes: version line placement, %g wrong counts, header-driven columns ----------

ROW = ("  {size:>10d}  {count:>12d}     float     sum      -1  {t:>7}  {a:>6}  {b:>6}  {w:>6}"
       "  {t2:>7}  {a2:>6}  {b2:>6}  {w2:>6}")


def test_version_line_opens_its_own_run_and_wrong_counts_in_g_format():
    """nccl-tests prints its version line first, before "Collective test starting"; and
    #wrong with %g, so a large count reads 1.67772e+07."""
    text = (
        "# nccl-tests version 2.13.11 nccl-headers=22105 nccl-library=22105\n"
        "# Collective test starting: all_reduce_perf\n"
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0\n" + NEW_HEAD +
        ROW.format(size=8, count=2, t="30.51", a="0.00", b="0.00", w="1.67772e+07", t2="30.02",
                   a2="0.00", b2="0.00", w2="3") + "\n"
        "# Out of bounds values : 16777219 FAILED\n# Avg bus bandwidth    : 0 \n"
        "# nccl-tests version 2.13.11 nccl-headers=22105 nccl-library=22203\n"
        "# Collective test starting: all_gather_perf\n"
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 "
        "agg iters: 1 validation: 1 graph: 0\n")
    first, second = parse_nccl_tests(text)
    assert (first.test, first.nccl_version) == ("all_reduce_perf", "2.21.5")
    assert (second.test, second.nccl_version, second.rows) == ("all_gather_perf", "2.22.3", [])
    (row,) = first.rows
    assert (row.oop_wrong, row.ip_wrong) == (16777200, 3) and first.wrong == 16777203
    assert first.out_of_bounds == 16777219 and first.avg_busbw == 0.0


def test_old_nccl_version_code():
    (run,) = parse_nccl_tests("# nccl-tests version 2.0.0 nccl-headers=2708 nccl-library=2708\n"
                              "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor)\n")
    assert run.nccl_version == "2.7.8"


BITWISE_HEAD = (
    "#                                                out-of-place + bitwise                   "
    "        in-place + bitwise          \n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong  "
    "#bitdiff     time   algbw   busbw  #wrong  #bitdiff timestamp\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)          "
    "              (us)  (GB/s)  (GB/s)                  %Y-%m-%d %H:%M:%S\n")
PER_ITER_HEAD = (
    "#       size         count      type   redop    root  cputime   algbw   busbw  #wrong    "
    "i_min    i_max    i_p99    i_cv%  cputime   algbw   busbw  #wrong    i_min    i_max    "
    "i_p99    i_cv% \n")


def test_tables_with_more_columns_are_read_by_their_header():
    """-R (bitwise), per-iteration figures, cputime and a timestamp column: the groups are
    found by the header's names, not by counting fields."""
    text = (
        "# nThread 1 nGpus 8 minBytes 1073741824 maxBytes 2147483648 step: 2(factor) warmup "
        "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0\n" + BITWISE_HEAD +
        "  1073741824     268435456     float     sum      -1   5934.3  180.94  316.64       0"
        "         0   5921.7  181.32  317.31       2         5  2025-06-01 10:00:00\n"
        "# Out of bounds values : 2 FAILED\n# Bitwise mismatches   : 5 FAILED\n"
        "# Avg bus bandwidth    : 316.98 \n"
        "# nThread 1 nGpus 8 minBytes 2147483648 maxBytes 2147483648 step: 2(factor) warmup "
        "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0\n" + PER_ITER_HEAD +
        "  2147483648     536870912     float     sum      -1  11790.1  182.14  318.74       0"
        "   11702.5  11891.0  11880.2     0.41  11781.4  182.28  318.99       0  11700.1  "
        "11890.3  11877.7     0.39\n")
    bitwise, per_iter = parse_nccl_tests(text)
    (row,) = bitwise.rows
    assert (row.oop_time_us, row.oop_algbw, row.oop_busbw, row.oop_wrong) == (
        5934.3, 180.94, 316.64, 0)
    assert (row.ip_time_us, row.ip_algbw, row.ip_busbw, row.ip_wrong) == (5921.7, 181.32, 317.31,
                                                                          2)
    assert (row.redop, row.root) == ("sum", -1) and bitwise.wrong == 2
    assert bitwise.params["unalign"] == "0" and bitwise.avg_busbw == 316.98
    (row,) = per_iter.rows
    assert (row.oop_time_us, row.oop_busbw, row.ip_time_us, row.ip_busbw, row.ip_wrong) == (
        11790.1, 318.74, 11781.4, 318.99, 0)
    assert per_iter.peak is row
    # line detection takes such rows without their header
    assert all(is_nccl_tests_line(ln) for ln in text.splitlines() if ln.startswith("  "))


def test_timestamp_column_without_header_and_edge_rows():
    stamped = ROW.format(size=1 << 20, count=1 << 18, t="120.5", a="8.70", b="15.23", w="0",
                         t2="119.9", a2="8.75", b2="15.31", w2="0") + "  2025-06-01 10:00:00"
    assert is_nccl_tests_line(stamped)
    (run,) = parse_nccl_tests(stamped + "\n")
    assert (run.rows[0].ip_busbw, run.rows[0].ip_wrong) == (15.31, 0)
    # a time that prints as 0.00 is still a row; a row with one group has only out-of-place
    zero = "  8  2  float  sum  -1  0.00  0.00  0.00  0  0.00  0.00  0.00  0\n"
    one = "  16  4  float  sum  -1  31.2  0.00  0.00  0\n"
    (run,) = parse_nccl_tests(zero + one)
    assert [r.size for r in run.rows] == [8, 16]
    assert (run.rows[1].ip_busbw, run.rows[1].ip_wrong) == (None, None)
    (solo,) = parse_nccl_tests(one)  # a busbw of 0.0 is a figure: the row is the peak
    assert solo.peak is solo.rows[0]
