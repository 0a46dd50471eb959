"""nccl-tests rules (failed runs, wrong data, low bus bandwidth) and the busbw
expectation model, on synthetic all_reduce_perf outputs and the real capture."""

from __future__ import annotations

import pytest
from golden import flat
from hostkit import nvml_doc, run, snap
from nccl_kit import NDR_ACTIVE, NDR_POLLING, ndr_ports, ndr_tree, ports_tree

from gputriage.engine.analysis import analyze_facts
from gputriage.facts.nccl_bandwidth import (
    busbw_figures,
    expect_busbw,
    expect_busbw_why,
    rail_ports,
)
from gputriage.facts.store import Facts
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.nccl_model import (
    NET_IB,
    NET_SOCKET,
    NcclChannel,
    NcclLog,
    NcclTestDevice,
    NcclTestRow,
    NcclTestRun,
)

H100 = "NVIDIA H100 80GB HBM3"
GIB = 1 << 30


def _sizes(max_bytes: int) -> list[int]:
    sizes, size = [], 8
    while size <= max_bytes:
        sizes.append(size)
        size *= 4
    return sizes


def _curve(peak: float, size: int) -> float:
    """A busbw that climbs with the message size and levels off at ``peak``."""
    return peak * size / (size + (4 << 20))


def allreduce_text(hosts: list[str], per_host: int, peak: float, max_bytes: int = 8 * GIB,
                   name: str = H100, wrong: dict[int, int] | None = None, oob: int = 0) -> str:
    """all_reduce_perf output of ``len(hosts) x per_host`` ranks whose busbw levels off at
    ``peak`` GB/s (numbers consistent: busbw = algbw * 2(n-1)/n, time = size / algbw)."""
    n = len(hosts) * per_host
    factor = 2 * (n - 1) / n
    out = ["# nccl-tests version 2.13.10 nccl-headers=22105 nccl-library=22105",
           "# Collective test starting: all_reduce_perf",
           f"# nThread 1 nGpus 1 minBytes 8 maxBytes {max_bytes} step: 4(factor) warmup iters: "
           "5 iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    rank = 0
    for host in hosts:
        for dev in range(per_host):
            out.append(f"#  Rank {rank:2d} Group  0 Pid {4000 + rank:6d} on {host:>10} device "
                       f"{dev:2d} [0x{0x18 + 0x10 * dev:02x}] {name}")
            rank += 1
    out += ["#", "#                                                              out-of-place"
            "                       in-place          ",
            "#       size         count      type   redop    root     time   algbw   busbw "
            "#wrong     time   algbw   busbw #wrong",
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)  "
            "          (us)  (GB/s)  (GB/s)       "]
    total = 0.0
    sizes = _sizes(max_bytes)
    for size in sizes:
        busbw = _curve(peak, size)
        algbw = busbw / factor
        t_us = size / (algbw * 1e3) if algbw else 0.0
        bad = (wrong or {}).get(size, 0)
        total += busbw
        cells = f"{t_us:8.2f} {algbw:7.2f} {busbw:7.2f} {bad:6d}"
        out.append(f"{size:12d} {size // 4:13d}     float     sum      -1 {cells} {cells}")
    out += [f"# Out of bounds values : {oob} {'OK' if oob == 0 else 'FAILED'}",
            f"# Avg bus bandwidth    : {total / len(sizes):.4f}", "#", ""]
    return "\n".join(out)


def make_run(hosts: list[str], per_host: int, peak: float, max_bytes: int = 8 * GIB,
             name: str = H100, test: str = "all_reduce_perf") -> NcclTestRun:
    """The same run as the model objects the parser builds (for the expectation model)."""
    devices = [NcclTestDevice(i, h, 4000 + i, d, None, name, f"#  Rank {i} on {h} {name}")
               for i, (h, d) in enumerate((h, d) for h in hosts for d in range(per_host))]
    rows = [NcclTestRow(s, s // 4, "float", "sum", -1, f"{s} row", oop_busbw=_curve(peak, s),
                        ip_busbw=_curve(peak, s)) for s in _sizes(max_bytes)]
    op = test.removesuffix("_perf").replace("_", "")
    return NcclTestRun(test, f"# Collective test starting: {test}", op, devices=devices,
                       rows=rows, avg_busbw=10.0, avg_line="# Avg bus bandwidth    : 10")


