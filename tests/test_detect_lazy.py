"""Detection leaves a detector out, unimported, when a paste cannot hold what its gates
look for (src/gputriage/parsers/detect_table.py, written by tools/gate_table.py from the
detectors' ``gated_by`` declarations): the table is what the tool writes, each declared
set holds every gate a detector consults, and detection is the same with every detector
run, on every corpus sample alone and inside a training job's log."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import detect_both
import pytest
from detect_both import claim_every_detector, lazy_and_eager_agree  # noqa: F401  (the fixture)
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from training_kit import NCCL_CHANNEL, training_log

from gputriage import sources
from gputriage.ingest import detect as ingest_detect
from gputriage.ingest.detect import detect, detect_framed
from gputriage.parsers import detect_k8s, job_log, nvsmi_csv
from gputriage.parsers.detect_gate import (
    FOLDS_INTO_ASCII,
    Gate,
    declared_gates,
    gate_entry,
    held_by_line,
    may_open,
)
from gputriage.parsers.detect_table import GATES
from gputriage.snapshot.bundle import decode
from gputriage.text.paste import PasteDoc

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "gate_table.py"

_NCCL = NCCL_CHANNEL


def _training(lines: int) -> str:
    return training_log(lines, _NCCL)


def test_the_table_is_what_the_tool_writes() -> None:
    spec = importlib.util.spec_from_file_location("gate_table_tool", TOOL)
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.TABLE.read_text(encoding="utf-8") == tool.render(), (
        "src/gputriage/parsers/detect_table.py is out of date: run python tools/gate_table.py")
    assert list(GATES) == sources.detector_refs()


def test_detection_imports_no_detector_a_training_log_cannot_hold() -> None:
    """In a fresh process: of the 45 detectors, those whose gates a training log opens
    are imported, the host outputs' are not."""
    code = ("import sys\nfrom gputriage.ingest.detect import detect\n"
            f"assert detect({_training(400)!r}) == [('nccl_log', {''.join(_NCCL.format(r=(i % 16)) for i in range(5, 400, 97))!r})]\n"  # noqa: E501
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('gputriage.parsers.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()
    for skipped in ("nvsmi_xml", "infiniband", "lspci", "dcgmi_diag", "topo", "fabricmanager",
                    "gpu_reset", "module_build", "xid_counts"):
        assert f"gputriage.parsers.{skipped}" not in out


# NCCL's set-up records, whose words ("node", "name", "gpu ", "gpu-", "nvml") are
# literals of the Kubernetes table's, nvidia-smi's, the device plugin's and the container
# toolkit's gates; and a colon and blank that the kernel log's search looks for
_NCCL_SETUP = (
    "gpu-node-018:43782:43782 [6] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib\n"
    "gpu-node-018:43778:43939 [2] NCCL INFO Setting affinity for GPU 2 to ff,ffffffff\n"
    "gpu-node-018:43778:43939 [2] NCCL INFO ncclCommInitRank comm 0x55d50c88ec77 rank 10 "
    "nranks 16 cudaDev 2 nvmlDev 2 busId 3a000 commId 0x00cf8b08c87fe55 - Init START\n"
    "gpu-node-018:43778:43778 [2] NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open "
    "shared object file: No such file or directory\n")


def test_words_of_lines_claimed_already_open_no_later_detector() -> None:
    """In a fresh process: a job's log whose NCCL records hold words of other detectors'
    gates imports none of those detectors (the NCCL detector claims the records first,
    and a gate looks at the lines left)."""
    paste = _training(200) + _NCCL_SETUP + _training(200)
    code = ("import sys\nfrom gputriage.ingest.detect import detect\n"
            f"print([name for name, _ in detect({paste!r})])\n"
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('gputriage.parsers.'))))")
    names, modules = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                    text=True, check=True, timeout=60).stdout.splitlines()
    assert names == "['nccl_log']"
    for skipped in ("detect_k8s", "nvsmi_text", "nvsmi_csv", "device_plugin_log", "ctk_log"):
        assert f"gputriage.parsers.{skipped}" not in modules.split()
    assert [name for name, _ in detect(paste)] == ["nccl_log"]  # (and so with every detector)


def test_a_literal_on_a_claimed_line_opens_no_gate() -> None:
    doc = PasteDoc(training_log(20) + "node-7 GPU reset\n" + training_log(20))
    line = doc.lines.index("node-7 GPU reset")
    assert may_open(doc, ("node",)) and may_open(doc, (), (("[0-9] GPU", 0),))
    doc.owner[line] = "nccl_log"  # (claimed: it stays so while the detectors run)
    assert not may_open(doc, ("node",)) and not may_open(doc, (), (("[0-9] GPU", 0),))
    assert may_open(doc, ("reset",)) is False and may_open(doc, ("loss",))


