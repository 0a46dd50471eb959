"""Malformed numbers in input text never crash a parser (exit 70): the NCCL log's
``rank --1`` / ``nRanks --1`` / ``cudaDriverVersion ²`` (issue 10, item 5), odd digits in
nvlink and kernel-log inputs, and the one helper pair every parser uses for them."""

from __future__ import annotations

import io
import json
import re
import tokenize
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_replay import ReplayServer, load_objects

from gputriage.cli import EXIT_INPUT, EXIT_INTERNAL, EXIT_USAGE, Environment, main
from gputriage.parsers.nccl_log import parse_nccl_log
from gputriage.parsers.nvlink import parse_nvlink_errors, parse_nvlink_status
from gputriage.text.fields import strict_float, strict_int

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
        text = path.read_text(encoding="utf-8")
        if "\\d" not in text and "\\D" not in text:  # no string of it can hold one
            continue
        with path.open(encoding="utf-8") as fh:
            for tok in tokenize.generate_tokens(fh.readline):
                if tok.type == tokenize.STRING and re.search(r"(?<!\\)(?:\\\\)*\\[dD]",
                                                             tok.string):
                    found.append(f"{path.relative_to(SRC)}:{tok.start[0]}")
    assert not found, found


# --- issue 29: one hostile number in a field of each reader, through the CLI -------------
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DESCRIBE_POD = """Name:             vllm-1
Namespace:        llm
Priority:         {priority}
Node:             gpu-node-4/10.224.0.6
Status:           Running
Containers:
  vllm:
    Image:          vllm/vllm-openai:v0.6.3
    State:          Waiting
      Reason:       CrashLoopBackOff
    Last State:     Terminated
      Reason:       Error
      Exit Code:    {code}
    Ready:          False
    Restart Count:  {restarts}
    Limits:
      nvidia.com/gpu:  {gpus}
    Requests:
      nvidia.com/gpu:  {gpus}
Events:
  Type     Reason   Age                 From     Message
  ----     ------   ----                ----     -------
  Warning  BackOff  2m (x{count} over 9m)  kubelet  Back-off restarting failed container vllm
"""
CLI_INFO = """NVRM version:   465.19.01
CUDA version:   11.3

Device Index:   {index}
Device Minor:   {minor}
Model:          NVIDIA GeForce RTX 2080 Ti
Brand:          GeForce
GPU UUID:       GPU-5d49bdf4-b8d0-21ce-9260-a89c66748d92
Bus Location:   00000000:1a:00.0
Architecture:   7.5
"""
REMAP = """==============NVSMI LOG==============

Driver Version                            : 580.105.08
CUDA Version                              : 13.0

Attached GPUs                             : 1
GPU 00000000:41:00.0
    Product Name                          : NVIDIA A100 80GB PCIe
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : {uncorrectable}
        Pending                           : No
        Remapping Failure Occurred        : No
        Bank Remap Availability Histogram
            Max                           : 629 bank(s)
            High                          : 10 bank(s)
            {partial}                       : 1 bank(s)
            Low                           : 0 bank(s)
            None                          : 0 bank(s)
"""
HOSTILE = ["²", "١٢", "--1", "1e400", "nan", "9" * 5000]


def _analyzed(tmp_path: Path, name: str, text: str, *extra: str) -> tuple[int, dict, str]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    code, out, err = _run(["analyze", "--json", *extra, str(path)])
    assert code != EXIT_INTERNAL and "internal error" not in err, err
    return code, json.loads(out), err


@pytest.mark.parametrize("bad", HOSTILE)
def test_kubectl_get_table_with_a_bad_count(tmp_path: Path, bad: str) -> None:
    text = (FIXTURES / "k8s" / "A-get-tables.txt").read_text().replace("12 (2m ago) ",
                                                                      f"{bad} (2m ago) ")
    code, doc, _ = _analyzed(tmp_path, "get.txt", text)
    assert code in (0, 1, 2, 3) and doc["findings"]  # the rest of the tables is judged


@pytest.mark.parametrize("bad", HOSTILE)
def test_kubectl_describe_with_bad_numbers(tmp_path: Path, bad: str) -> None:
    text = DESCRIBE_POD.format(priority=bad, code=bad, restarts=bad, gpus=bad, count=bad)
    code, _, _ = _analyzed(tmp_path, "describe.txt", text)
    assert code in (0, 1, 2, 3)
    node = (FIXTURES / "k8s" / "A-describe-node-full.txt").read_text()
    code, _, _ = _analyzed(tmp_path, "node.txt", node.replace("nvidia.com/gpu:     4",
                                                              f"nvidia.com/gpu:     {bad}"))
    assert code in (0, 1, 2, 3)


def _nodes_with(quantity: Any) -> dict:
    doc = json.loads((FIXTURES / "k8s" / "C-nodes.json").read_text())
    status = doc["items"][0]["status"]  # gpu-h100-a: 8 GPUs
    status["capacity"]["nvidia.com/gpu"] = status["allocatable"]["nvidia.com/gpu"] = quantity
    return doc


@pytest.mark.parametrize("bad", [*HOSTILE, "1e18Ei", 1e308, 10 ** 30])
def test_kubernetes_objects_with_a_gpu_quantity_that_is_not_one(tmp_path: Path,
                                                                bad: Any) -> None:
    """``nvidia.com/gpu: "1e400"`` on one node: its GPU count is unknown and said, never a
    crash, and never "advertises no GPU" on its account."""
    code, doc, _ = _analyzed(tmp_path, "nodes.json", json.dumps(_nodes_with(bad)))
    assert code in (0, 1, 2, 3)
    assert any("gpu-h100-a" in p and "nvidia.com/gpu" in p and "not a number" in p
               for p in doc["unreadable"])
    assert not [f for f in doc["findings"] if f["id"] == "k8s.gpus-not-advertised"
                and "gpu-h100-a" in f["title"]]


