"""The catalog of a job's error messages (knowledge/job_messages.py): every CUDA row is
valid and found by number, runtime name, driver API name and message text; generic texts
("out of memory", "unknown error") count only where CUDA said them, so real kernel logs,
NCCL logs and nvidia-smi outputs give no false CUDA hits."""

from __future__ import annotations

import csv
import re
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gputriage.knowledge.job_messages import (
    CUDA_FAMILY,
    catalog,
    cuda_error,
    find,
    find_hits,
    scan,
    scan_line,
)
from gputriage.model import Action, Blame, Severity

# the cudaError_t values a job is known to print that the table must hold
REQUIRED = (1, 2, 3, 34, 35, 36, 46, 100, 101, 200, 209, 214, 218, 221, 222, 304, 700, 701,
            702, 719, 802, 803, 804, 999)
CUDA = [m for m in catalog() if m.family == CUDA_FAMILY]
IDS = [m.id for m in CUDA]


def _table() -> list[dict[str, str]]:
    text = resources.files("gputriage.knowledge").joinpath("cuda_errors.csv").read_text()
    return list(csv.DictReader(ln for ln in text.splitlines() if not ln.startswith("#")))


# --- the table ----------------------------------------------------------------------------

def test_every_required_code_is_in_the_table_once():
    codes = [int(row["code"]) for row in _table()]
    assert len(codes) == len(set(codes))
    assert set(REQUIRED) <= set(codes), sorted(set(REQUIRED) - set(codes))


def test_every_row_is_valid():
    for row in _table():
        where = f"code {row['code']}"
        assert re.fullmatch(r"cudaError[A-Z][A-Za-z]+", row["enum"]), where
        assert row["cu_name"] == "" or re.fullmatch(r"CUDA_ERROR_[A-Z_]+", row["cu_name"]), where
        assert row["message"] and row["message"] == row["message"].strip(), where
        assert row["generic"] in ("", "yes"), where
        Blame(row["blame"]), Action(row["action"]), Severity(row["severity"])
        for key in ("meaning", "cause", "next"):
            assert len(row[key]) > 20, (where, key)
        if row["action"] in ("reset-gpu", "reboot-node", "drain-and-repair"):
            assert row["severity"] == "critical", f"{where}: whatever says drain is critical"


def test_names_are_unique_and_follow_the_headers():
    names = [n for m in CUDA for n in (m.name, m.cu_name) if n]
    assert len(names) == len(set(names))
    # numbers where the driver API's name is not the runtime's word for word (cuda.h)
    assert cuda_error("CUDA_ERROR_NOT_INITIALIZED") is cuda_error(3)
    assert cuda_error("CUDA_ERROR_NO_BINARY_FOR_GPU") is cuda_error(209)
    assert cuda_error("CUDA_ERROR_LAUNCH_FAILED") is cuda_error(719)
    assert cuda_error(35).cu_name is None, "cuda.h has no CUresult for 35"


def test_judgement_without_host_facts():
    blame = {code: cuda_error(code).blame for code in (700, 719, 701, 716, 214, 802, 803, 35,
                                                       209, 222, 221, 804, 100, 999)}
    assert {blame[c] for c in (700, 719, 701, 716)} == {Blame.JOB}
    assert {blame[c] for c in (214, 804)} == {Blame.NODE}
    # 802: its fabric manager, 803: its driver packages: the node's software
    assert {blame[c] for c in (802, 803)} == {Blame.CONFIG}
    assert {blame[c] for c in (35, 209, 222, 221)} == {Blame.JOB_CONFIG}
    assert blame[100] is Blame.CONFIG
    assert cuda_error(803).action is Action.FIX_SOFTWARE  # issue 31: no hardware drain
    assert blame[999] is Blame.UNKNOWN
    assert cuda_error(214).severity is Severity.CRITICAL
    # what needs the host's facts to be settled says which
    for code in (700, 719, 35, 2, 802):
        assert cuda_error(code).decide, code


# --- each code, each way of naming it ------------------------------------------------------

def _cuda_hits(line: str) -> list:
    """The CUDA errors on a line (a framework's row may name the same failure too)."""
    return [h.message for h in scan_line(line) if h.message.family == CUDA_FAMILY]