def facts_with(**sources) -> Facts:
    return Facts(snap(**sources))


TWO = ["node-a", "node-b"]

RULE_CASES = {
    "nccl.busbw-low": [
        ({"nccl_tests": allreduce_text(TWO, 8, 48.1), "infiniband": ndr_tree(2)},
         "nccl.busbw-low"),
        ({"nccl_tests": allreduce_text(["dgx-1"], 8, 180.0)}, "nccl.busbw-low"),
    ],
    "nccl.tests-wrong": [
        ({"nccl_tests": allreduce_text(["dgx-1"], 8, 360.0, wrong={8 * GIB: 3})},
         "nccl.tests-wrong"),
    ],
    "nccl.tests-failed": [
        ({"nccl_tests": "# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) "
                        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n#\n"
                        "# Using devices\n"
                        "gpu-7: Test NCCL failure common.cu:1005 'unhandled system error "
                        "(run with NCCL_DEBUG=INFO for details)'\n"
                        " .. gpu-7 pid 811: Test failure common.cu:891\n"},
         "nccl.tests-failed"),
    ],
}


# --- the expectation table and model ----------------------------------------------------------


def test_busbw_table_rows() -> None:
    figs = {(f.link, f.generation, f.algo): f for f in busbw_figures()}
    assert figs[("nvlink", 4, "ring")].value == 370 and figs[("nvlink", 4, "ring")].verified
    assert figs[("nvlink", 4, "nvls")].value == 480
    assert figs[("nvlink", 3, "ring")].verified is False
    assert figs[("pcie", 4, "ring")].value == 20
    assert figs[("net", None, "ring")].value == pytest.approx(0.92)


def test_two_nodes_with_two_ndr_rails() -> None:
    exp = expect_busbw(make_run(TWO, 8, 48.1), facts_with(infiniband=ndr_tree(2)))
    assert exp is not None
    assert exp.busbw_gbs == pytest.approx(92.0) and exp.scope == "inter-node"
    assert exp.label == "2x400G NDR per node"
    assert exp.basis == "2x400G NDR per node, ~46 GB/s per NIC"
    assert exp.rails == ("mlx5_0/1", "mlx5_1/1") and exp.from_host and exp.verified
    assert (exp.nodes, exp.gpus_per_node) == (2, 8)
    assert exp.line(48.1) == ("busbw 48.1 GB/s = 52 % of the ~92 GB/s expected for "
                              "2x400G NDR per node (inter-node)")


def test_eight_rails_are_capped_by_gpus_per_node() -> None:
    facts = facts_with(infiniband=ndr_tree(8))
    assert expect_busbw(make_run(TWO, 8, 300), facts).busbw_gbs == pytest.approx(368.0)
    one = expect_busbw(make_run(TWO, 1, 40), facts)
    assert one.busbw_gbs == pytest.approx(46.0)
    assert one.basis.endswith("(8 NICs, 1 GPU(s) per node)")


def test_down_rail_is_named_but_not_counted() -> None:
    exp = expect_busbw(make_run(TWO, 8, 300),
                       facts_with(infiniband=ndr_tree(8, mlx5_3=NDR_POLLING)))
    assert exp.busbw_gbs == pytest.approx(7 * 46.0)
    assert exp.down_rails == ("mlx5_3/1",) and "mlx5_3/1" not in exp.rails


def test_frontend_port_is_not_a_rail() -> None:
    ports = ndr_ports(4)
    ports["mlx5_4/1"] = {**NDR_ACTIVE, "rate": "100 Gb/sec (4X EDR)", "link_layer": "Ethernet"}
    picked = rail_ports(facts_with(infiniband=ports_tree(ports)).get("ib_ports"))
    assert [p.device for p in picked] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


