"""``gputriage nccl``, NCCL inputs to ``analyze``, and the nccl-socket-fallback scenario."""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gputriage.cli import EXIT_INPUT, EXIT_USAGE, Environment, main
from gputriage.engine.analysis import analyze
from gputriage.nccl.inputs import read_inputs
from gputriage.scenarios import build_scenario, get_scenario
from gputriage.snapshot.bundle import Snapshot

SCENARIO = "nccl-socket-fallback"
EXIT_STATUSES = {0, 1, 2, 3}
APP = ("2024-05-14 09:31:{s:02d},{ms:03d} INFO trainer.py:212 step {i} loss 2.{i:04d} lr 3.0e-04 "
       "tokens/s 181234 grad_norm 0.93\n")
NCCL = ("dgx-b{h:02d}:{pid}:{tid} [{d}] NCCL INFO Channel {c:02d}/0 : {r}[{d}] -> {n}[{nd}] "
        "via P2P/CUMEM/read\n")
TABLE = """\
# nThread 1 nGpus 1 minBytes 1073741824 maxBytes 2147483648 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  30001 on    dgx-b01 device  0 [0x18] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  30002 on    dgx-b01 device  1 [0x2a] NVIDIA H100 80GB HBM3
#
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
  1073741824     268435456     float     sum      -1   3048.1  352.27  352.27      0   3051.9  351.83  351.83      0
  2147483648     536870912     float     sum      -1   6071.4  353.70  353.70      0   6069.8  353.80  353.80      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 352.9
#
"""  # noqa: E501


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), Environment(stdout=out, stderr=err))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The scenario snapshot, and its two job outputs as separate files."""
    root = tmp_path_factory.mktemp("nccl")
    path = build_scenario(SCENARIO, root / "snap")
    payloads = get_scenario(SCENARIO).build()
    log, tests = root / "job.log", root / "tests.out"
    log.write_bytes(payloads["nccl_log"])
    tests.write_bytes(payloads["nccl_tests"])
    healthy = build_scenario("healthy-8xh100", root / "healthy")
    return {"snap": str(path), "log": str(log), "tests": str(tests), "healthy": str(healthy),
            "payloads": {k: v.decode() for k, v in payloads.items()}}


def no_crash(err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err


# --- the scenario ----------------------------------------------------------------------


def test_scenario_is_listed_and_its_numbers_hold_together(built) -> None:
    code, out, _ = cli("scenario", "list")
    assert code == 0 and re.search(r"^nccl-socket-fallback\s+Two-node", out, re.M)
    p = built["payloads"]
    assert "NCCL_IB_DISABLE set by environment to 1." in p["nccl_log"]
    assert p["nccl_log"].count("NCCL INFO Using network Socket") == 16
    assert ("NET/Socket : Using [0]ib0:192.168.100.17<0> [1]ib1:192.168.101.17<0>"
            in p["nccl_log"])
    assert "[send] via NET/Socket/7" in p["nccl_log"]
    assert "[send] via NET/Socket/0" in p["nccl_log"]
    assert "via P2P/CUMEM/read" in p["nccl_log"] and "NET/IB" not in p["nccl_log"]
    rows = [ln.split() for ln in p["nccl_tests"].splitlines() if ln[:1] == " "]
    assert [int(r[0]) for r in rows] == [8 << k for k in range(31)]  # 8 B .. 8 GiB
    for r in rows:  # busbw = algbw * 2(n-1)/n with n = 16, both placements
        for algbw, busbw in ((float(r[6]), float(r[7])), (float(r[10]), float(r[11]))):
            assert busbw == pytest.approx(algbw * 30 / 16, abs=0.015)  # 2 decimals
    assert {ln.split()[8] for ln in p["nccl_tests"].splitlines() if "Rank" in ln} == {
        "gpu-node-017", "gpu-node-018"}


def test_analyze_scenario_gives_socket_transport_and_low_busbw(built) -> None:
    result = analyze(Snapshot.load(built["snap"]))
    by_id = {f.id: f for f in result.findings}
    socket = by_id["nccl.socket-transport"]
    assert socket.severity.value == "critical" and "NCCL_IB_DISABLE" in socket.title
    assert socket.blame.side == "job"  # the job's NCCL_IB_DISABLE=1, not the node
    # the low bandwidth is the sockets' consequence, folded into that finding
    low = by_id.get("nccl.busbw-low") or next(
        c for c in socket.consequences if c.id == "nccl.busbw-low")
    assert re.search(r"busbw 18\d GB/s = 50 % of the ~368 GB/s expected", low.title)
    assert not result.unreadable


def test_nccl_command_on_the_snapshot_shows_summary_expectation_findings(built) -> None:
    code, out, err = cli("nccl", built["snap"])
    # the critical is the job's own setting (NCCL_IB_DISABLE=1): it does not fail the
    # node's check (exit 1, not 2) unless --job-faults-fail asks for it
    assert code == 1, err
    assert "gpu-node-017" in out and "NCCL job: 16 processes on 2 hosts" in out
    assert re.search(r"\n  env +NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=ib\n", out)
    assert "channels net-socket 32, p2p 112" in out
    assert re.search(r"\n  GDR +0 of 32 network channel\(s\) with GDRDMA", out)
    assert "all_reduce_perf  16 ranks on 2 hosts (gpu-node-017, gpu-node-018)" in out
    assert re.search(r"= 50 % of the ~368 GB/s expected for 8x400G NDR per node", out)
    assert out.index("all_reduce_perf  16 ranks") < out.index("nccl.socket-transport")


def test_job_files_alone_and_json_document(built) -> None:
    code, out, err = cli("nccl", "--json", built["log"], built["tests"])
    assert code in EXIT_STATUSES and code >= 1, err
    doc = json.loads(out)
    assert doc["schema"] == "gputriage/result/v1" and list(doc)[-1] == "nccl"
    assert doc["exit_status"] == code
    hosts = doc["nccl"]["hosts"]
    assert [(h["host"], h["processes"], h["ranks"]) for h in hosts] == [
        ("gpu-node-017", 8, list(range(8))), ("gpu-node-018", 8, list(range(8, 16)))]
    assert hosts[0]["env"] == {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "ib"}
    assert hosts[0]["networks"] == ["Socket"] and hosts[0]["nccl_versions"] == [
        "2.21.5+cuda12.4"]
    assert hosts[1]["channels"] == {"net-socket": 32, "p2p": 112}
    assert len(doc["nccl"]["processes"]) == 16
    run, = doc["nccl"]["tests"]
    assert (run["test"], run["ranks"], len(run["rows"])) == ("all_reduce_perf", 16, 31)
    assert run["peak"]["size"] >= 1 << 30 and 180 < run["peak"]["busbw_gbs"] < 186
    assert run["expectation"] is None and "HCA" in run["no_expectation"]  # no host facts
    assert {i["origin"]: i["sources"] for i in doc["inputs"]} == {
        built["log"]: ["nccl_log"], built["tests"]: ["nccl_tests"]}
    assert "nccl.socket-transport" in {f["id"] for f in doc["findings"]}
    # streamed, the log is not kept as text: the evidence is still the raw lines
    socket, = (f for f in doc["findings"] if f["id"] == "nccl.socket-transport")
    lines = [ln for e in socket["evidence"] for ln in e["lines"]]
    assert any(ln.endswith("NCCL INFO NCCL_IB_DISABLE set by environment to 1.")
               and ln.startswith("gpu-node-01") for ln in lines), lines


def test_host_snapshot_plus_job_log_combine(built) -> None:
    code, out, _ = cli("nccl", "--json", built["healthy"], built["log"], built["tests"])
    assert code == 1  # a healthy host and the job's own fault: not the node's (exit 2)
    doc = json.loads(out)
    exp = doc["nccl"]["tests"][0]["expectation"]
    assert (exp["busbw_gbs"], exp["percent"], exp["scope"]) == (368.0, 50, "inter-node")
    assert exp["line"].startswith("busbw 18") and "8x400G NDR per node" in exp["line"]
    assert doc["host"]["hostname"] == "gpu-node-017"
    # analyze takes the same inputs and reaches the same diagnosis
    code2, out2, _ = cli("analyze", "--json", built["healthy"], built["log"], built["tests"])
    found = json.loads(out2)["findings"]
    ids = {f["id"]: f["severity"] for f in found}
    ids.update({c["id"]: c["severity"] for f in found for c in f.get("consequences", ())})
    assert code2 == 1 and ids["nccl.socket-transport"] == "critical"  # the job's side
    assert ids["nccl.busbw-low"] in ("warning", "critical")


# --- the corpus ------------------------------------------------------------------------


def test_every_nccl_sample_goes_through_analyze_and_nccl(corpus) -> None:
    for s in corpus.category("5"):
        for argv in (("analyze", str(s.path)), ("nccl", str(s.path))):
            code, out, err = cli(*argv)
            assert code in EXIT_STATUSES, (s.name, argv[0], code, err)
            no_crash(err)
        code, out, err = cli("nccl", "--json", str(s.path))
        nccl = json.loads(out)["nccl"]
        assert nccl["processes"] or nccl["tests"] or nccl["log"]["framework_errors"], s.name


def test_nccl_areas_hold_every_rule_a_job_alone_can_feed(corpus, monkeypatch, tmp_path):
    """With no host output among its inputs, ``nccl`` runs only the NCCL_AREAS rules:
    every other rule must then be skipped (else ``nccl`` would miss its findings), on
    the corpus's job logs and nccl-tests outputs and on generated ones; and no rule
    outside them runs without any input, or reads an NCCL fact."""
    from nccl_kit import job_log

    import gputriage.rules as rules
    from gputriage.commands.nccl import judge
    from gputriage.errors import InputError

    areas = {f"gputriage.rules.{a}" for a in rules.NCCL_AREAS}
    every = rules.all_rules()
    assert not [r.id for r in every if r.func.__module__ not in areas
                and (not (r.requires or r.any_of)
                     or any(f.startswith("nccl") for f in (*r.reads, *r.any_of)))]
    monkeypatch.setattr(rules, "rules_of", lambda _areas: every)  # judged by every rule
    generated = [job_log(), job_log(("a", "b", "c"), 4, net="IB", gdr=False),
                 job_log(no_device=True, env=("NCCL_IB_DISABLE=1",)), TABLE,
                 "".join(APP.format(s=i % 60, ms=i, i=i) for i in range(50)) + TABLE]
    paths = [s.path for s in corpus.category("5")]
    for i, text in enumerate(generated):
        paths.append(tmp_path / f"job{i}.log")
        paths[-1].write_text(text)
    fed, judged = set(), 0
    for path in paths:
        try:
            result, _summary, host_given = judge([str(path)])
        except InputError:
            continue
        if host_given:
            continue
        judged += 1
        skipped = {s.rule for s in result.skipped}
        fed |= {r.func.__module__ for r in every if r.id not in skipped}
    assert judged > 20 and fed <= areas, fed - areas
    assert fed == areas  # each area has a rule a job's inputs feed


def test_corpus_nccl_summaries(corpus) -> None:
    code, out, _ = cli("nccl", "--json", str(corpus.sample("nccltests188").path))
    hosts = json.loads(out)["nccl"]["hosts"]
    assert {h["host"] for h in hosts} == {"user"}
    assert hosts[0]["env"]["NCCL_IB_DISABLE"] == "1"
    assert hosts[0]["socket_ifaces"] == ["ib0", "ibs85f0"]
    code, out, _ = cli("nccl", str(corpus.sample("nccltests264-all-reduce").path))
    assert code == 2 and "system not yet initialized" in out


# --- inputs: formats and bad input -----------------------------------------------------


def test_gzip_log_reads_like_the_plain_one(built, tmp_path) -> None:
    gz = tmp_path / "job.log.gz"
    gz.write_bytes(gzip.compress(built["payloads"]["nccl_log"].encode()))
    plain, packed = read_inputs([built["log"]]), read_inputs([str(gz)])
    assert packed.log.nccl_lines == plain.log.nccl_lines == 585
    assert [p.label for p in packed.log.processes] == [p.label for p in plain.log.processes]
    assert packed.problems == []


def test_truncated_gzip_gives_partial_result_and_a_problem(built, tmp_path) -> None:
    data = gzip.compress(built["payloads"]["nccl_log"].encode() * 40)
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(data[: len(data) // 2])
    code, out, err = cli("nccl", "--json", str(cut))
    assert code in EXIT_STATUSES, err
    doc = json.loads(out)
    assert doc["nccl"]["log"]["nccl_lines"] > 585
    assert any("truncated gzip" in u for u in doc["unreadable"])
    stub = tmp_path / "stub.gz"
    stub.write_bytes(data[:6])
    code, _, err = cli("nccl", str(stub))
    assert code == EXIT_INPUT and "truncated gzip" in err and err.count("\n") == 1


def test_binary_other_programs_log_empty_and_missing_are_input_errors(tmp_path) -> None:
    noise = tmp_path / "core.bin"
    noise.write_bytes(bytes(range(1, 32)) * 4000)
    syslog = tmp_path / "messages"
    syslog.write_text(
        "May 31 05:33:40 web01 sshd[1234]: Accepted publickey for alice from 10.0.0.5\n"
        "May 31 05:33:41 web01 CRON[2211]: (root) CMD (run-parts /etc/cron.hourly)\n" * 50)
    empty = tmp_path / "empty.log"
    empty.write_text("")
    for path, words in ((noise, "binary data"), (syslog, "no NCCL record"),
                        (empty, "empty file"), (tmp_path / "absent.log", "no such file")):
        code, out, err = cli("nccl", str(path))
        assert code == EXIT_INPUT and words in err, (path, err)
        assert err.count("\n") == 1 and out == ""
    code, _, err = cli("nccl")
    assert code == EXIT_USAGE and "Missing argument" in err


def test_a_bad_input_beside_a_good_one_is_reported_not_fatal(built, tmp_path) -> None:
    noise = tmp_path / "core.bin"
    noise.write_bytes(bytes(range(1, 32)) * 4000)
    code, out, _ = cli("nccl", "--json", built["log"], str(noise))
    assert code in EXIT_STATUSES
    assert any("binary data" in u for u in json.loads(out)["unreadable"])


def test_stdin_job_log_and_stdin_paste_with_host_output(built, monkeypatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        built["payloads"]["nccl_log"].encode())))
    code, out, _ = cli("nccl", "-")
    assert code in EXIT_STATUSES and "NCCL job · 16 processes on 2 hosts" in out
    table = ("+-----------------------------------------------------------------------------+\n"
             "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"
             "+-----------------------------------------------------------------------------+\n")
    paste = table + built["payloads"]["nccl_log"]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(paste.encode())))
    code, out, _ = cli("nccl", "--json", "-")
    doc = json.loads(out)
    assert doc["host"]["driver"]["cuda"] == "12.4"  # the nvidia-smi table is a host fact
    assert doc["nccl"]["log"]["nccl_lines"] == 585  # read once, not twice


@pytest.mark.slow  # a 50 MiB training log
def test_big_mixed_log_streams_with_bounded_memory(tmp_path) -> None:
    path = tmp_path / "train.log"
    nccl_lines = 0
    with path.open("w") as fh:
        fh.write("dgx-b01:30001:30001 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
        written, i = 0, 0
        while written < 50 << 20:
            chunk = []
            for _ in range(5000):
                i += 1
                if i % 40 == 0:
                    d = i // 40 % 8
                    chunk.append(NCCL.format(h=1, pid=30001 + d, tid=30100 + d, d=d, c=i % 32,
                                             r=d, n=(d + 1) % 8, nd=(d + 1) % 8))
                    nccl_lines += 1
                else:
                    chunk.append(APP.format(s=i % 60, ms=i % 1000, i=i))
            text = "".join(chunk)
            fh.write(text)
            written += len(text)
        fh.write(TABLE)
    tracemalloc.start()
    try:
        found = read_inputs([str(path)])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 << 20, peak
    assert found.log.nccl_lines == nccl_lines + 1
    assert [p.label for p in found.log.processes] == [f"dgx-b01:{30001 + d}" for d in range(8)]
    assert sum(len(p.channels) for p in found.log.processes) == nccl_lines
    run, = found.runs
    assert [r.size for r in run.rows] == [1 << 30, 2 << 30] and run.avg_busbw == 352.9
    assert found.snapshot is None and found.problems == []


PIECES = [NCCL.format(h=2, pid=4100, tid=4101, d=0, c=1, r=0, n=1, nd=1), TABLE,
          "dgx-b02:4100:4101 [0] NCCL WARN NET/IB : Got completion from peer 10.1.1.2<4711> "
          "with status=12 opcode=0 len=0 vendor err 129 (Recv)\n", "\x00\xff\x1f\x8b", "#\n"]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=80),
                          st.binary(max_size=80).map(lambda b: b.decode("latin-1"))),
                max_size=12), st.booleans())
def test_any_input_gives_a_status_or_one_input_error(tmp_path, parts, packed) -> None:
    data = "".join(parts).encode("utf-8", errors="surrogateescape")
    path = tmp_path / "any.log"
    path.write_bytes(gzip.compress(data)[: max(1, len(data) // 2)] if packed else data)
    code, out, err = cli("nccl", str(path))
    no_crash(err)
    assert code in EXIT_STATUSES | {EXIT_INPUT}, err
    if code == EXIT_INPUT:
        assert err.count("\n") == 1 and out == ""


def test_help_lists_the_command(capsys) -> None:
    assert cli("--help")[0] == 0
    assert "gputriage nccl LOG..." in capsys.readouterr().out
    assert cli("nccl", "--help")[0] == 0
    out = capsys.readouterr().out
    assert "nccl-tests" in out and "--json" in out


# --- review fixes: inputs read once, pipes, read errors, sources of mixed inputs ----------

SMI = ("+-----------------------------------------------------------------------------+\n"
       "| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n"
       "+-----------------------------------------------------------------------------+\n")


def test_fifo_with_host_output_and_job_log_is_read_once(built, tmp_path) -> None:
    """A FIFO (or ``<(zcat job.log)``) cannot be opened twice: its host outputs come from
    what was kept while the NCCL lines streamed."""
    import os
    import threading

    fifo = tmp_path / "paste.fifo"
    os.mkfifo(fifo)
    data = (SMI + built["payloads"]["nccl_log"]).encode()

    def feed() -> None:
        with open(fifo, "wb") as fh:
            fh.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    code, out, err = cli("nccl", "--json", str(fifo))
    writer.join()
    assert code in EXIT_STATUSES, err
    doc = json.loads(out)
    assert doc["host"]["driver"]["cuda"] == "12.4" and doc["unreadable"] == []
    assert doc["nccl"]["log"]["nccl_lines"] == 585
    assert doc["inputs"] == [{"origin": str(fifo), "sources": ["nccl_log", "nvidia_smi"]}]


def test_a_mixed_file_lists_its_job_and_host_sources(built, tmp_path) -> None:
    mixed = tmp_path / "paste.txt"
    mixed.write_text(SMI + built["payloads"]["nccl_log"])
    code, out, _ = cli("nccl", "--json", str(mixed))
    assert json.loads(out)["inputs"] == [{"origin": str(mixed),
                                          "sources": ["nccl_log", "nvidia_smi"]}]


def test_an_input_named_twice_is_read_once(built, monkeypatch) -> None:
    code, out, _ = cli("nccl", "--json", built["log"], built["log"])
    assert json.loads(out)["nccl"]["log"]["nccl_lines"] == 585
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        built["payloads"]["nccl_log"].encode())))
    code, out, _ = cli("nccl", "--json", "-", "-")
    doc = json.loads(out)
    assert doc["nccl"]["log"]["nccl_lines"] == 585 and doc["unreadable"] == []


def test_a_snapshot_tarball_on_stdin_is_one_clear_error(built, tmp_path, monkeypatch) -> None:
    tarball = build_scenario(SCENARIO, tmp_path / "snap.tar.gz")
    with open(tarball, "rb") as fh:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(fh.read())))
    code, out, err = cli("nccl", "-")
    assert code == EXIT_INPUT and out == "" and err.count("\n") == 1
    assert "tarball on a pipe" in err


def test_a_read_error_is_one_line_or_a_problem(built, tmp_path, monkeypatch) -> None:
    import errno

    from gputriage.nccl import inputs as nccl_input
    good = built["payloads"]["nccl_log"].encode()

    class Failing(io.BytesIO):
        def read(self, size: int = -1) -> bytes:
            if self.tell() >= len(self.getvalue()) // 2:
                raise OSError(errno.EIO, "Input/output error")
            return super().read(min(size, len(self.getvalue()) // 2 - self.tell()))

    from gputriage.io.inputs import FILE, Input

    def opener(data: bytes):
        return lambda p, problems=None, budgets=None: Input(p, p, FILE, Failing(data), [])

    path = tmp_path / "disk.log"
    path.write_bytes(good)
    monkeypatch.setattr(nccl_input, "open_input", opener(good))
    code, out, err = cli("nccl", "--json", str(path))
    doc = json.loads(out)
    assert code in EXIT_STATUSES and 0 < doc["nccl"]["log"]["nccl_lines"] < 585
    assert doc["unreadable"] == [f"{path}: cannot read (Input/output error)"]
    monkeypatch.setattr(nccl_input, "open_input", opener(b""))
    code, out, err = cli("nccl", str(path))
    assert code == EXIT_INPUT and err.count("\n") == 1
    assert err.endswith(f"{path}: cannot read (Input/output error)\n")


def test_a_log_of_over_long_nccl_lines_says_so(tmp_path) -> None:
    path = tmp_path / "one-line.log"
    path.write_text("h1:1:1 [0] NCCL INFO Channel 00/0 : " + "0 " * 40_000 + "\n")
    code, out, err = cli("nccl", str(path))
    assert code == EXIT_INPUT and err.count("\n") == 1
    assert "(1 NCCL line(s) over 64 KiB skipped)" in err


def test_communicators_counted_per_process(tmp_path) -> None:
    """Two processes may print the same comm pointer and rank (rank 0 of two tensor-parallel
    groups, each in its own address space)."""
    text = "".join(
        f"gpu-a:{pid}:{pid} [{d}] NCCL INFO ncclCommInitRank comm 0x55d0c1a2b3c0 rank 0 "
        f"nranks 2 cudaDev {d} nvmlDev {d} busId {d}8000 commId 0x7a1f{d} - Init COMPLETE\n"
        for pid, d in ((4100, 0), (4101, 2)))
    path = tmp_path / "job.log"
    path.write_text(text)
    code, out, _ = cli("nccl", "--json", str(path))
    (host,) = json.loads(out)["nccl"]["hosts"]
    assert (host["comms"], host["init_complete"]) == (2, 2)
    code, out, _ = cli("nccl", str(path))
    assert "communicators 2 of 2 init complete" in out


@pytest.mark.slow  # an 8 MiB log
def test_many_lines_that_only_look_like_nccl_tests_do_not_fill_its_budget(tmp_path) -> None:
    """A training log full of "failure" and "# ..." lines: only real nccl-tests lines count
    against the budget, so the table at the end is still read."""
    path = tmp_path / "train.log"
    noise = ("2024-05-14 09:31:07,123 WARNING retry after transient failure of shard {i} "
             "(attempt 1/3)\n# checkpoint {i} saved\n")
    with path.open("w") as fh:
        for i in range(80_000):
            fh.write(noise.format(i=i))
        fh.write(TABLE)
    assert path.stat().st_size > 8 << 20
    found = read_inputs([str(path)])
    assert found.problems == []
    run, = found.runs
    assert [r.size for r in run.rows] == [1 << 30, 2 << 30] and run.avg_busbw == 352.9


def test_a_truncated_paste_with_host_output_reports_the_cut_once(built, tmp_path) -> None:
    data = gzip.compress((SMI + built["payloads"]["nccl_log"] * 40).encode())
    cut = tmp_path / "paste.txt.gz"
    cut.write_bytes(data[: len(data) // 2])
    code, out, err = cli("nccl", "--json", str(cut))
    doc = json.loads(out)
    assert code in EXIT_STATUSES, err
    assert doc["host"]["driver"]["cuda"] == "12.4" and doc["nccl"]["log"]["nccl_lines"] > 585
    (problem,) = doc["unreadable"]
    assert problem.startswith(f"{cut}: truncated gzip data")


@pytest.mark.parametrize("prefix", ["[1,0]<stdout>:", "0: ", "  | 2025-03-02T10:15:01.204Z | "])
def test_shipped_nccl_tests_output_is_read_by_nccl_and_analyze(built, tmp_path, prefix) -> None:
    """mpirun --tag-output, srun --label and CloudWatch put a prefix before every line of
    the table: both commands still find the run."""
    path = tmp_path / "tests.out"
    path.write_text("".join(prefix + ln for ln in
                            built["payloads"]["nccl_tests"].splitlines(keepends=True)))
    code, out, err = cli("nccl", "--json", str(path))
    assert code in EXIT_STATUSES, err
    run, = json.loads(out)["nccl"]["tests"]
    assert (run["test"], run["ranks"], len(run["rows"])) == ("all_reduce_perf", 16, 31)
    code, out, err = cli("analyze", "--json", built["healthy"], str(path))
    doc = json.loads(out)
    assert {"origin": str(path), "sources": ["nccl_tests"]} in doc["inputs"]
    low, = (f for f in doc["findings"] if f["id"] == "nccl.busbw-low")
    assert "= 50 % of the ~368 GB/s expected" in low["title"]


def test_a_large_kernel_log_given_to_nccl_is_scanned_whole_not_held(tmp_path, monkeypatch):
    """Host outputs in a large input are loaded as analyze loads them: a kernel log
    scanned whole in bounded memory, its host named (its tail was held before)."""
    from gputriage.ingest import streamed

    stamp = "2024-05-14T06:{m:02d}:{s:02d}+0000 gpu-b12 kernel: "
    lines = [stamp.format(m=i // 60 % 60, s=i % 60)
             + (f"NVRM: Xid (PCI:0000:18:00): 13, pid={1000 + i % 7}, name=python3, Graphics "
                "SM Warp Exception on (GPC 1, TPC 2, SM 0): Out Of Range Address"
                if i % 10 == 3 else f"usb 1-{i % 7}: new high-speed USB device number 3")
             for i in range(3000)]
    path = tmp_path / "kern.log"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", 64 << 10)
    found = read_inputs([str(path)])
    assert found.snapshot is not None
    assert isinstance(found.snapshot.get("kernel_log"), streamed.ScannedLog)
    result = analyze(found.snapshot)
    assert result.host.hostname == "gpu-b12"
    assert "xid.13" in {f.id for f in result.findings}


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_stream_with_host_output_at_its_head_keeps_it_whatever_its_size(
        built, monkeypatch, size) -> None:
    """Host outputs in a stream read once (``kubectl logs ... | gputriage nccl -``, a job
    that prints nvidia-smi as it starts): a large one is handed, as it comes, to the
    large-text reader of analyze, so the table at its head is found and memory stays
    bounded (its last 256 MiB were held, and the head was lost past them)."""
    import gputriage.ingest as ingest
    from gputriage.ingest import streamed

    job = built["payloads"]["nccl_log"] * (1 if size == "small" else 40)
    data = (SMI + job).encode()
    monkeypatch.setattr(streamed, "STREAM_MIN_BYTES", 256 << 10)
    monkeypatch.setattr(ingest, "CAP_BYTES", 128 << 10)  # (256 MiB in use)
    assert (len(data) > 256 << 10) == (size == "large")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out, err = cli("nccl", "--json", "-")
    doc = json.loads(out)
    assert code in EXIT_STATUSES, err
    assert doc["host"]["driver"]["cuda"] == "12.4"
    assert doc["nccl"]["log"]["nccl_lines"] == 585 * (1 if size == "small" else 40)
    (given,) = [i for i in doc["inputs"] if i["origin"] == "<stdin>"]
    assert "nvidia_smi" in given["sources"] and "nccl_log" in given["sources"]