def test_the_characters_that_fold_into_ascii_letters() -> None:
    """Every character but ASCII that a case mapping (lower, upper, casefold) turns into
    an ASCII letter, or that a regex with IGNORECASE matches with one, is listed."""
    letter = re.compile("[a-z]", re.IGNORECASE)
    found = []
    for code in range(0x80, sys.maxunicode + 1):
        ch = chr(code)
        forms = ch.lower() + ch.upper() + ch.casefold()
        if letter.fullmatch(ch) or any("a" <= c.lower() <= "z" for c in forms if c.isascii()):
            found.append(ch)
    assert "".join(found) == FOLDS_INTO_ASCII


def test_may_open_is_a_necessary_condition_of_a_gate() -> None:
    gate = Gate(re.compile(r"\bfailed to reset GPU\b", re.IGNORECASE), literals=("NVML",),
                searches=(re.compile(r"\[[0-9]{1,4}:[0-9]{1,4}\]"),))
    entry = gate_entry((gate,))
    assert entry is not None
    job = _training(40)
    for line, opens in (("Failed to reset GPU 0000:3b:00.0", True),
                        ("libnvml.so.1 not found", True),  # inside a word
                        ("[12:34] fault", True),  # a search
                        ("cafe\u00e9: failed to reset GPU", True),  # not ASCII: its ASCII words
                        ("caf\u00e9 GPU reset", False),
                        ("\u212aelvin", True)):  # a letter that folds into k: may match
        doc = PasteDoc(job + line + "\n")
        assert may_open(doc, *entry) is opens, line
        if not opens:
            assert not gate.open(PasteDoc(job + line.encode("ascii", "replace").decode()))
    assert not may_open(PasteDoc(job), *entry)
    assert not gate.open(PasteDoc(job))
    assert may_open(PasteDoc(job + "a | b\n"), ("|",)) and not may_open(PasteDoc(job), ("|",))


_LITERALS = sorted({lit for entry in GATES.values() if entry for lit in entry[0]})
_FILLER = st.text(st.characters(blacklist_characters=FOLDS_INTO_ASCII,
                                blacklist_categories=("Cs",)), max_size=40)


@given(before=_FILLER, after=_FILLER, literal=st.sampled_from(_LITERALS),
       upper=st.lists(st.booleans(), min_size=60, max_size=60))
def test_a_paste_that_holds_a_literal_in_any_case_may_open_it(
        before: str, after: str, literal: str, upper: list[bool]) -> None:
    """Whatever surrounds it (any character, ASCII or not, but those that fold into ASCII
    letters), a literal of the table in the paste in any case is never ruled out."""
    cased = "".join(c.upper() if up else c for c, up in zip(literal, upper, strict=False))
    doc = PasteDoc(before + cased + after)
    assume(literal in doc.text.lower())  # not cut by a line break, nor a trailing space dropped
    assert may_open(doc, (literal,))


def test_a_detector_without_a_gate_always_runs() -> None:
    assert GATES["parsers.detect_jobs:claim_nccl_log"] is None
    assert gate_entry(None) is None and gate_entry(()) is None
    assert gate_entry((Gate(re.compile("[0-9]+")), Gate(literals=("x",)))) is None


def _samples(corpus, category: str, cap: int = 1 << 20) -> list[tuple[str, str]]:
    out = []
    for sample in corpus.category(category):
        raw = sample.path.read_bytes()[:cap]
        if b"\0" in raw[:4096] or raw[:2] == b"\x1f\x8b":
            continue
        out.append((sample.path.name, decode(raw)))
    return out


def _claims_with_every_detector(text: str) -> list[tuple[str, str]]:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ingest_detect, "_claim", claim_every_detector)
        return detect(text)


@pytest.mark.parametrize("category", [str(n) for n in range(1, 12)])
def test_detection_is_the_same_with_every_detector_on_the_corpus(corpus, category) -> None:
    """Every sample (its first MiB) alone, and inside a training log where most detectors
    are left out: the pieces found (names and bodies) and the framing's originals are
    those found with every detector run."""
    job = _training(60)
    for name, text in _samples(corpus, category):
        for paste in (text, job + text + job):
            lazy = detect_framed(paste)
            with pytest.MonkeyPatch.context() as m:
                m.setattr(ingest_detect, "_claim", claim_every_detector)
                eager = detect_framed(paste)
            assert lazy == eager, name