def test_intra_node_h100_and_others() -> None:
    exp = expect_busbw(make_run(["dgx-1"], 8, 360), None)
    assert exp.busbw_gbs == 370 and exp.scope == "intra-node" and not exp.from_host
    assert exp.label == "8x H100 SXM5 NVLink4"
    assert "allreduce with NVLS up to ~480" in exp.basis
    a100 = expect_busbw(make_run(["a"], 8, 200, name="NVIDIA A100-SXM4-80GB"), None)
    assert a100.busbw_gbs == 230 and not a100.verified and "(unverified)" in a100.basis
    l40s = expect_busbw(make_run(["a"], 4, 15, name="NVIDIA L40S"), None)
    assert (l40s.busbw_gbs, l40s.verified) == (20, False)
    assert l40s.label == "4x L40S over PCIe Gen4"
    h800 = expect_busbw(make_run(["a"], 8, 150, name="NVIDIA H800"), None)
    assert h800.busbw_gbs == round(370 * 8 / 18) and "scaled to 8 links" in h800.basis


def test_no_expectation_without_the_inputs() -> None:
    four = make_run(["a"], 4, 300)
    assert expect_busbw_why(four, None) == (
        None, "no reference figure for 4 H100 SXM5 GPUs without NVSwitch")
    host8 = facts_with(nvml=nvml_doc([f"0000:{b:02x}:00.0" for b in range(0x18, 0x20)]))
    assert expect_busbw(four, host8).busbw_gbs == 370  # the host has 8: an NVSwitch board
    none, why = expect_busbw_why(make_run(TWO, 8, 40), facts_with())
    assert none is None and "no HCA port data" in why
    alltoall = make_run(["a"], 8, 300, test="alltoall_perf")
    assert expect_busbw_why(alltoall, None) == (None, "no reference figure for alltoall")
    log = NcclLog()
    log.process("node-a", 1).ib_devices.extend(["mlx5_0:1/IB", "mlx5_1:1/IB"])
    facts = facts_with()
    facts.prefill("nccl_log", log)
    assert "names 2 IB device(s) but not their rate" in expect_busbw_why(
        make_run(TWO, 8, 40), facts)[1]


def test_gpu_model_from_the_host_when_the_run_names_none() -> None:
    facts = facts_with(nvml=nvml_doc([f"0000:{b:02x}:00.0" for b in range(0x18, 0x20)], name=H100))
    exp = expect_busbw(make_run(["a"], 2, 300, name=""), facts)
    assert exp.busbw_gbs == 370 and exp.from_host
    assert "GPUs: this host's GPU inventory" in exp.inputs


# --- nccl.busbw-low on model objects ------------------------------------------------------------


def _analyze(runs: list[NcclTestRun], log: NcclLog | None = None, **sources):
    facts = facts_with(**sources)
    facts.prefill("nccl_tests", runs)
    if log is not None:
        facts.prefill("nccl_log", log)
    return [f for f in flat(analyze_facts(facts).findings)  # with folded consequences
            if f.id in ("nccl.busbw-low", "nccl.tests-wrong", "nccl.tests-failed")]


def test_half_the_expected_busbw_is_a_warning() -> None:
    [f] = _analyze([make_run(TWO, 8, 48.1)], infiniband=ndr_tree(2))
    assert f.id == "nccl.busbw-low" and f.severity is Severity.WARNING
    assert "52 % of the ~92 GB/s expected for 2x400G NDR per node (inter-node)" in f.title
    assert "average (10 GB/s)" in f.explanation and "not judged" in f.explanation


def test_under_half_on_eight_rails_is_critical_and_95_percent_is_fine() -> None:
    [f] = _analyze([make_run(TWO, 8, 150.0)], infiniband=ndr_tree(8))
    assert f.severity is Severity.CRITICAL and "~368 GB/s" in f.title
    assert not _analyze([make_run(TWO, 8, 352.0)], infiniband=ndr_tree(8))


