"""Content detection and loading of user inputs (pasted outputs, files, stdin)."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import sys
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from detect_both import lazy_and_eager_agree  # noqa: F401  (the fixture)
from hypothesis import given, settings
from hypothesis import strategies as st

import gputriage.ingest as ingest
from gputriage.errors import InputError
from gputriage.ingest import load_input, load_inputs, load_text
from gputriage.ingest.detect import EXPECTED, detect, formats, kernel_lines, source_for_command
from gputriage.snapshot.writer import new_manifest, source_record, write_snapshot
from gputriage.text.paste import PasteDoc

# every detection of these tests is also made with every detector run (tests/detect_both.py)
pytestmark = pytest.mark.usefixtures("lazy_and_eager_agree")


TABLE = """\
Tue Mar  4 09:12:44 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.127.05             Driver Version: 550.127.05     CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
|   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
+-----------------------------------------+------------------------+----------------------+
"""
XID = "[ 1341.220121] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', GPU has fallen off the bus."


def names(text: str) -> list[str]:
    return [n for n, _ in detect(text)]


# --- corpus -----------------------------------------------------------------------


def _check(corpus, cat: str, pred) -> None:
    samples = corpus.category(cat)
    assert samples, f"no samples in category {cat}"
    bad = [(s.name, names(s.text())) for s in samples if not pred(s, names(s.text()))]
    assert not bad, bad


def test_corpus_nvidia_smi_q(corpus) -> None:
    # the full query also comes as --query-gpu CSV (a monitoring collector's form)
    _check(corpus, "1", lambda s, n: {"nvidia_smi_q", "nvidia_smi_q_xml", "nvidia_smi_csv"}
           & set(n))


def test_corpus_nvidia_smi_table_and_errors(corpus) -> None:
    # category 2: the table (or its error, -L, MIG listings), its CSV queries, reset
    # outputs and nvidia-smi nvlink -s, by content
    _check(corpus, "2", lambda s, n: bool({"nvidia_smi", "nvidia_smi_csv", "gpu_reset",
                                           "nvidia_smi_nvlink_status"} & set(n)))
    table_like = [s for s in corpus.category("2") if ("|" in s.text() or "(UUID:" in s.text()
                  or "Unable to determine" in s.text())
                  and "nvidia_smi_nvlink_status" not in names(s.text())]  # nvlink -s: GPU lines
    assert table_like and all("nvidia_smi" in names(s.text()) for s in table_like)
    mixed = corpus.sample("ogkm862")
    assert names(mixed.text()) == ["nvidia_smi", "kernel_log"]


def test_corpus_topo(corpus) -> None:
    _check(corpus, "3", lambda s, n: "nvidia_smi_topo" in n)


def test_corpus_kernel_logs(corpus) -> None:
    _check(corpus, "4", lambda s, n: "kernel_log" in n)


def test_corpus_nccl_is_read_as_nccl_not_as_a_kernel_log(corpus) -> None:
    _check(corpus, "5", lambda s, n: "kernel_log" not in n
           and bool({"nccl_log", "nccl_tests"} & set(n)))


def test_corpus_ibstat(corpus) -> None:
    _check(corpus, "6", lambda s, n: "ibstat" in n or "CA '" not in s.text())
    assert any("ibstat" in names(s.text()) for s in corpus.category("6"))


def test_corpus_misc_categories(corpus) -> None:
    expect = {
        "legion1338": "numactl", "hwloc653": "lspci_nvidia", "lspci-vvv-gtx1650": "lspci_nvidia",
        "proc-driver-nvidia-version": "proc_driver_nvidia_version",
        "gpud-nvidia-smi-nvlink-status": "nvidia_smi_nvlink_status",
        "azurehpc-nvlink-status": "nvidia_smi_nvlink_status",
        "nvdocker904": "nvidia_container_cli_info", "nvdocker1775": "nvidia_container_cli_info",
        "xe9780-b300-systemctl-status": "systemctl_fabricmanager",
        "gpud-fabricmanager-log": "fabricmanager_journal",
        "nvtrust128": "fabricmanager_journal", "cubestudio29": "fabricmanager_journal",
    }
    for part, name in expect.items():
        assert name in names(corpus.sample(part).text()), part
    for s in corpus.category("7") + corpus.category("8"):
        for name, text in detect(s.text()):
            assert text.strip(), (s.name, name)


# --- hand-written pastes ------------------------------------------------------------


def test_shell_session_splits_at_prompts() -> None:
    paste = f"$ nvidia-smi\n{TABLE}$ sudo dmesg | grep NVRM\n{XID}\n"
    got = detect(paste)
    assert [n for n, _ in got] == ["nvidia_smi", "kernel_log"]
    assert got[0][1].startswith("Tue Mar  4") and "NVRM" not in got[0][1]
    assert got[1][1] == XID + "\n"


def test_user_host_prompts_and_command_hint() -> None:
    paste = ("alice@gpu-07:~$ nvidia-smi -q | grep -A2 Fabric\n    Fabric\n"
             "        State                             : In Progress\n"
             "[root@gpu-07 ~]# cat /proc/driver/nvidia/version\n"
             "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 UTC 2024\n")
    assert names(paste) == ["nvidia_smi_q", "proc_driver_nvidia_version"]


def test_errors_and_list() -> None:
    assert names("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                 "driver. Make sure that the latest NVIDIA driver is installed and running.\n"
                 ) == ["nvidia_smi"]
    assert names("Failed to initialize NVML: Driver/library version mismatch\n"
                 "NVML library version: 550.127\n") == ["nvidia_smi"]
    assert names("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-6a1f0c3e-22b4-4e0b-8d5c-0e9f1a2b3c4d)\n"
                 ) == ["nvidia_smi"]


def test_nvlink_status_and_errors() -> None:
    head = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5269b708-678a-b1a8-60f0-c90406537486)\n"
    assert names(head + "\t Link 0: 25 GB/s\n\t Link 1: <inactive>\n") == [
        "nvidia_smi_nvlink_status"]
    assert names(head + "\t Link 0: Replay Errors: 0\n\t Link 0: CRC Errors: 1\n") == [
        "nvidia_smi_nvlink_errors"]


def test_modules_both_forms() -> None:
    lsmod = ("Module                  Size  Used by\nnvidia_uvm           1818624  0\n"
             "nvidia              56057856  1 nvidia_uvm\n")
    assert detect(lsmod) == [("proc_modules", lsmod)]
    proc = "nvidia_uvm 1818624 0 - Live 0x0000000000000000 (POE)\n"
    assert detect(proc) == [("proc_modules", proc)]


def test_systemctl_unit_decides_source() -> None:
    show = ("Type=forking\nRestart=no\nId=nvidia-persistenced.service\n"
            "Names=nvidia-persistenced.service\nLoadState=loaded\nActiveState=failed\n"
            "SubState=failed\n")
    assert names(show) == ["systemctl_persistenced"]
    assert names(show.replace("persistenced", "fabricmanager")) == ["systemctl_fabricmanager"]
    assert names("Type=simple\nId=ssh.service\nLoadState=loaded\nActiveState=active\n") == []
    assert names("Unit nvidia-fabricmanager.service could not be found.\n") == [
        "systemctl_fabricmanager"]


@pytest.mark.parametrize("line", [
    "2025-03-04T09:02:31,220121+00:00 NVRM: Xid (PCI:0000:2a:00): 79, GPU has fallen off the bus.",
    "[Tue Mar  4 09:02:31 2025] nvidia-nvlink: Nvlink Core is being initialized",
    "2025-03-04T09:02:31.220121+0000 gpu-07 kernel: pcieport 0000:17:01.0: AER: Uncorrected",
    "Mar  4 09:02:31 gpu-07 kernel: NVRM: API mismatch: the client has the version 550.1, "
    "but#012NVRM: this kernel module has the version 535.2.",
    '{"__REALTIME_TIMESTAMP":"1741078951220121","_TRANSPORT":"kernel","MESSAGE":"NVRM: Xid"}',
    "[ 5.310007] usb 1-1: new high-speed USB device number 2 using xhci_hcd",
])
def test_kernel_log_formats(line: str) -> None:
    assert names(line + "\n") == ["kernel_log"]


def test_mixed_text_keeps_only_log_lines() -> None:
    paste = ("Hi team, the job died again last night, logs below:\n\n"
             f"{XID}\n[ 1341.220140] NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.\n"
             "\nAny idea? Thanks.\n")
    got = detect(paste)
    assert [n for n, _ in got] == ["kernel_log"]
    assert "Hi team" not in got[0][1] and got[0][1].count("NVRM") == 2
    assert kernel_lines(paste) == got[0][1]


def test_numactl_ibstat_xml() -> None:
    assert names("available: 2 nodes (0-1)\nnode 0 cpus: 0 1\nnode 0 size: 1000 MB\n"
                 "node distances:\nnode   0   1\n  0:  10  21\n  1:  21  10\n") == ["numactl"]
    assert names("CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n") == ["ibstat"]
    xml = '<?xml version="1.0" ?>\n<nvidia_smi_log>\n<driver_version>1</driver_version>\n' \
          "</nvidia_smi_log>\n"
    assert detect("$ nvidia-smi -q -x\n" + xml) == [("nvidia_smi_q_xml", xml)]


def test_unrecognised_and_empty() -> None:
    assert detect("") == [] and detect("   \n\n") == []
    assert detect("hello world\nthis is not a GPU output\n") == []
    assert "\n" not in EXPECTED and len(EXPECTED) < 120 and "--formats" in EXPECTED
    assert any("nvidia-smi -q -x XML" in line for line in formats())


def test_source_for_command() -> None:
    assert source_for_command("sudo nvidia-smi topo -m") == "nvidia_smi_topo"
    assert source_for_command("nvidia-smi -i 0") == "nvidia_smi"
    assert source_for_command("nvidia-smi -r -i 0") == "gpu_reset"
    assert source_for_command("nvidia-smi --query-gpu=name --format=csv") == "nvidia_smi_csv"
    assert source_for_command("nvidia-smi -pm 0") is None
    assert source_for_command("journalctl -k -b") == "kernel_log"
    assert source_for_command("systemctl status nvidia-persistenced") == "systemctl_persistenced"
    assert source_for_command("cat /proc/modules") == "proc_modules"
    assert source_for_command("") is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_detect_never_raises(text: str) -> None:
    for name, piece in detect(text):
        assert isinstance(name, str) and isinstance(piece, str)


# --- loading files ------------------------------------------------------------------


def test_load_pasted_file_records_origin(tmp_path: Path) -> None:
    path = tmp_path / "whatever.txt"
    path.write_text(f"$ nvidia-smi\n{TABLE}$ dmesg\n{XID}\n")
    snap = load_input(str(path))
    assert snap.names() == ["kernel_log", "nvidia_smi"]
    cap = snap.get("kernel_log")
    assert cap.origin == str(path)
    assert cap.record["kind"] == "pasted" and cap.record["origin"] == str(path)
    assert cap.record["error"] is None and cap.record["rc"] is None
    assert snap.manifest is None and snap.problems == []


def test_gzip_detected_by_content_not_name(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    path.write_bytes(gzip.compress((XID + "\n").encode()))
    assert load_input(str(path)).text("kernel_log") == XID + "\n"


def test_truncated_gzip(tmp_path: Path) -> None:
    body = "".join(f"[{i:6d}.000000] NVRM: line {i}\n" for i in range(20000)).encode()
    blob = gzip.compress(body)
    part = tmp_path / "part.gz"
    part.write_bytes(blob[: len(blob) // 2])
    snap = load_input(str(part))
    assert "NVRM: line 0\n" in snap.text("kernel_log")
    assert any("truncated gzip data" in p for p in snap.problems)
    stub = tmp_path / "stub.gz"
    stub.write_bytes(blob[:12])
    with pytest.raises(InputError, match="truncated or corrupt gzip"):
        load_input(str(stub))


@pytest.mark.parametrize("data,message", [
    (b"", "empty file"),
    (b"\n \n", "empty file"),
    (bytes(range(256)) * 64, "binary data, not a text output"),
])
def test_bad_contents(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "input"
    path.write_bytes(data)
    with pytest.raises(InputError, match=message) as err:
        load_input(str(path))
    assert str(path) in str(err.value)


@pytest.mark.parametrize("padded", [False, True])
def test_a_large_binary_file_is_refused_by_its_sample_not_read(tmp_path: Path, padded) -> None:
    """The sample the refusal is judged on is read first: 300 MB of random bytes once
    cost 545 MB of memory to be called binary. A file that starts with NUL padding (a
    log written at a crash) is judged after it, as before."""
    import random

    path = tmp_path / "blob.bin"
    pad = b"\0" * (200 << 10) if padded else b""
    path.write_bytes(pad + random.Random(3).randbytes(24 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=f"{path}: binary data, not a text output$"):
            load_input(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak
    log = tmp_path / "padded.log"
    log.write_bytes(b"\0" * (200 << 10) + (XID + "\n").encode() * 10)
    assert XID in load_input(str(log)).text("kernel_log")


def test_unreadable_inputs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_input(str(tmp_path / "nope"))
    with pytest.raises(InputError, match="not a gputriage snapshot"):
        load_input(str(tmp_path))
    unknown = tmp_path / "notes.txt"
    unknown.write_text("just some notes\n")
    with pytest.raises(InputError, match="unrecognised content; expected a snapshot"):
        load_input(str(unknown))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads everything")
def test_permission_denied(tmp_path: Path) -> None:
    path = tmp_path / "secret.log"
    path.write_text(XID + "\n")
    path.chmod(0)
    with pytest.raises(InputError, match="permission denied"):
        load_input(str(path))


def test_snapshot_directory_and_tarball(tmp_path: Path) -> None:
    man = new_manifest("h", "2025-03-04T09:00:00Z", None, "0")
    man["sources"]["kernel_log"] = source_record("kernel_log", nbytes=len(XID))
    for out in (tmp_path / "snap", tmp_path / "snap.tar.gz"):
        write_snapshot(out, man, {"kernel_log": (XID + "\n").encode()})
        snap = load_input(str(out))
        assert snap.text("kernel_log") == XID + "\n" and snap.manifest is not None


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = SimpleNamespace(buffer=io.BytesIO(TABLE.encode()))
    monkeypatch.setattr(sys, "stdin", fake)
    snap = load_input("-")
    assert snap.names() == ["nvidia_smi"] and snap.get("nvidia_smi").origin == "<stdin>"


def test_load_inputs_combines_and_reports(tmp_path: Path) -> None:
    a, b, bad = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "bad.txt"
    a.write_text(TABLE)
    b.write_text(XID + "\n")
    bad.write_bytes(b"")
    snap = load_inputs([str(a), str(b), str(bad)])
    assert snap.names() == ["kernel_log", "nvidia_smi"]
    assert snap.problems == [f"{bad}: empty file"]
    with pytest.raises(InputError) as err:
        load_inputs([str(bad), str(tmp_path / "missing")])
    assert "\n" not in str(err.value) and "empty file" in str(err.value)
    with pytest.raises(InputError, match="empty file"):
        load_inputs([str(bad)])


def test_cap_keeps_the_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "CAP_BYTES", 4096)
    lines = [f"[{i:6d}.000000] NVRM: line {i}" for i in range(2000)]
    path = tmp_path / "big.log"
    path.write_text("\n".join(lines) + "\n")
    snap = load_input(str(path))
    kern = snap.text("kernel_log")
    assert kern.endswith(lines[-1] + "\n") and lines[0] not in kern
    assert kern.splitlines()[0] in lines  # no half line at the start
    assert any("only the last 4.0 KiB read" in p for p in snap.problems)
    gz = tmp_path / "big.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert load_input(str(gz)).text("kernel_log") == kern


def test_huge_sparse_file_is_read_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.log"
    with path.open("wb") as fh:
        fh.seek(2**31)
        fh.write(b"\n")
        fh.write(f"{XID}\n".encode() * 3)
    tracemalloc.start()
    try:
        snap = load_input(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert snap.text("kernel_log") == f"{XID}\n" * 3
    assert any("2.0 GiB, only the last 256.0 MiB read" in p for p in snap.problems)
    assert peak < 64 * 2**20


def test_load_text_rejects_unknown() -> None:
    with pytest.raises(InputError, match="paste: unrecognised content"):
        load_text("nothing to see\n", "paste")


_FRAGMENTS = ["$ nvidia-smi", "# dmesg", "alice@h:~$ nvidia-smi -q", "```", "", "   ",
              "| NVIDIA-SMI 550.1   Driver Version: 550.1 |", "+-----+", "|  0  H100 |",
              "==============NVSMI LOG==============", "GPU 00000000:18:00.0",
              "    Product Name : X", "Timestamp      : now", "\tGPU0\tGPU1\tCPU Affinity",
              "GPU0\t X \tNV18", "Legend:", "  X = Self", "CA 'mlx5_0'", "\tPort 1:",
              "GPU 0: A100 (UUID: GPU-1)", "\t Link 0: 25 GB/s", "NVRM version: NVIDIA UNIX x",
              "NVRM version: 1", "Device Index: 0", "Module  Size  Used by", "nvidia 1 2",
              "available: 2 nodes (0-1)", "node 0 cpus: 0", "18:00.0 3D controller: NVIDIA x",
              "Id=nvidia-persistenced.service", "ActiveState=active", "LoadState=loaded",
              "● nvidia-fabricmanager.service - FM", "   Loaded: loaded",
              "[Feb 25 2025 13:59:45] [INFO] [tid 1] x", XID, "-- Boot 0123abcd --",
              "No devices were found", "<?xml version=\"1.0\" ?>", "<nvidia_smi_log>", "x \\"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=15)), max_size=40))
def test_detect_structured_fuzz(lines: list[str]) -> None:
    for name, piece in detect("\n".join(lines)):
        assert piece.strip() and name


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000))
def test_load_input_bytes_give_snapshot_or_input_error(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "input"
    path.write_bytes(data)
    try:
        load_input(str(path))
    except InputError as exc:
        assert "\n" not in str(exc)


def test_long_lines_stay_linear() -> None:
    for line in ("A" + " " * 200_000 + "b", "$ a" + " " * 200_000 + "b",
                 "GPU 00000000:18:00.0\n    x\nA" + " " * 200_000 + "b", "[" * 200_000):
        detect(line)


def test_gzip_members_and_trailing_data_read_as_logs_and_nccl_read_them(tmp_path: Path) -> None:
    """One stream layer: concatenated members are all read, data after the last member
    is ignored with a problem noted (as ``gputriage logs`` and ``nccl`` do)."""
    first = gzip.compress(b"[    1.000000] NVRM: first member\n")
    second = gzip.compress(b"[    2.000000] NVRM: second member\n")
    path = tmp_path / "log.gz"
    path.write_bytes(first + second + b"not gzip")
    snap = load_input(str(path))
    text = snap.text("kernel_log") or ""
    assert "first member" in text and "second member" in text
    assert any("data after the end of the gzip stream" in p for p in snap.problems)


_PIECES = st.sampled_from(["a", "b", "ab", " ", "\n", "\r\n", "\r"])


@given(st.lists(_PIECES, max_size=30).map("".join),
       st.lists(st.sampled_from(["a", "b", "ab", "ba", " a", "zz"]), max_size=3))
def test_paste_lines_with_finds_the_lines_a_scan_would(text: str, words: list[str]) -> None:
    """The detectors' literal test over the whole paste picks the lines a per-line test
    picks, and the paste's text holds its lines as they are."""
    doc = PasteDoc(text)
    assert doc.lines_with(words) == [i for i, ln in enumerate(doc.lines)
                                     if any(w in ln for w in words)]
    assert doc.text.split("\n") == (doc.lines or [""])