# a GPU node's kernel log as syslog writes it: its host name, the process fields of an Xid
# and systemd's words are words of many detectors' gates ("gpu-", "node", "name", "pid",
# "nvidia", "starting")
_KERNEL_LINES = (
    "2024-08-30T03:53:20+0000 gpu-node-17 kernel: NVRM: Xid (PCI:0000:ab:00): 13, pid=861879, "
    "name=nvidia-smi, Graphics SM Warp Exception on (GPC 4, TPC 1, SM 0): Out Of Range Address",
    "2024-08-30T03:53:21+0000 gpu-node-17 kernel: audit: type=1400 audit(1724990001.009:71239): "
    'apparmor="STATUS" operation="profile_load" name="nvidia_modprobe" pid=2207',
    "2024-08-30T03:53:22+0000 gpu-node-17 systemd[1]: Starting logrotate.service - Rotate log "
    "files...",
    "2024-08-30T03:53:23+0000 gpu-node-17 kernel: br-120eb: port 3(vethab5) entered disabled state",
)


def _kernel(lines: int) -> str:
    return "".join(_KERNEL_LINES[i % len(_KERNEL_LINES)] + "\n" for i in range(lines))


def _every_line_tried(m: pytest.MonkeyPatch) -> None:
    """Detection as before the looks that let a detector skip lines: each tries every
    line (no candidate lines of a gate, no quick look before a header's or row's test,
    the job log's literals looked for on each line)."""
    anything = re.compile("")
    m.setattr(Gate, "candidates", lambda self, doc: None)
    m.setattr(detect_k8s, "_HEAD_WORD", anything)
    m.setattr(nvsmi_csv, "_HEAD_START", anything)
    m.setattr(nvsmi_csv, "_BUS_END", anything)
    m.setattr(job_log, "_held", lambda doc: None)


@pytest.mark.parametrize("category", [str(n) for n in range(1, 12)])
def test_detection_is_the_same_when_every_line_is_tried(corpus, category) -> None:
    """Every sample (its first MiB) alone, inside a training log and inside a GPU node's
    kernel log: the pieces found (names and bodies) are those found with every line
    tried by every detector."""
    job, kernel = _training(60), _kernel(60)
    for name, text in _samples(corpus, category):
        for paste in (text, job + text + job, kernel + text + kernel):
            fast = detect_framed(paste)
            with pytest.MonkeyPatch.context() as m:
                _every_line_tried(m)
                slow = detect_framed(paste)
            assert fast == slow, name


_TABLE_PIECES = (
    "NAME", "READY", "STATUS", "RESTARTS", "AGE", "NODE", "NODE NAME", "NodeName", "REASON",
    "MESSAGE", "TYPE", "GPU", "nvidia.com/gpu", "name", "pci.bus_id", "memory.total [MiB]",
    "index", "GPU-8d7f0c3e-22b4-4e0b-8d5c-0e9f1a2b3c4d", "00000000:3B:00.0", "3b:00.1",
    "MIG-GPU-8d7f0c3e", "MIG-8d7f0c3e-22b4", "pid", "used_gpu_memory [MiB]", "gpu-node-17",
    "name=nvidia-smi", "Rea\u017fon", "  ", "   ", ", ", ",", "\t", " # a comment", "1", "0/1",
    "Running")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_TABLE_PIECES), st.text(max_size=12)), max_size=8),
       st.sampled_from(["", " ", "  ", ", "]))
def test_the_quick_looks_refuse_no_header_or_row_their_tests_take(pieces, sep) -> None:
    """A kubectl table header, an nvidia-smi CSV header or row that the full tests take
    passes the quick look that comes before them."""
    line = sep.join(pieces)
    fast = (detect_k8s._table_head(line), nvsmi_csv.is_csv_header(line),
            nvsmi_csv.is_csv_row(line))
    with pytest.MonkeyPatch.context() as m:
        _every_line_tried(m)
        slow = (detect_k8s._table_head(line), nvsmi_csv.is_csv_header(line),
                nvsmi_csv.is_csv_row(line))
    assert fast == slow


@pytest.mark.parametrize(("line", "head", "csv_head", "csv_row"), [
    ("NAME   READY   STATUS    RESTARTS   AGE", True, False, False),
    ("NODENAME   GPU", True, False, False),
    ("NodeName\tnvidia.com/gpu", True, False, False),
    ("NODE NAME   GPUS", True, False, False),
    ("LAST SEEN   TYPE      REASON    OBJECT   MESSAGE", True, False, False),
    ("name, pci.bus_id, memory.total [MiB]", False, True, False),
    ("  memory.used [MiB]", False, True, False),
    ("00000000:3B:00.0, 81559 MiB", False, False, True),
    ("GPU-8d7f0c3e-22b4-4e0b-8d5c-0e9f1a2b3c4d, 0", False, False, True),
    ("MIG-8d7f0c3e-22b4-4e0b-8d5c-0e9f1a2b3c4d, 1", False, False, True),
    ("1, 3b:00.1 # the second", False, False, True),
    (_KERNEL_LINES[0], False, False, False),
])
def test_the_quick_looks_pass_the_headers_and_rows(line, head, csv_head, csv_row) -> None:
    assert (detect_k8s._table_head(line), nvsmi_csv.is_csv_header(line),
            nvsmi_csv.is_csv_row(line)) == (head, csv_head, csv_row)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["gpu", "CUDA error: out of memory", "Driver Version:",
                                           "gpu-node-7", "torch", "libcuda.so", "\n", " "]),
                          st.text(st.characters(max_codepoint=127), max_size=12)), max_size=16))