def test_socket_transport_in_the_log_is_named() -> None:
    log = NcclLog()
    p = log.process("node-a", 1)
    p.channels.append(NcclChannel(0, 0, 8, "NET/Socket/0", NET_SOCKET, "Channel 00/0 : 0[0] -> "
                                  "8[0] [send] via NET/Socket/0", direction="send"))
    [f] = _analyze([make_run(TWO, 8, 20.0)], log, infiniband=ndr_tree(2))
    assert "NCCL used NET/Socket" in f.explanation and "nccl.socket-transport" in f.explanation
    assert f.blame is Blame.CONFIG


def test_socket_fallback_set_by_the_job_blames_the_job_like_the_transport_rule() -> None:
    log = NcclLog()
    p = log.process("node-a", 1)
    p.env["NCCL_IB_DISABLE"] = "1."
    p.channels.append(NcclChannel(0, 0, 8, "NET/Socket/0", NET_SOCKET, "Channel 00/0 : 0[0] -> "
                                  "8[0] [send] via NET/Socket/0", direction="send"))
    [f] = _analyze([make_run(TWO, 8, 20.0)], log, infiniband=ndr_tree(2))
    assert "(NCCL_IB_DISABLE=1 set by the environment)" in f.explanation
    assert (f.blame, f.action) == (Blame.JOB_CONFIG, Action.FIX_CONFIG)


def test_missing_gdr_and_down_rail_are_named() -> None:
    log = NcclLog()
    p = log.process("node-a", 1)
    p.channels += [NcclChannel(i, 0, 8, f"NET/IB/{i}", NET_IB, f"ch {i}", gdr=i == 0)
                   for i in range(4)]
    [f] = _analyze([make_run(TWO, 8, 100.0)], log, infiniband=ndr_tree(8, mlx5_7=NDR_POLLING))
    assert "3 of 4 NET/IB channels run without GPUDirect RDMA" in f.explanation
    assert "mlx5_7/1" in f.explanation and f.action is Action.DRAIN_AND_REPAIR


def test_short_runs_are_capped_and_tiny_ones_not_judged() -> None:
    [f] = _analyze([make_run(["dgx-1"], 8, 100.0, max_bytes=128 << 20)])
    assert f.severity is Severity.WARNING and "-e 8G" in f.explanation
    assert not _analyze([make_run(["dgx-1"], 8, 100.0, max_bytes=16 << 20)])


def test_intra_node_h100_table_at_95_percent_is_silent() -> None:
    assert not _analyze([make_run(["dgx-1"], 8, 352.0)])


# --- through the parser: real capture and synthetic outputs -----------------------------------

FM_INACTIVE = ("Id=nvidia-fabricmanager.service\nLoadState=loaded\nActiveState=inactive\n"
               "SubState=dead\nResult=success\nUnitFileState=enabled\n")
HGX8 = [f"0000:{b:02x}:00.0" for b in (0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb)]


def _ids(result, fid: str):
    return [f for f in result.findings if f.id == fid]


def test_system_not_yet_initialized_points_at_the_fabric_manager(corpus) -> None:
    text = corpus.sample("nccltests264-all-reduce-perf").text()
    [f] = _ids(run(nccl_tests=text), "nccl.tests-failed")
    assert f.severity is Severity.CRITICAL and f.blame is Blame.NODE
    assert f.action is Action.FIX_CONFIG
    assert f.title == ("all_reduce_perf failed: CUDA 'system not yet initialized' (fabric "
                       "manager not running?)")
    assert "test: Test CUDA failure common.cu:941 'system not yet initialized'" in \
        f.evidence[0].lines
    assert "Here nvidia-fabricmanager" not in f.explanation
    [g] = _ids(run(nccl_tests=text, systemctl_fabricmanager=FM_INACTIVE,
                   nvml=nvml_doc(HGX8)), "nccl.tests-failed")
    assert "Here nvidia-fabricmanager is inactive." in g.explanation
    assert "This host needs it: 8 H100 SXM5 GPUs" in g.explanation
    assert "systemctl_fabricmanager" in [e.source for e in g.evidence]
    failed = FM_INACTIVE.replace("ActiveState=inactive", "ActiveState=failed")
    [h] = _ids(run(nccl_tests=text, systemctl_fabricmanager=failed), "nccl.tests-failed")
    assert h.action is Action.FIX_SOFTWARE and "is failed" in h.explanation


