"""GDRCopy's tests (sanity, copybw) read and judged: gdr_open failing (gdrdrv not loaded or
/dev/gdrdrv missing), gdr_pin_buffer failing (gdrdrv and the driver at odds), and the
bandwidth of a healthy run, on the class's variants and the real captures."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import pytest
from hostkit import run

from gputriage.ingest.detect import detect
from gputriage.model import Action, Blame, Severity
from gputriage.parsers.gdrcopy import parse_gdrcopy
from gputriage.text.fields import ParseError

SOURCE_SAMPLES = {"gdrcopy": ("corpus:gdrcopy-readme-copybw", "corpus:gdrcopy305-a100",
                              "corpus:gdrcopy126-dgx1v", "corpus:gdrcopy234-clara")}

SANITY_OPEN = """\
$ gdrcopy_sanity
Running suite(s): Sanity
gdr_open error: Is gdrdrv driver installed and loaded?
gdr_open error: Is gdrdrv driver installed and loaded?
"""
SANITY_OLD_NULL = """\
Running suite(s): Sanity
Assertion "!((g) == ((void*)0))" failed at sanity.cpp:181
Assertion "!((t.g) == ((void*)0))" failed at sanity.cpp:1583
100%: Checks: 15, Failures: 0, Errors: 0
"""
SANITY_ERRNO = ("ERR:  error opening driver (errno=2/No such file or directory)\n"
                "gdr_open error: Is gdrdrv driver installed and loaded?\n")
SANITY_PIN = """\
Assertion "(gdr_pin_buffer(g, d_A, A_size, 0, 0, &A_mh)) == (0)" failed at sanity.cpp:344
Total: 28, Passed: 27, Failed: 1, Waived: 0
"""
COPYBW = """\
GPU id:0; name: NVIDIA A100-SXM4-80GB; Bus id: 0000:07:00
selecting device 0
testing size: 131072
rounded size: 131072
gpu alloc fn: cuMemAlloc
map_d_ptr: 0x7f33b4ad5000
info.va: 7f33a2000000
info.mapped_size: 131072
info.page_size: 65536
info.mapped: 1
info.wc_mapping: 1
writing test, size=131072 offset=0 num_iters=10000
write BW: 20011.6MB/s
reading test, size=131072 offset=0 num_iters=100
read BW: 1046.2MB/s
unmapping buffer
unpinning buffer
closing gdrdrv
"""
LSMOD_GDRDRV = "$ lsmod | grep gdrdrv\ngdrdrv                 24576  0\nnvidia              56463360  120 gdrdrv,nvidia_uvm,nvidia_modeset\n"

RULE_CASES = {
    "gdrcopy.tests": [({"gdrcopy": SANITY_OPEN}, "gdrcopy.open-failed"),
                      ({"gdrcopy": SANITY_PIN}, "gdrcopy.pin-failed"),
                      ({"gdrcopy": COPYBW}, "gdrcopy.bandwidth"),
                      ({"gdrcopy": 'Assertion "(gdr_copy_to_mapping(mh, buf, src, n)) == (0)" '
                                   "failed at sanity.cpp:700\n"}, "gdrcopy.tests-failed")],
}


def _found(text: str) -> dict:
    return {f.id: f for f in run(**dict(detect(text))).findings}


def test_parse_copybw() -> None:
    result = parse_gdrcopy(COPYBW)
    assert (result.write_mbps, result.read_mbps, result.mapped, result.wc_mapping) == (
        20011.6, 1046.2, True, True)
    assert result.gpus == [(0, "NVIDIA A100-SXM4-80GB", "0000:07:00")]
    assert not result.open_failed and not result.assertions


def test_a_slow_read_through_the_bar_is_healthy(corpus) -> None:
    for text in (COPYBW, corpus.sample("gdrcopy-readme-copybw").text()):
        found = _found(text)
        assert found["gdrcopy.bandwidth"].severity is Severity.INFO
        assert not [f for f in found.values() if f.severity.rank >= Severity.WARNING.rank]


@pytest.mark.parametrize("text", [SANITY_OPEN, SANITY_OLD_NULL, SANITY_ERRNO])
def test_gdr_open_failures_are_gdrdrv_setup(text: str) -> None:
    assert [name for name, _ in detect(text)] == ["gdrcopy"]
    f = _found(text)["gdrcopy.open-failed"]
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_CONFIG, Blame.CONFIG)
    assert "insmod.sh" in f.step and "/dev/gdrdrv" in f.step


def test_the_summary_is_not_believed_over_the_assertions() -> None:
    f = _found(SANITY_OLD_NULL)["gdrcopy.open-failed"]
    assert "summary line does not count" in f.explanation


def test_errno_and_lsmod_say_which_part_is_missing() -> None:
    assert "does not exist" in _found(SANITY_ERRNO)["gdrcopy.open-failed"].title
    loaded = _found(LSMOD_GDRDRV + SANITY_OPEN)
    assert "gdrdrv is loaded" in loaded["gdrcopy.open-failed"].title
    assert "module.nvidia-uvm-missing" not in loaded  # a grep of lsmod hides nothing it names
    absent = _found("$ lsmod | grep nvidia\nnvidia 56463360 120 nvidia_uvm,nvidia_modeset\n"
                    "nvidia_uvm 1437696 4\n" + SANITY_OPEN)
    assert "not loaded" in absent["gdrcopy.open-failed"].title


def test_pin_failures_are_a_software_mismatch_named_for_the_driver() -> None:
    f = _found(SANITY_PIN)["gdrcopy.pin-failed"]
    assert (f.severity, f.action, f.blame) == (Severity.WARNING, Action.FIX_SOFTWARE, Blame.NODE)
    assert "2.4.2" in f.step
    version = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  560.35.03  Fri Aug 16 21:39:15 "
               "UTC 2024\n")
    with_driver = run(gdrcopy=SANITY_PIN, proc_driver_nvidia_version=version).findings
    [f] = [x for x in with_driver if x.id == "gdrcopy.pin-failed"]
    assert "This driver is R560" in f.explanation


def test_module_rows_stay_the_module_listings() -> None:
    names = [name for name, _ in detect(LSMOD_GDRDRV + SANITY_OPEN)]
    assert names == ["proc_modules", "gdrcopy"]


def test_text_without_gdrcopy_lines_is_refused() -> None:
    with pytest.raises(ParseError):
        parse_gdrcopy("Running suite(s): Foo\n100%: Checks: 3, Failures: 0, Errors: 0\n")
