"""The NCCL job summary (gputriage.nccl.summary), the quoting of raw log lines
(``nccl_log_text``), and NCCL rules called directly with their facts as keywords."""

from __future__ import annotations

from nccl_kit import job_log

from gputriage.facts.nccl import NcclJob, NcclLogText
from gputriage.facts.stack import GpuSighting
from gputriage.nccl.summary import host_groups, peak_busbw, summarize
from gputriage.parsers.nccl_log import parse_nccl_log
from gputriage.parsers.nccl_model import NcclTestRow, NcclTestRun
from gputriage.rules.nccl_transport import node_split, socket_transport

ENV = ("NCCL_IB_DISABLE=1", "NCCL_SOCKET_IFNAME=eth0")


def _job(text: str) -> NcclJob:
    from gputriage.facts.store import Facts
    from gputriage.snapshot.bundle import Snapshot

    facts = Facts(Snapshot({}, None, "test"))
    facts.prefill("nccl_log", parse_nccl_log(text))
    return facts.get("nccl_job")


def test_host_groups_count_ranks_networks_and_settings_per_host() -> None:
    log = parse_nccl_log(job_log(("gpu-b", "gpu-a"), 2, env=ENV))
    groups = host_groups(log)
    assert [g["host"] for g in groups] == ["gpu-b", "gpu-a"]  # ordered by first rank
    first = groups[0]
    assert (first["processes"], first["ranks"], first["cuda_devices"]) == (2, [0, 1], [0, 1])
    assert first["networks"] == ["Socket"] and first["socket_ifaces"] == ["eth0"]
    assert first["env"] == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    assert first["channels"] == {"net-socket": 4, "p2p": 2}
    assert (first["init_complete"], first["comms"]) == (0, 2)


def test_differing_settings_of_one_host_are_all_listed() -> None:
    text = job_log(("gpu-a",), 1, env=("NCCL_DEBUG=INFO",)) + job_log(
        ("gpu-a",), 1, env=("NCCL_DEBUG=WARN",)).replace(":4100:", ":4200:")
    (group,) = host_groups(parse_nccl_log(text))
    assert group["env"] == {"NCCL_DEBUG": ["INFO", "WARN"]}


def _row(size: int, oop: float, ip: float) -> NcclTestRow:
    return NcclTestRow(size=size, count=size // 4, dtype="float", redop="sum", root=-1,
                       oop_time_us=1.0, oop_algbw=oop, oop_busbw=oop, oop_wrong=0,
                       ip_time_us=1.0, ip_algbw=ip, ip_busbw=ip, ip_wrong=0, line="")


def test_peak_prefers_out_of_place_on_a_tie_and_runs_keep_why_none() -> None:
    rows = [_row(1 << 20, 10.0, 12.0), _row(1 << 30, 50.0, 50.0)]
    run = NcclTestRun("all_reduce_perf", "", rows=rows)
    peak = peak_busbw(run)
    assert peak is not None and (peak.busbw, peak.placement) == (50.0, "out-of-place")
    (judged,) = summarize(parse_nccl_log(""), [(run, None, "no figure")]).runs
    assert (judged.percent, judged.verdict_line, judged.why_none) == (None, None, "no figure")


def test_log_text_quotes_lines_or_the_lines_the_parser_kept() -> None:
    text = job_log(env=ENV)
    held = NcclLogText(text)
    assert held.find("NCCL_IB_DISABLE set by environment", 2) == [
        ln for ln in text.splitlines() if "NCCL_IB_DISABLE" in ln][:2]
    streamed = NcclLogText("", parse_nccl_log(text))  # the log was streamed in
    assert streamed.find("NCCL_IB_DISABLE set by environment", 1) == held.find(
        "NCCL_IB_DISABLE set by environment", 1)
    assert streamed.quote("never logged", ["rebuilt"]) == ["rebuilt"]


def test_rules_take_their_facts_as_keywords() -> None:
    text = job_log(env=ENV)
    job = _job(text)
    (f,) = socket_transport(nccl_job=job, nccl_log_text=NcclLogText(text))
    assert f.id == "nccl.socket-transport" and "NCCL_IB_DISABLE=1" in f.title
    split = _job(job_log(("gpu-a",), 4, nnodes=2, local_ranks=2))
    gpus = ("nvml", [GpuSighting(f"0000:{i:02x}:00.0", "nvml", i) for i in range(4)])
    (here,) = node_split(nccl_job=split, visible_gpus=gpus, host_name="gpu-a")
    assert "this host has 4 GPUs (nvml)" in here.explanation
    (elsewhere,) = node_split(nccl_job=split, visible_gpus=gpus, host_name="gpu-z")
    assert "this host has" not in elsewhere.explanation