@pytest.mark.parametrize("suffix, compress", [(".xz", lzma.compress), (".bz2", bz2.compress)])
def test_a_pasted_output_compressed_with_xz_or_bzip2_is_read_as_gzip_is(
        tmp_path: Path, suffix: str, compress: Any) -> None:
    body = "".join(f"[{i:6d}.000000] NVRM: line {i}\n" for i in range(2000)).encode()
    path = tmp_path / f"dmesg{suffix}"
    path.write_bytes(compress(body))
    assert "NVRM: line 1999\n" in load_input(str(path)).text("kernel_log")
    stub = tmp_path / f"stub{suffix}"
    stub.write_bytes(compress(body)[:20])
    with pytest.raises(InputError, match="truncated or corrupt"):
        load_input(str(stub))


# --- segments: barriers looked for only on lines that may be one -------------------------
_SESSION_LINES = (
    "$ nvidia-smi", "  $ sudo dmesg | grep NVRM \\", "  -T", "alice@gpu-07:~$ nvidia-smi -q \\",
    "[root@gpu-07 ~]# cat /proc/driver/nvidia/version", "# nThread 1 nGpus 8 minBytes 8",
    "nvidia-smi", "sudo  nvidia-smi topo -m", "\tibstat", "nvidia-smi is not found", "```",
    "  ```text", "# Port counters: Lid 2 port 1", "echo $PATH", "(venv) $ python train.py",
    "2025-03-02 10:00:00,000 [rank3] INFO train.py:412 step 7 loss 1.2", XID, "")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_SESSION_LINES), st.text(max_size=40)), max_size=14))
def test_segments_are_those_of_every_line_tried(lines: list[str]) -> None:
    """The lines a prompt, a bare command or a fence is looked for on are all those that
    may be one: the segments and barriers are those of every line tried."""
    import re

    from gputriage.ingest import detect as ingest_detect

    text = "\n".join(lines)
    fast, slow = PasteDoc(text), PasteDoc(text)
    segments = ingest_detect._segments(fast)
    with pytest.MonkeyPatch.context() as m:  # (every line's start: the newline before it)
        m.setattr(ingest_detect, "_MAYBE_BARE", re.compile("\n"))
        assert ingest_detect._segments(slow) == segments
    assert fast.owner == slow.owner