@pytest.mark.parametrize("msg", CUDA, ids=IDS)
def test_found_by_number_name_and_text(msg):
    assert cuda_error(msg.code) is msg and cuda_error(str(msg.code)) is msg
    assert cuda_error(msg.name) is msg
    assert _cuda_hits(f"cudaGetDeviceCount returned {msg.code}") == [msg]
    assert _cuda_hits(f"RuntimeError: CUDA error {msg.code}") == [msg]
    assert _cuda_hits(f"status = {msg.name}") == [msg]
    if msg.cu_name:
        assert cuda_error(msg.cu_name) is msg
        assert _cuda_hits(f"cuInit failed: {msg.cu_name}") == [msg]
    for text in (msg.text, *msg.also):
        assert _cuda_hits(f"RuntimeError: CUDA error: {text}") == [msg], text
        assert _cuda_hits(text.upper()) == ([] if msg.generic else [msg]), text


def test_a_number_needs_cuda_words_beside_it():
    assert scan_line("Error 700 in module foo") == []
    assert [h.message.id for h in scan_line("Error 802: system not yet initialized")] \
        == ["cuda.802"]
    hit, = scan_line("CUresult 999")
    assert hit.message.id == "cuda.999" and hit.fields == {"code": "999"}
    # a path with cuda in it and an errno are not a CUDA error 2
    assert scan_line("Could not exec '/usr/libexec/dcgm/plugins/cuda13/BwChecker_13'. "
                     "Error: (2) No such file or directory") == []


def test_generic_texts_count_only_where_cuda_said_them():
    for line in ("error: out of memory", "Failed to initialize NVML: Unknown Error",
                 "kernel: Out of memory: Killed process 4242 (python)",
                 "nvidia-container-cli: initialization error: load library failed: "
                 "libcuda.so.1: cannot open shared object file"):
        assert not _cuda_hits(line), line
    for line, code in (("RuntimeError: CUDA error: out of memory", 2),
                       ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", 2),
                       ("cuda runtime error (2) : out of memory at THCCachingAllocator.cpp", 2),
                       ("NCCL WARN Cuda failure 1 'invalid argument'", 1),
                       ("failed to initialize CUDA: unknown error", 999)):
        assert _cuda_hits(line) == [cuda_error(code)], line


def test_a_container_prefix_is_not_a_cuda_initialization_error():
    line = ("nvidia-container-cli: initialization error: cuda error: no cuda-capable device "
            "is detected")
    assert _cuda_hits(line) == [cuda_error(100)]


def test_find_names_alone_and_whole_texts():
    assert find("700") == [cuda_error(700)]
    assert find(" 'cudaErrorNoDevice' ") == [cuda_error(100)]
    assert find("CUDA_ERROR_ILLEGAL_ADDRESS") == [cuda_error(700)]
    assert find("unknown error") == [cuda_error(999)], "a generic text alone is still CUDA's"
    assert find("the provided PTX was compiled with an unsupported toolchain.") \
        == [cuda_error(222)]
    assert find("nothing to see") == [] and find("79") == []
    two = "CUDA error: an illegal memory access was encountered\ncudaErrorLaunchFailure\n"
    assert [m.id for m in find(two)] == ["cuda.700", "cuda.719"]
    assert [h.lineno for h in find_hits(two)] == [0, 1]


# --- real captures: only true CUDA hits ---------------------------------------------------

# category 5 (NCCL) samples whose CUDA errors are real, and what they are
NCCL_TRUE = {"pie500-4xh200-container-no-nvidia-caps-nvls": {"cuda.1"},
             "nccl1338-h800-single-node-nvls-invalid-argument": {"cuda.1"},
             "nccltests276-h200-nvls-cuda-failure-999": {"cuda.999"},
             "nccl1788-8xh100-nvls-cuMulticastAddDevice": {"cuda.401"},
             "pytorch177472-h100-ci-nvls-multicast-bind": {"cuda.401"},
             "rtxpro6000-dbe-rank1-uncorrectable-ecc": {"cuda.214"},
             "nccltests264-all-reduce-perf-cuda-failure-system-not-yet": {"cuda.802"}}


def _cuda_ids(sample) -> set[str]:
    return {h.message.id for h in scan(sample.text().splitlines())
            if h.message.family == CUDA_FAMILY}


@pytest.mark.parametrize("category", ["1", "2", "4"])
def test_no_cuda_hits_in_smi_outputs_and_kernel_logs(corpus, category):
    samples = corpus.category(category)
    assert samples
    hits = {s.name: ids for s in samples if (ids := _cuda_ids(s))}
    assert hits == {}


def test_nccl_logs_give_only_their_true_cuda_errors(corpus):
    samples = corpus.category("5")
    assert samples
    hits = {s.name: ids for s in samples if (ids := _cuda_ids(s))}
    expected = {corpus.sample(part).name: ids for part, ids in NCCL_TRUE.items()}
    assert hits == expected


