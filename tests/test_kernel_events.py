"""Tests for gputriage.logscan.events."""
# ruff: noqa: E501  (fixtures keep real line lengths)

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gputriage.logscan.events import iter_driver_events, scan_driver_events


def kinds(events):
    return [e.kind for e in events]


def only(events, kind):
    return [e for e in events if e.kind == kind]


# --- corpus ------------------------------------------------------------------------------

def test_all_category_4_samples_scan(corpus):
    samples = corpus.category("4")
    assert samples
    for s in samples:
        events = scan_driver_events(s.text())
        assert isinstance(events, list), s.name


def _mismatch(corpus, name):
    events = only(scan_driver_events(corpus.sample(name).text()), "api-mismatch")
    assert events, name
    return events


def test_api_mismatch_dmesg_continuation(corpus):
    (ev,) = _mismatch(corpus, "dalle104")
    assert ev.details == {"client_version": "515.48.07", "kernel_version": "510.73.05"}
    assert ev.timestamp == "7386.259769"
    assert ev.line.count("\n") == 3 and "same version" in ev.line


def test_api_mismatch_rsyslog_012(corpus):
    (ev,) = _mismatch(corpus, "stackhpc287")
    assert ev.details["client_version"] == "535.54.03"
    assert ev.details["kernel_version"] == "530.30.02"
    assert ev.timestamp == "Jun 30 11:07:05"
    assert "#012" not in ev.line and ev.line.count("\n") == 3


def test_api_mismatch_named_client(corpus):
    (ev,) = _mismatch(corpus, "nvidiaall394")
    assert ev.details["client_version"] == "595.84"
    assert ev.details["kernel_version"] == "595.80"
    assert ev.details["client"] == "kwin_wayland"
    assert ev.details["client_pid"] == "1005"


def test_bazzite_mismatch_firmware_rminit(corpus):
    events = scan_driver_events(corpus.sample("bazzite2668").text())
    mism = only(events, "api-mismatch")
    assert len(mism) == 3
    assert all(e.details["client_version"] == "570.153.02"
               and e.details["kernel_version"] == "570.144" for e in mism)
    fw = only(events, "gsp-firmware-missing")
    assert fw and fw[0].bus_id == "0000:07:00.0"
    assert fw[0].details["file"] == "nvidia/570.144/gsp_ga10x.bin"
    assert fw[0].details["driver_version"] == "570.144"
    assert any(e.details.get("function") == "RmFetchGspRmImages" for e in fw)
    (rm,) = only(events, "rm-init-adapter-failed")
    assert rm.details["code"] == "0x61:0x56:1770" and rm.bus_id == "0000:07:00.0"


def test_fallen_off_bus_multiline(corpus):
    (ev,) = only(scan_driver_events(corpus.sample("nvsentinel155").text()), "fallen-off-bus")
    assert ev.bus_id == "0000:b3:00.0" and ev.details["pci_id"] == "10de:26b5"
    assert ev.line.count("\n") == 2


def test_fallen_off_bus_nolebase(corpus):
    syslog = scan_driver_events(corpus.sample("nolebase-h100-syslog").text())
    (ev,) = only(syslog, "fallen-off-bus")
    assert ev.bus_id == "0000:5d:00.0" and ev.timestamp == "Jan  3 07:39:45"
    assert ev.line.count("\n") == 2
    assert only(syslog, "gsp-firmware-missing")
    xid79 = scan_driver_events(corpus.sample("nolebase-h100-xid79").text())
    assert {e.bus_id for e in only(xid79, "fallen-off-bus")} == {"0000:5d:00.0"}
    (x,) = only(xid79, "xid")
    assert x.details["code"] == "79" and x.bus_id == "0000:5d:00.0"
    assert "fallen off the bus" in x.details["message"]


def test_no_adapter_probed(corpus):
    events = scan_driver_events(corpus.sample("mattshma133").text())
    assert kinds(events) == ["no-adapter-probed"]


def test_talos_format(corpus):
    events = scan_driver_events(corpus.sample("vllm40652-talos").text())
    xids = only(events, "xid")
    assert xids and xids[0].timestamp == "2026-04-22T21:26:20.599488292Z"
    assert {e.details["code"] for e in xids} >= {"45", "74", "154"}


# --- hand-written formats ---------------------------------------------------------------