def test_the_literals_held_by_line_are_those_of_each_line(pieces: list[str]) -> None:
    literals = ("gpu", "cuda", "cuda error: out of memory", "driver version:", "libcuda.so",
                " error", "torch")
    doc = PasteDoc("".join(pieces))
    want = {i: held for i, line in enumerate(doc.lines)
            if (held := frozenset(t for t in literals if t in line.lower()))}
    assert held_by_line(doc, literals) == want
    assert held_by_line(PasteDoc("caf\u00e9 gpu\n"), literals) is None  # (each line alone)


@pytest.mark.parametrize(("line", "readers"), [
    ("gpu-node-17 kernel: NVRM: Xid (PCI:0000:ab:00): 13, pid=1, name=gpu_burn", 0),
    ("GPU 0: Tesla V100-SXM2-16GB", 1),
    ("Driver Version: 550.54.15    CUDA Version: 12.4", 2),
])
def test_a_version_reader_is_tried_only_where_a_line_holds_its_literals(line, readers) -> None:
    """A line holding "gpu" alone (a GPU node's host name) meets no reader: the GPU's
    wants a model too; the readers tried on a line are those of all the literals it
    holds, in order."""
    held = frozenset(t for t in job_log._reader_literals() if t in line.lower())
    tried = list(job_log._readers_for(held))
    assert len(tried) >= readers and tried == [
        r for r in job_log._READERS if r in tried]  # (in the readers' order)
    assert (readers == 0) is (tried == [])
    every = job_log._READERS
    assert list(job_log._readers_for(None)) == list(every)


def test_a_gate_s_candidates_are_the_free_lines_that_hold_its_words() -> None:
    gate = Gate(literals=("Loading NVML",), searches=(re.compile(r"GPU-[0-9a-f]{8}"),))
    doc = PasteDoc(_kernel(8) + "I0530 loading nvml\nrow GPU-8d7f0c3e\nx\n" + _kernel(4))
    assert gate.candidates(doc) == [8, 9]
    doc.owner[8] = "device_plugin_log"
    assert gate.candidates(doc) == [9]
    assert gate.candidates(PasteDoc("caf\u00e9 loading nvml\n")) is None  # (every line)
    assert Gate(re.compile("[0-9]+")).candidates(doc) is None


@pytest.mark.parametrize("category", [str(n) for n in range(1, 12)])
def test_a_detector_consults_first_the_gates_it_declares(corpus, category, monkeypatch) -> None:
    """Run over each corpus sample, a detector that declared its gates consults no other
    gate before one of those opened (a gate inside a declared one may follow), and claims
    a line only where the table says the paste may open one."""
    consulted: list[tuple[Gate, bool]] = []
    real_open = Gate.open

    def open_(gate: Gate, doc: PasteDoc) -> bool:
        consulted.append((gate, real_open(gate, doc)))
        return consulted[-1][1]

    monkeypatch.setattr(Gate, "open", open_)
    for name, text in _samples(corpus, category, 256 << 10):
        doc = PasteDoc(text)
        for ref in sources.detector_refs():
            detector = sources.load(ref)
            consulted.clear()
            before = list(doc.owner)
            entry = GATES[ref]
            may = entry is None or may_open(doc, *entry)  # (asked before it runs, as detect asks)
            detector(doc)
            declared = {id(g) for g in declared_gates(detector) or ()}
            if not declared:
                continue
            for gate, opened in consulted:
                assert id(gate) in declared, f"{ref} consults an undeclared gate on {name}"
                if opened:
                    break
            if doc.owner != before:
                assert may, f"{ref} claimed in {name}"


@pytest.mark.usefixtures("lazy_and_eager_agree")
def test_the_detection_tests_compare_both_ways() -> None:
    paste = "$ nvidia-smi -L\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-8d7f)\n" + _training(30)
    assert [name for name, _ in detect(paste)] == ["nvidia_smi", "nccl_log"]
    assert detect_both.COMPARED == [32]