@pytest.mark.parametrize("part, code", [
    ("torch-no-kernel-image-rtx4090", 209), ("torch-no-kernel-image-rtx5090", 209),
    ("cupy-804-quadro", 804), ("cuda-802-azure", 802), ("devicequery-fail-35", 35),
    ("oci-hook-no-cuda-device", 100), ("aws-p5-devicequery-cudagetdevicecount-802", 802),
])
def test_corpus_errors_are_found(corpus, part, code):
    assert _cuda_ids(corpus.sample(part)) == {f"cuda.{code}"}


def test_catalog_patterns_name_ascii_digits():
    """A pattern's number is a field a rule reads (a CUDA version, a driver release): it
    names ASCII digits, [0-9], as the tools print them; \\d matches every Unicode digit."""
    for m in catalog():
        for pattern in m.patterns:
            assert not re.search(r"(?<!\\)(?:\\\\)*\\[dD]", pattern.pattern), m.id


def test_the_cheap_line_gates_accept_what_their_case_blind_forms_accept():
    """The first filters run on the lowered line with a case-sensitive pattern (ten times
    faster on every line of a paste): the same lines pass as under IGNORECASE."""
    import re

    from gputriage.knowledge import job_messages
    from gputriage.parsers import job_log

    lines = [m.sample for m in catalog() if m.sample] + [
        "RuntimeError: CUDA Error: Out Of Memory", "NVIDIA-SMI has failed", "Torch 2.3.0+CU121",
        "TF version 2.15", "tf.config", "nothing here at all", "SM_90 kernel IMAGE missing"]
    lines += [ln.upper() for ln in lines] + [ln.title() for ln in lines]
    for gate in (job_messages.CATALOG_WORDS, job_log._WORD):
        blind = re.compile(gate.pattern, re.IGNORECASE)
        assert [bool(gate.search(ln.lower())) for ln in lines] == [
            bool(blind.search(ln)) for ln in lines]


def _every_pattern(line: str) -> list[tuple[str, dict[str, str]]]:
    """The reference: the family rows' hits of scan_line with every pattern searched on
    every line the catalog's words let past."""
    from gputriage.knowledge.job_messages import CATALOG_WORDS

    if not CATALOG_WORDS.search(line.lower()):
        return []
    hits = []
    for msg in catalog():
        for pat in msg.patterns if msg.code is None else ():
            if m := pat.search(line):
                hits.append((msg.id, {k: v for k, v in m.groupdict().items() if v is not None}))
                break
    return hits


_FAMILY_SAMPLES = [m.sample for m in catalog() if m.sample and m.code is None]


def test_every_sample_finds_the_same_with_its_patterns_gated():
    """Each row's sample, in every case, alone, framed and cut: the hits of searching
    every pattern (the property test below tries more around them)."""
    for sample in _FAMILY_SAMPLES:
        for line in (sample, sample.upper(), sample.swapcase(), sample.title()):
            for text in (line, f"gpu-b12 kernel: {line}", line[:len(line) // 2],
                         line.replace(" ", "\u00a0")):
                assert [(h.message.id, h.fields) for h in scan_line(text)
                        if h.message.code is None] == _every_pattern(text), text


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(_FAMILY_SAMPLES), st.sampled_from(["", "upper", "swap", "title"]),
       st.text(max_size=20), st.text(max_size=20), st.integers(0, 200))
def test_patterns_searched_only_on_lines_with_their_literals_find_the_same(
        sample, case, before, after, cut):
    """A pattern is searched on an ASCII line only when it holds one of the literals its
    matches need (in lower case): the hits are those of searching every pattern,
    in any case, with any text around it, cut anywhere, on a GPU node's host line."""
    line = {"": sample, "upper": sample.upper(), "swap": sample.swapcase(),
            "title": sample.title()}[case]
    for text in (before + line + after, line[:cut], f"gpu-b12 kernel: {line}"):
        assert [(h.message.id, h.fields) for h in scan_line(text)
                if h.message.code is None] == _every_pattern(text)


def test_every_family_pattern_but_a_few_is_gated():
    """Most patterns need a literal (else they are always searched): the gate holds for
    all but a few."""
    from gputriage.text.literals import required_literals

    needs = [required_literals(p) for m in catalog() for p in m.patterns if m.code is None]
    assert sum(n is None for n in needs) <= len(needs) // 8