JOURNAL_ISO = """\
2024-05-01T10:00:00+0000 gpu-7 kernel: NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  550.54.14
2024-05-01T10:00:01+0000 gpu-7 kernel: NVRM: Xid (PCI:0000:18:00): 94, pid=4242, name=python3, Contained: CE User Channel (0x9). RST: No, D-RST: No
2024-05-01T10:00:02+0000 gpu-7 kernel: NVRM: GPU 0000:18:00.0: RmInitAdapter failed! (0x22:0x56:894)
"""

DMESG_T = """\
[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU.
[Fri Aug 30 11:43:10 2024] NVRM: No NVIDIA graphics adapter probed!
"""

QUOTED = """\
> [ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0
>                NVRM: (PCI ID: 10de:26b5) installed in this system has
>                NVRM: fallen off the bus and is not responding to commands.
"""

MODULE_FAILURES = """\
modprobe: ERROR: could not insert 'nvidia': Key was rejected by service
2025-08-16T00:03:04.070671-04:00 localhost (udev-worker)[106246]: nvidia: Process '/sbin/modprobe nvidia-drm' failed with exit code 1.
[    5.100000] nvidia: Unknown symbol drm_gem_object_free (err -2)
"""


def test_journal_short_iso():
    load, *events = scan_driver_events(JOURNAL_ISO)
    assert load.kind == "driver-load" and load.details["driver_version"] == "550.54.14"
    assert kinds(events) == ["xid", "rm-init-adapter-failed"]
    x = events[0]
    assert x.timestamp == "2024-05-01T10:00:01+0000" and x.bus_id == "0000:18:00.0"
    assert x.details == {"code": "94", "pid": "4242", "process": "python3",
                         "message": "Contained: CE User Channel (0x9). RST: No, D-RST: No"}
    assert events[1].details["code"] == "0x22:0x56:894"


def test_dmesg_t():
    events = scan_driver_events(DMESG_T)
    assert kinds(events) == ["xid", "no-adapter-probed"]
    assert events[0].timestamp == "Fri Aug 30 11:43:09 2024"
    assert events[0].details["pid"] == "<unknown>"


def test_markdown_quote():
    (ev,) = scan_driver_events(QUOTED)
    assert ev.kind == "fallen-off-bus" and ev.bus_id == "0000:b3:00.0"
    assert ev.timestamp == "1843.308145"


def test_single_line_fallen_off():
    (ev,) = scan_driver_events("NVRM: The NVIDIA GPU 0000:3b:00.0 (PCI ID: 10de:20b0) installed "
                               "in this system has fallen off the bus and is not responding to "
                               "commands.\n")
    assert ev.bus_id == "0000:3b:00.0"


def test_unsupported_gpu_is_not_fallen_off():
    text = ("[ 3.1] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1c82)\n"
            "        NVRM: installed in this system is not supported by the\n"
            "        NVRM: NVIDIA 550.54.14 driver release.\n")
    assert scan_driver_events(text) == []


def test_module_load_failures():
    events = scan_driver_events(MODULE_FAILURES)
    assert kinds(events) == ["module-load-failed"] * 3
    assert events[0].details == {"module": "nvidia", "reason": "Key was rejected by service"}
    assert events[1].details == {"module": "nvidia-drm", "code": "1"}
    assert events[2].details["module"] == "nvidia" and events[2].timestamp == "5.100000"


def test_truncated_mismatch_and_following_head():
    text = ("[ 1.0] NVRM: API mismatch: the client has the version 550.54.14, but\n"
            "[ 2.0] NVRM: API mismatch: the client has the version 550.54.14, but\n"
            "        NVRM: this kernel module has the version 535.161.07.  Please\n"
            "        NVRM: make sure that this kernel module and all NVIDIA driver\n"
            "        NVRM: components have the same version.\n")
    events = scan_driver_events(text)
    assert kinds(events) == ["api-mismatch", "api-mismatch"]
    assert events[0].details == {"client_version": "550.54.14"}
    assert events[1].details["kernel_version"] == "535.161.07"
    assert events[1].timestamp == "2.0"


def test_empty_and_unrelated():
    assert scan_driver_events("") == []
    assert scan_driver_events("just some text\nwith lines\n") == []


def test_iter_streams_from_iterable():
    gen = iter_driver_events(iter(DMESG_T.splitlines(keepends=True)))
    assert next(gen).kind == "xid"


def test_pathological_lines_among_many_ordinary_ones():
    """Lines built to make a backtracking pattern explode (bounded quantifiers keep the
    scan linear; benchmarks/log_scan.py measures its speed)."""
    filler = "[ 1.000000] usb 1-1: new high-speed USB device number 2 using xhci_hcd\n"
    nasty = "NVRM: Xid (PCI:" + "(" * 5000 + "\n" + "> " * 4000 + "\n" + "#012" * 3000 + "\n"
    text = filler * 100_000 + nasty + DMESG_T
    events = scan_driver_events(text)
    assert kinds(events) == ["xid", "no-adapter-probed"]