def test_k8s_status_reads_a_cluster_whose_node_says_1e400(tmp_path: Path) -> None:
    objects = load_objects([_nodes_with("1e400")])
    with ReplayServer(objects) as server:
        code, out, err = _run(["k8s", "status", "--json", "--kubeconfig",
                               str(server.kubeconfig(tmp_path / "kubeconfig"))])
    assert code != EXIT_INTERNAL and "internal error" not in err, err
    doc = json.loads(out)
    assert any("1e400" in p for p in doc["unreadable"]) and doc["summary"]["gpu_nodes"] >= 1


@pytest.mark.parametrize("bad", ["1e400", "²", "--1", "nan"])
def test_k8s_lint_of_a_manifest_with_bad_numbers(tmp_path: Path, bad: str) -> None:
    manifest = tmp_path / "deploy.yaml"
    manifest.write_text(f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: llama-70b, namespace: llm}}
spec:
  replicas: "{bad}"
  template:
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.6.3
        args: ["--model", "meta-llama/Llama-3.1-70B-Instruct"]
        startupProbe: {{httpGet: {{path: /health, port: 8000}}, periodSeconds: "{bad}",
                       failureThreshold: {bad}}}
        resources:
          limits: {{nvidia.com/gpu: "{bad}"}}
""", encoding="utf-8")
    code, _, err = _run(["k8s", "lint", str(manifest)])
    assert code in (0, 1) and "internal error" not in err, err


@pytest.mark.parametrize("bad", HOSTILE)
def test_nvidia_container_cli_info_with_a_bad_device_number(tmp_path: Path, bad: str) -> None:
    code, doc, _ = _analyzed(tmp_path, "cli.txt", CLI_INFO.format(index=bad, minor=bad))
    assert code in (0, 1, 2, 3) and "nvidia_container_cli_info" in str(doc["inputs"])


@pytest.mark.parametrize("bad", HOSTILE)
def test_weights_host_report_with_a_bad_byte_count(tmp_path: Path, bad: str) -> None:
    text = (FIXTURES / "weights" / "host-nfs-models.txt").read_text().replace(
        "model_bytes: 141107412992", f"model_bytes: {bad}")
    code, doc, _ = _analyzed(tmp_path, "host.txt", text)
    assert code in (0, 1, 2, 3)
    assert any("model_bytes: not a number" in p for p in doc["unreadable"])


@pytest.mark.parametrize("key", ["\x1c", "\x85", "\u2028", "\x1f", "Partial²"])
@pytest.mark.parametrize("count", ["14", "²", "9" * 5000])
def test_remapped_rows_histogram_with_a_bad_bin(tmp_path: Path, key: str, count: str) -> None:
    text = REMAP.format(uncorrectable=count, partial=key.ljust(7))
    code, _, _ = _analyzed(tmp_path, "remap.txt", text)
    assert code in (0, 1, 2, 3)


@pytest.mark.parametrize("toml", [
    "a = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "a = " + "{b = " * 2000 + "1" + "}" * 2000 + "\n",
    "[gpu]\ncount = " + "9" * 5000 + "\n",
    "[gpu]\ncount = 99999999999999999999999\n",
    "[infiniband]\nrate_gbps = inf\n",
    "[infiniband]\nrate_gbps = nan\n",
    '[gpu]\ndriver = "550.²"\n',
])
def test_an_expectations_file_that_cannot_be_one(tmp_path: Path, toml: str) -> None:
    expect = tmp_path / "expect.toml"
    expect.write_text(toml, encoding="utf-8")
    paste = tmp_path / "smi.txt"
    paste.write_text(REMAP.format(uncorrectable="0", partial="Partial"), encoding="utf-8")
    code, _, err = _run(["analyze", "--expect", str(expect), str(paste)])
    assert code in (EXIT_USAGE, EXIT_INPUT), err
    assert "internal error" not in err and len(err.strip().splitlines()) == 1, err
    assert str(expect) in err


@pytest.mark.parametrize("argv", [
    ["k8s", "status", "--timeout", "nan"], ["k8s", "status", "--timeout", "inf"],
    ["k8s", "status", "--page-size", "١٢"], ["weights", "--params", "70B", "--overhead", "nan"],
    ["weights", "--params", "70B", "--batch", "1_000"], ["weights", "--params", "1e400"],
    ["weights", "--params", "70B", "--context", "9" * 5000], ["ack", "--clear", "١"],
    ["npd", "--max-age", "1e400"], ["logs", "--boot", "١", "x.log"],
    ["logs", "--since", "999999999w", "x.log"], ["logs", "--since", "٣h", "x.log"],
])
def test_option_numbers_are_read_by_the_converter(tmp_path: Path, argv: list[str]) -> None:
    """A number on the command line is ASCII digits and finite: nan passes every range
    check, ١٢ and 1_000 pass int(), 999999999w overflowed the log window."""
    (tmp_path / "x.log").write_text("[ 1.0] NVRM: Xid (PCI:0000:5d:00): 13, x\n")
    argv = [str(tmp_path / a) if a == "x.log" else a for a in argv]
    code, _, err = _run(argv)
    assert code == EXIT_USAGE and "internal error" not in err, err
    assert len(err.strip().splitlines()) == 1, err