def test_nccl_failure_names_the_error() -> None:
    [f] = _ids(run(**RULE_CASES["nccl.tests-failed"][0][0]), "nccl.tests-failed")
    assert f.title.startswith("nccl-tests failed: NCCL error 'unhandled system error")
    assert f.blame is Blame.CONFIG and "/dev/shm" in f.explanation


def test_wrong_values_are_corruption() -> None:
    text = allreduce_text(["dgx-1"], 8, 360.0, wrong={8 * GIB: 3, 2 * GIB: 1}, oob=2)
    [f] = _ids(run(nccl_tests=text), "nccl.tests-wrong")
    assert f.severity is Severity.CRITICAL and f.action is Action.DRAIN_AND_REPAIR
    assert f.blame is Blame.NODE
    assert f.title == ("all_reduce_perf: 8 wrong values in 2 of 16 sizes and 2 out-of-bounds "
                       "values: data corruption")  # 3 + 1 in each of out-of-place and in-place
    assert "# Out of bounds values : 2 FAILED" in f.evidence[0].lines
    assert not _ids(run(nccl_tests=allreduce_text(["dgx-1"], 8, 360.0)), "nccl.tests-wrong")


def test_two_node_text_at_half_and_at_95_percent() -> None:
    [f] = _ids(run(nccl_tests=allreduce_text(TWO, 8, 48.1), infiniband=ndr_tree(2)),
               "nccl.busbw-low")
    assert f.title == ("all_reduce_perf: busbw 48.1 GB/s = 52 % of the ~92 GB/s expected for "
                       "2x400G NDR per node (inter-node)")
    assert f.evidence[0].lines[1].split()[0] == str(8 * GIB)
    assert f.evidence[0].lines[-1].startswith("# Avg bus bandwidth")
    fine = run(nccl_tests=allreduce_text(TWO, 8, 352.0), infiniband=ndr_tree(8))
    assert not _ids(fine, "nccl.busbw-low")
    assert not [s for s in fine.skipped if s.rule.startswith("nccl.busbw")]


def test_intra_node_h100_text() -> None:
    [f] = _ids(run(nccl_tests=allreduce_text(["dgx-1"], 8, 180.0)), "nccl.busbw-low")
    assert f.severity is Severity.CRITICAL
    assert "= 49 % of the ~370 GB/s expected for 8x H100 SXM5 NVLink4 (intra-node)" in f.title
    assert not _ids(run(nccl_tests=allreduce_text(["dgx-1"], 8, 360.0)), "nccl.busbw-low")


def test_no_expectation_no_finding() -> None:
    """Two nodes but no HCA data of the host: the figures stay for the view, no finding."""
    result = run(nccl_tests=allreduce_text(TWO, 8, 10.0))
    assert not _ids(result, "nccl.busbw-low")
    exps = Facts(snap(nccl_tests=allreduce_text(TWO, 8, 10.0))).get("nccl_expectations")
    assert len(exps) == 1 and exps[0][1] is None


IBSTAT_HDR = "".join(
    f"CA 'mlx5_{i}'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n"
    f"\t\tPhysical state: LinkUp\n\t\tRate: 200\n\t\tLink layer: InfiniBand\n" for i in range(4))


def test_ibstat_rate_alone_is_named_by_its_generation() -> None:
    exp = expect_busbw(make_run(TWO, 8, 100.0), facts_with(ibstat=IBSTAT_HDR))
    assert exp.label == "4x200G HDR per node" and exp.busbw_gbs == pytest.approx(92.0)
    roce = IBSTAT_HDR.replace("InfiniBand", "Ethernet")
    assert expect_busbw(make_run(TWO, 8, 100.0), facts_with(ibstat=roce)).label == \
        "4x200G RoCE per node"