@pytest.mark.parametrize("prefix", ["", "Jun 30 11:07:05 gpu-0 kernel: ", "[ 12.5] ",
                                    "10.0.0.1: kern: warning: [2024-01-01T00:00:00Z]: "])
def test_prefix_forms_give_same_event(prefix):
    (ev,) = scan_driver_events(prefix + "NVRM: GPU 0000:09:00.0: RmInitAdapter failed! "
                               "(0x22:0x56:894)\n")
    assert ev.bus_id == "0000:09:00.0" and ev.details["code"] == "0x22:0x56:894"


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=800))
def test_property_arbitrary_bytes(data):
    text = data.decode("utf-8", errors="replace")
    assert isinstance(scan_driver_events(text), list)


_fragments = st.sampled_from([
    "NVRM: ", "API mismatch: the client ", "has the version 1.2, but ", "this kernel module has ",
    "the version 3.4.", "The NVIDIA GPU 0000:01:00.0 ", "fallen off the bus", "Xid (PCI:",
    "0000:01:00): 79, ", "pid=", "name=", "RmInitAdapter failed! (", "0x1:0x2:3)", "#012",
    "\n", "\n        ", "[ 1.5] ", "> ", "Direct firmware load for nvidia/", "kernel: ",
    "could not insert 'nvidia", "'", ",", " ",
])


@settings(max_examples=400, deadline=None)
@given(st.lists(_fragments | st.text(max_size=5), max_size=40))
def test_property_structured_noise(parts):
    assert isinstance(scan_driver_events("".join(parts)), list)


@pytest.mark.parametrize("prefix", ["kern  :warn  : [  12.500000] ",
                                    "[   12.500000] gpu-7 kernel: ",
                                    "2024-05-01T10:00:00,123456+00:00 "])
def test_more_prefixes_keep_continuations(prefix):
    text = (prefix + "NVRM: API mismatch: the client has the version 550.54.14, but\n"
            "               NVRM: this kernel module has the version 535.161.07.  Please\n"
            "               NVRM: make sure that this kernel module and all NVIDIA driver\n"
            "               NVRM: components have the same version.\n"
            + prefix + "NVRM: No NVIDIA graphics adapter probed!\n")
    events = scan_driver_events(text)
    assert kinds(events) == ["api-mismatch", "no-adapter-probed"]
    assert events[0].details == {"client_version": "550.54.14", "kernel_version": "535.161.07"}
    assert events[0].timestamp is not None and events[0].line.count("\n") == 3


def test_module_load_failed_from_corpus(corpus):
    events = only(scan_driver_events(corpus.sample("ollama11932").text()), "module-load-failed")
    assert [e.details["module"] for e in events] == ["nvidia-drm", "nvidia-uvm"]
    assert events[0].timestamp == "2025-08-16T00:03:04.070671-04:00"


# --- the extractor on its own (streaming, no reader) --------------------------------------

def test_iter_gives_line_numbers_and_joins_sxid_continuations():
    lines = [
        "[ 10.0] usb 1-1: new device\n",
        "[ 11.0] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Non-fatal, Link 12 RX Short Error Rate\n",
        "[ 11.0] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Severity 0 Engine instance 12 Sub-engine instance 00\n",
        "[ 11.0] nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20009, Data {0x00000000, 0x00000001}\n",
        "[ 12.0] NVRM: Xid (PCI:0000:18:00): 45, pid=7, name=python, Ch 00000010 caused by previous Xid 74\n",
    ]
    sxid, xid = iter_driver_events(lines)
    assert (sxid.kind, sxid.lineno, sxid.bus_id) == ("sxid", 2, "0000:06:00.0")
    assert sxid.details["severity"] == "Non-fatal" and sxid.details["engine_instance"] == "12"
    assert sxid.line.count("\n") == 2
    assert (xid.lineno, xid.details["caused_by"], xid.details["channel"]) == (5, "74", "00000010")
    assert xid.time is None and xid.boot == 0


def test_hung_task_trace_outside_window_is_not_nvidia():
    head = "[ 5.0] INFO: task python:42 blocked for more than 122 seconds.\n"
    filler = ["[ 5.0]  schedule+0x69/0x110\n"] * 31
    (ev,) = scan_driver_events(head + "".join(filler) + "[ 5.0]  nv_wait+0x1/0x2 [nvidia]\n")
    assert ev.details["in_nvidia"] == "no"
    (ev,) = scan_driver_events(head + "".join(filler[:5]) + "[ 5.0]  nv_wait+0x1/0x2 [nvidia]\n")
    assert ev.details["in_nvidia"] == "yes"


def test_xid_with_other_pci_domain_and_double_spaces():
    (ev,) = scan_driver_events("NVRM: Xid (PCI:0018:01:00): 144, NETIR_LINK_EVT  Nonfatal   XC0 i0 Link 03 (0x02300100 0x0 0x0 0x0 0x0 0x0)\n")
    assert ev.bus_id == "0018:01:00.0"
    assert (ev.details["link"], ev.details["severity"], ev.details["subcode"]) == ("3", "Nonfatal", "35")


def _split_prefix_unguarded(raw: str):
    """split_prefix as it was before its cheap pre-tests: every pattern tried."""
    from gputriage.parsers import kernel_patterns as kp

    text = raw.strip()
    m = kp.QUOTE.match(text)
    if m:
        text = text[m.end():].lstrip()
    stamps, tags = [], []
    for name, pattern, _ in kp.PREFIXES:
        m = pattern.match(text)
        if m:
            ts = m.groupdict().get("ts")
            if ts:
                stamps.append(ts.strip())
            tags.append(name)
            text = text[m.end():]
    return tuple(stamps), text.strip(), tuple(tags)


def test_split_prefix_pretests_never_change_the_split(corpus):
    from gputriage.parsers.kernel_patterns import split_prefix

    lines = [ln for s in corpus.category("4") + corpus.category("2") + corpus.category("8")
             for ln in s.text().splitlines()]
    lines += ["> > [  12.5] NVRM: x", "<4>[ 1.0] kernel: y", "kern  :warn  : [ 3.1] z",
              "node1: kern:    warn: [2024-08-30T10:00:00.1Z]: NVRM: q", "kernel:NVRM: r"]
    assert len(lines) > 500
    for ln in lines:
        assert split_prefix(ln) == _split_prefix_unguarded(ln), ln


@given(st.text(alphabet=st.sampled_from(list("<>[]:. 0123456789Tkernl-aZJM\t")), max_size=60))
@settings(max_examples=400, deadline=None)
def test_split_prefix_pretests_on_generated_lines(line):
    from gputriage.parsers.kernel_patterns import split_prefix

    assert split_prefix(line) == _split_prefix_unguarded(line)


# pieces of syslog / journalctl lines, near misses included: split_prefix reads a stamp and
# a host with one pattern where no earlier row can apply (``_syslog_host``)
_LEADS = st.sampled_from(["2024-08-30T03:53:20", "2024-08-30 03:53:20", "Dec  6 19:25:33",
                          "Dec 16 19:25:33", "2024-08-30T3:53:20", "Dec 6 19:25:33", "Mon Dec  6 "
                          "19:25:33 2024", "Mar  1", "<4>", "kern  :warn  : ", "node1: kern:  warn: "
                          "[12.5]: ", "2024-08-30T03:53:20.1234567890"])
_ZONES = st.sampled_from(["", ".123456", "+0000", ",5", "-05:30", "Z", "+05", "x"])
_GAPS = st.sampled_from([" ", "  ", "\t", "     ", ""])
_HOSTS = st.sampled_from(["gpu-node-17", "kernel:", "h:kern:", "node-1 other", ""])
_TAGS = st.sampled_from([" kernel: ", " kernel:", " kernel:  ", "kernel: ", " kern: "])
_MESSAGES = st.sampled_from(["kernel: ", "[ 12.5] ", "node kernel: ", "[Sat Mar  1 10:00:01 "
                             "2026] ", "NVRM: Xid", "x ", "\u0663", " "])
_SYSLOG_LINES = st.builds(lambda *parts: "".join(parts[:5]) + "".join(parts[5]), _LEADS,
                          _ZONES, _GAPS, _HOSTS, _TAGS, st.lists(_MESSAGES, max_size=3))


@given(_SYSLOG_LINES)
@example("2024-08-30T03:53:20+0000 gpu-node-17 kernel: kernel: [ 5.1] n kernel: x")
@example("Dec  6 19:25:33 node kernel: [Sat Mar  1 10:00:01 2026] NVRM: x")
@settings(max_examples=800, deadline=None)
def test_split_prefix_syslog_host_pattern_on_generated_lines(line):
    from gputriage.parsers.kernel_patterns import split_prefix

    assert split_prefix(line) == _split_prefix_unguarded(line)
