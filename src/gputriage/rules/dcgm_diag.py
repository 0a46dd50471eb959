"""Rules on DCGM's diagnostic (``dcgmi diag``, ``nvvs.log``): what a failed, warned or
skipped test says of the GPUs, and when it says nothing of them because DCGM itself
could not run it (its installation, how it was launched). The helpers both areas read
are here; what kept the run from judging the GPUs (a prerequisite, MIG, a run cut
short) and a run that passed are :mod:`gputriage.rules.dcgm_diag_setup`'s.

One cause is one finding: a GPU's failed tests make one finding with their warnings
(thermal violations name the cooling), the tests skipped because persistence mode is
off are that finding's consequence, CUDA's "system not yet initialized" on every GPU is
the NVLink fabric, not eight broken GPUs, and DCGM's own errors are never a GPU fault.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Iterator

from gputriage.facts.dcgm import DcgmVersion
from gputriage.facts.pcie import PcieLink
from gputriage.knowledge.dcgm_false_alarms import FalseAlarm
from gputriage.model import (
    NODE,
    Action,
    Blame,
    Evidence,
    Finding,
    Scope,
    Severity,
    evidence,
    gpu_scope,
    index_ranges,
)
from gputriage.parsers.dcgmi_diag import MIG_REFUSAL
from gputriage.parsers.dcgmi_diag_model import DiagMessage, DiagReport, DiagTest
from gputriage.parsers.nvlink import NvlinkStatus
from gputriage.parsers.nvvs_log import NvvsLog
from gputriage.rules.base import finding, rule
from gputriage.rules.dcgm_diag_bugs import (
    KNOWN_FALSE_ALARM,
    dcgm_release,
    false_alarm_finding,
    split_false_alarms,
    with_notes,
)
from gputriage.rules.doubts import DIAG_NO_VERDICT, MIG_BLOCKED, NO_RESULT

__all__ = ["DOC", "HW_DEPLOYMENT", "MIG_BLOCKED", "NO_RESULT", "NO_VERDICT", "cascade",
           "diag_evidence", "diag_kind", "gpu_list", "is_deployment", "message_kind"]

# NO_RESULT: every test skipped, or the output cut short: verdict unknown; MIG_BLOCKED:
# NVVS refused to run on MIG-enabled GPUs; NO_VERDICT: either (nothing said of the GPUs)
NO_VERDICT = DIAG_NO_VERDICT
POWER_MARGIN = 0.05  # a targeted power miss within 5 % of the target: marginal
DOC = "https://docs.nvidia.com/datacenter/dcgm/latest/user-guide/dcgm-diagnostics.html"

# DCGM error ids (dcgm_errors.h) and the kind of cause each is; "hardware": the GPU's own
# memory or InfoROM, which DCGM 4.x reports from its deployment ("software") test
_CODES = {29: "persistence", 40: "thermal", 41: "thermal", 44: "internal", 63: "power",
          108: "cuda-not-ready", **dict.fromkeys((4, 6, 7, 8, 9, 80, 81, 83, 84, 85),
                                                 "hardware")}
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (k, re.compile(p, re.IGNORECASE)) for k, p in (
    ("cuda-not-ready", r"system not yet initiali[sz]ed|cudaErrorSystemNotReady|"
                       r"SYSTEM_NOT_READY"),
    # CUDA error 46 (cudaErrorDevicesUnavailable): a compute mode that admits no more
    # processes while one holds the GPU; the test could not start, the GPU is not judged
    ("busy", r"busy or unavailable|DEVICES?_UNAVAILABLE|cudaErrorDevicesUnavailable"),
    ("mig", MIG_REFUSAL.pattern),
    ("missing-test", r"requested test .{1,80} was not found among possible test choices"),
    ("affinity", r"numa_sched_setaffinity|sched_setaffinity\S* failed"),
    ("unparsable", r"Output of child process .{0,40}couldn'?t be parsed"),
    ("plugins", r"Could not exec '[^']*plugins/|Unable to change to the plugin dir|"
                r"Cannot load plugins|Couldn'?t load a definition for|undefined symbol"),
    ("config", r"Could not read package diag config|diag-skus\.yaml|"
               r"datac[ae]nter-gpu-manager-config"),
    ("unsupported", r"unsupported driver combination|driver .{0,40}not supported"),
    ("mismatch", r"version mismatch|versions? (?:do|does) not match|hostengine version"),
    ("internal", r"internal error during the test|\binternal error\b"),
    ("persistence", r"Persistence mode for GPU [0-9]+ is (?:currently )?disabled"),
    ("thermal", r"Thermal violations"),
    ("power", r"Max power of [0-9.]{1,20} did not reach desired power minimum"),
    # DCGM_FR_ROW_REMAP_FAILURE, _UNCORRECTABLE_ROW_REMAP, _PENDING_ROW_REMAP,
    # _PENDING_PAGE_RETIREMENTS, _RETIRED_PAGES_LIMIT, _RETIRED_PAGES_DBE_LIMIT,
    # _DBE_PENDING_PAGE_RETIREMENTS, _CORRUPT_INFOROM, _VOLATILE_DBE_DETECTED, _UNCONTAINED
    ("hardware", r"row remapping failed|uncorrectable memory errors and [0-9]{1,9} rows were "
                 r"remapped|row remappings are pending|pending retired page|retired pages "
                 r"have been detected|retired pages due to DBEs|Pending page retirements "
                 r"together with a DBE|corrupt InfoROM|volatile double-bit ECC error|"
                 r"uncontained error"),
))
INSTALL = frozenset({"plugins", "missing-test", "config", "unsupported", "mismatch"})
RUN = frozenset({"affinity", "unparsable", "internal"})
NOT_HARDWARE = INSTALL | RUN | {"cuda-not-ready", "persistence", "mig", "busy"}
HW_DEPLOYMENT = frozenset({"page retirement/row remap", "page retirement", "inforom"})
_POWER = re.compile(r"Max power of (?P<got>[0-9]{1,6}(?:\.[0-9]{1,6})?) did not reach desired "
                    r"power minimum (?:\S{1,60} )?of (?P<want>[0-9]{1,6}(?:\s?\.\s?[0-9]{1,6})?)")
_SLURM = re.compile(r"\b(?:srun|sbatch|salloc)\b")


def message_kind(text: str, code: int | None = None) -> str | None:
    """The kind of cause a DCGM message (or an nvvs.log record) speaks of, if known."""
    for kind, pat in _KINDS:
        if pat.search(text):
            return kind
    return _CODES.get(code) if code is not None else None


def diag_kind(m: DiagMessage) -> str | None:
    return message_kind(m.text, m.code)


def is_deployment(t: DiagTest) -> bool:
    return (t.category or "").lower() == "deployment" or t.key in (
        "denylist", "blacklist", "nvml library", "cuda main library", "software",
        "permissions and os blocks", "persistence mode", "environment variables",
        "graphics processes", *HW_DEPLOYMENT)


def gpu_list(gpus: Iterable[int]) -> str:
    g = set(gpus)
    return ("GPU " if len(g) == 1 else "GPUs ") + index_ranges(g)


# what a test's finding is about: a GPU index, other entities ("CPU0, CPU1"), or None
Target = int | str | None


def _targets(t: DiagTest, report: DiagReport) -> list[Target]:
    """The GPUs a failed (or warned) test names; all of them for "Fail - All"; the other
    entities (CPUs, switches, links) when it failed on those only; else None."""
    bad = t.gpus_with("fail") or t.gpus_with("warn")
    if bad:
        return list(bad)
    others = t.entities_with("fail") or t.entities_with("warn")
    if others:
        return [", ".join(others)]
    if t.all_gpus in ("fail", "warn") or (t.status in ("fail", "warn") and not t.gpus
                                          and not t.entities):
        named = {g for m in t.messages for g in m.gpus}
        every: list[Target] = [*(sorted(named) or range(len(report.device_ids)))]
        return every or [None]
    return [None]


def _on(t: DiagTest, target: Target) -> list[DiagMessage]:
    """The test's warnings and errors about one GPU or entity (or about none)."""
    if isinstance(target, str):
        names = target.split(", ")
        return [m for m in t.messages if m.kind != "info" and not m.gpus and (
            not m.entities or set(m.entities) & set(names))]
    return [m for m in t.messages if m.kind != "info" and not m.entities and (
        not m.gpus or target in m.gpus)]


def cascade(tests: list[DiagTest]) -> list[DiagTest]:
    """The deployment checks that failed one after the other from a software check to
    the last (at least three), none after the first saying a hardware fault of its own:
    older NVVS marks every check after a failed one as failed too, so the first is the
    cause and the others its echo. Empty when the failures are not such a run."""
    deploy = [t for t in tests if is_deployment(t)]
    first = next((i for i, t in enumerate(deploy) if t.status == "fail"), None)
    if first is None:
        return []
    run = deploy[first:]
    if (len(run) < 3 or run[0].key in HW_DEPLOYMENT
            or any(t.status != "fail" for t in run)
            or any(diag_kind(m) == "hardware" for t in run[1:] for m in t.messages)):
        return []
    return run


# --- hardware ---------------------------------------------------------------------------

@rule("dcgm.diag-hardware",
      produces=("dcgm.test-failed", "dcgm.pcie-failed", "dcgm.power-marginal",
                "dcgm.nvlink-down-without-nvlink", KNOWN_FALSE_ALARM))
def diag_hardware(dcgmi_diag: DiagReport,
                  pcie_links: list[PcieLink] | None = None,
                  nvlink: NvlinkStatus | None = None,
                  dcgm_version: DcgmVersion | None = None) -> Iterator[Finding]:
    """A hardware test DCGM failed on a GPU (memory, PCIe, stress, power, diagnostic,
    EUD, NVLink, row remap): one finding per GPU with the tests and their warnings; a
    PCIe failure names the GPU's degraded link; a targeted power miss of a few percent
    is marginal, not a fault. A failure of the shape of a DCGM bug fixed later is
    DCGM's on a release that has it (one finding per bug), and noted where the release
    is not shown."""
    release = dcgm_release(dcgmi_diag, dcgm_version)
    bugs: dict[FalseAlarm, list[tuple[Hashable, DiagTest]]] = {}
    for gpu, all_failed in _failed_per_target(dcgmi_diag).items():
        failed, notes = split_false_alarms(all_failed, dcgmi_diag,
                                           release.version if release else None, bugs, gpu)
        for f in _judged(gpu, failed, dcgmi_diag, pcie_links, nvlink):
            yield with_notes(f, notes)
    if release is not None:  # a failure is DCGM's only where its release is shown
        for alarm, hits in bugs.items():
            yield false_alarm_finding(alarm, hits, release)


def _judged(gpu: Target, failed: list[tuple[DiagTest, list[DiagMessage]]],
            dcgmi_diag: DiagReport, pcie_links: list[PcieLink] | None,
            nvlink: NvlinkStatus | None) -> Iterator[Finding]:
    """The findings of one GPU's (or other entity's) failed hardware tests."""
    if failed:
        pcie = [(t, m) for t, m in failed if t.key == "pcie"]
        power = [(t, m) for t, m in failed if t.key == "targeted power" and _marginal(m)]
        rest = [x for x in failed if x not in pcie and x not in power]
        if isinstance(gpu, str):
            yield _other_entities(gpu, failed, dcgmi_diag)
            return
        if rest:
            yield _hardware(gpu, rest, dcgmi_diag)
        if pcie and (phantom := _nvlink_down_only(gpu, pcie[0][0], pcie[0][1], nvlink)):
            yield phantom
        elif pcie:
            yield _pcie(gpu, pcie[0][0], pcie[0][1], pcie_links)
        if power and not rest:
            yield _power(gpu, power[0][0], power[0][1])


def _failed_per_target(report: DiagReport) -> dict[Target, list[tuple[DiagTest,
                                                                      list[DiagMessage]]]]:
    """The failed or warned hardware tests of each GPU (or other entity) with their
    messages on it; tests that failed for DCGM's, CUDA's or the setup's reasons left out."""
    per_gpu: dict[Target, list[tuple[DiagTest, list[DiagMessage]]]] = {}
    echoes = cascade(report.tests)[1:]
    for t in report.tests:
        if t.status not in ("fail", "warn") or t in echoes:
            continue
        # a deployment check says nothing of the hardware, unless what it found is the
        # GPU's memory or InfoROM (DCGM 4.x's software test)
        only_hw = is_deployment(t) and t.key not in HW_DEPLOYMENT
        if only_hw and not any(diag_kind(m) == "hardware" for m in t.messages):
            continue
        for gpu in _targets(t, report):
            msgs = _on(t, gpu)
            if only_hw:
                msgs = [m for m in msgs if diag_kind(m) == "hardware"]
                if not msgs:
                    continue
            if msgs and {diag_kind(m) for m in msgs} <= NOT_HARDWARE:
                continue  # DCGM's, CUDA's or the setup's failure: other rules say it
            per_gpu.setdefault(gpu, []).append((t, msgs))
    return per_gpu


def _marginal(msgs: list[DiagMessage]) -> tuple[float, float] | None:
    """(measured, required) watts when the power test missed by a few percent."""
    for m in msgs:
        if p := _POWER.search(m.text):
            got, want = float(p.group("got")), float(p.group("want").replace(" ", ""))
            if want > 0 and (want - got) / want <= POWER_MARGIN:
                return got, want
    return None


def _scope(gpu: int | None) -> Scope:
    return gpu_scope(None, gpu) if gpu is not None else NODE


def diag_evidence(tests: Iterable[DiagTest]) -> list[Evidence]:
    return [evidence("dcgmi_diag", [ln for t in tests for ln in t.lines], limit=24)]


def _hardware(gpu: int | None, failed: list[tuple[DiagTest, list[DiagMessage]]],
              report: DiagReport) -> Finding:
    names = ", ".join(t.name for t, _ in failed)
    who = f"GPU {gpu}" if gpu is not None else "the GPUs"
    # a test whose own result is Warn warned, whatever word 4.x prints per GPU ("Fail")
    hard = any(t.status != "warn" and (
        (gpu is not None and t.gpus.get(gpu) == "fail") or t.all_gpus == "fail" or
        (t.status == "fail" and not t.gpus and t.all_gpus is None)) for t, _ in failed)
    thermal = [m for _, msgs in failed for m in msgs if diag_kind(m) == "thermal"]
    said = [m.text.rstrip(".") for _, msgs in failed for m in msgs if diag_kind(m) != "thermal"][:2]
    why = (f" DCGM says: {' / '.join(said)}." if said else "")
    fault = ("a fault of the GPU's memory or InfoROM, found before any test ran" if all(
        is_deployment(t) for t, _ in failed) else "a hardware fault under load")
    cooling = (f" It also logged thermal violations ({thermal[0].text.split(' Verify')[0]}): "
               f"check the cooling of {who} (fans, airflow, the thermal interface) as part of "
               "the repair." if thermal else "")
    level = f" (level {report.level})" if report.level else ""
    if hard:
        return finding(
            "dcgm.test-failed", Severity.CRITICAL, f"DCGM diag{level}: {names} failed on {who}",
            f"DCGM's {names} test failed on {who}: {fault}.{why}{cooling} "
            "Drain the node, rerun the diagnostic on it (dcgmi diag -r 3) to confirm, and "
            "repair or RMA the GPU if it fails again.", Action.DRAIN_AND_REPAIR, Blame.NODE,
            _scope(gpu), diag_evidence(t for t, _ in failed), references=(DOC,))
    return finding(
        "dcgm.test-failed", Severity.WARNING, f"DCGM diag{level}: {names} warned on {who}",
        f"DCGM's {names} test passed with a warning on {who}.{why}{cooling} The GPU still "
        "works; look at it at the next maintenance window and rerun the diagnostic.",
        Action.PLAN_REPAIR, Blame.NODE, _scope(gpu), diag_evidence(t for t, _ in failed),
        references=(DOC,))


def _other_entities(who: str, failed: list[tuple[DiagTest, list[DiagMessage]]],
                    report: DiagReport) -> Finding:
    """A test that failed on CPUs, switches or links only: the node's, never a GPU's."""
    names = ", ".join(t.name for t, _ in failed)
    said = [m.text.rstrip(".") for _, msgs in failed for m in msgs][:2]
    why = f" DCGM says: {' / '.join(said)}." if said else ""
    level = f" (level {report.level})" if report.level else ""
    hard = any(t.status != "warn" and any(t.entities.get(e) == "fail" for e in who.split(", "))
               for t, _ in failed)
    verb = "failed" if hard else "warned"
    title = f"DCGM diag{level}: {names} {verb} on {who} (not a GPU)"
    text = (f"DCGM's {names} test {verb} on {who}, not on a GPU: the GPUs are not "
            f"implicated by it.{why} ")
    if hard:
        return finding(
            "dcgm.test-failed", Severity.CRITICAL, title, text + "Drain the node, rerun the "
            f"diagnostic to confirm, and have {who} (or what it sits on: its memory, "
            "board or cabling) repaired.", Action.DRAIN_AND_REPAIR, Blame.NODE, NODE,
            diag_evidence(t for t, _ in failed), references=(DOC,))
    return finding(
        "dcgm.test-failed", Severity.WARNING, title, text + "Look at it at the next "
        "maintenance window and rerun the diagnostic.", Action.PLAN_REPAIR, Blame.NODE,
        NODE, diag_evidence(t for t, _ in failed), references=(DOC,))


def _link_of(gpu: int | None, links: list[PcieLink] | None) -> PcieLink | None:
    """The GPU's link when it trained narrower or slower than it can."""
    for link in links or ():
        if link.kind == "gpu" and gpu is not None and link.index == gpu and (
                link.downgraded or (link.cur_width and link.max_width
                                    and link.cur_width < link.max_width)):
            return link
    return None


_NVLINK_DOWN = re.compile(r"NvLink link [0-9]+ is currently down", re.IGNORECASE)
# nvidia-smi nvlink -s on a GPU that has no NVLink at all
_NO_NVLINK = re.compile(r"does not (?:have|support)|not supported", re.IGNORECASE)
# what DCGM prints around each such message: "GPU 0GPU 0's ... Run a field diagnostic ..."
_BOILERPLATE = re.compile(r"GPU [0-9]+|'s\b|Run a field diagnostic on the GPU\.?|[\s,.;]",
                          re.IGNORECASE)


def _nvlink_down_only(gpu: int | None, t: DiagTest, msgs: list[DiagMessage],
                      nvlink: NvlinkStatus | None) -> Finding | None:
    """A PCIe test failed only on "NvLink link N is currently down": on a GPU without
    NVLink, some DCGM versions report every link down (NVIDIA/DCGM#49), which is no
    fault; None when other messages say more, or nvidia-smi shows the links exist."""
    text = " ".join(" ".join(m.text.split()) for m in msgs)
    rest = _BOILERPLATE.sub("", _NVLINK_DOWN.sub("", text))
    if not _NVLINK_DOWN.search(text) or rest:
        return None  # the test said more than that links are down
    who = f"GPU {gpu}" if gpu is not None else "the GPUs"
    listed = nvlink.gpus if nvlink else []
    seen = [g for g in listed if gpu is None or g.index == gpu]  # "All": every GPU
    if any(g.links for g in seen):
        return None  # nvidia-smi lists the GPU's links: they exist, so down is a fault
    ev = diag_evidence([t])
    if seen and all(any(_NO_NVLINK.search(m) for m in g.messages) for g in seen):
        ev.append(evidence("nvidia_smi_nvlink_status",
                           [ln for g in seen[:2] for ln in (g.header, *g.messages[:1])]))
        return finding(
            "dcgm.nvlink-down-without-nvlink", Severity.INFO,
            f"DCGM diag: PCIe test failed on {who} only for NVLink links it does not have",
            f"DCGM's PCIe test failed on {who} only because it found its NVLink links down, "
            "and nvidia-smi lists no NVLink link on it: the test checked NVLink on a GPU "
            "without it, a known false alarm of DCGM (NVIDIA/DCGM#49), not a GPU fault. "
            "Run a DCGM release that skips NVLink on such GPUs, or leave the NVLink check "
            "out of this node's diagnostic.", Action.FIX_CONFIG, Blame.CONFIG, _scope(gpu), ev,
            references=(DOC,))
    return finding(
        "dcgm.nvlink-down-without-nvlink", Severity.WARNING,
        f"DCGM diag: PCIe test failed on {who} only for NVLink links reported down",
        f"Every message of the failed PCIe test on {who} is an NVLink link reported down. "
        "On a GPU without NVLink (a PCIe card without a bridge) some DCGM versions report "
        "this for every link although nothing is wrong (NVIDIA/DCGM#49); on a GPU with "
        "NVLink (SXM, or a bridge fitted) the links are really down. The diagnostic alone "
        "cannot tell which: nvidia-smi nvlink -s says whether the GPU has links; drain only "
        "if it does and they are inactive.", Action.FIX_CONFIG, Blame.UNKNOWN, _scope(gpu), ev,
        references=(DOC,))


def _pcie(gpu: int | None, t: DiagTest, msgs: list[DiagMessage],
          links: list[PcieLink] | None) -> Finding:
    who = f"GPU {gpu}" if gpu is not None else "the GPUs"
    link = _link_of(gpu, links)
    said = f" DCGM says: {msgs[0].text}." if msgs else ""
    ev = diag_evidence([t])
    if link is not None:
        ev += [evidence(s, lines) for s, lines in link.evidence.items() if lines]
        return finding(
            "dcgm.pcie-failed", Severity.CRITICAL,
            f"DCGM diag: PCIe test failed on {who}, whose link runs x{link.cur_width or '?'} "
            f"of x{link.max_width or '?'}",
            f"DCGM's PCIe bandwidth test failed on {who}, and its link is trained below what "
            f"it supports ({link.label}): the narrow or slow link is why.{said} Drain the node "
            "and reseat the GPU, its riser and cable; the test must pass afterwards.",
            Action.DRAIN_AND_REPAIR, Blame.NODE, gpu_scope(link.bus_id or None, gpu, link.uuid),
            ev, references=(DOC,))
    return finding(
        "dcgm.pcie-failed", Severity.CRITICAL, f"DCGM diag: PCIe test failed on {who}",
        f"DCGM's PCIe test (bandwidth, latency, replays) failed on {who} without a DCGM "
        f"error: a link, riser or slot problem.{said} Drain the node, check the link "
        "(`gputriage check` on the node reads its width and speed, lspci -vv its LnkSta) "
        "and reseat or repair it.", Action.DRAIN_AND_REPAIR, Blame.NODE, _scope(gpu), ev,
        references=(DOC,))


def _power(gpu: int | None, t: DiagTest, msgs: list[DiagMessage]) -> Finding:
    got, want = _marginal(msgs) or (0.0, 0.0)
    who = f"GPU {gpu}" if gpu is not None else "a GPU"
    return finding(
        "dcgm.power-marginal", Severity.WARNING,
        f"DCGM diag: targeted power missed its target on {who} by {want - got:.1f} W",
        f"{who} reached {got:g} W where the test wanted {want:g} W: a miss of "
        f"{(want - got) / want * 100:.2g} %, which power capping, a lowered power limit or clocks "
        "held down explain more often than a failing board. Rerun the test and check the "
        "power limit and clocks (nvidia-smi -q -d POWER,PERFORMANCE); take the GPU out of "
        "service only if it fails again by more.", Action.FIX_CONFIG, Blame.UNKNOWN,
        _scope(gpu), diag_evidence([t]), references=(DOC,))


# --- DCGM itself --------------------------------------------------------------------------

@rule("dcgm.diag-tool", any_of=("dcgmi_diag", "nvvs_log"),
      produces=("dcgm.install-problem", "dcgm.internal-error"))
def diag_tool(dcgmi_diag: DiagReport | None = None,
              nvvs_log: NvvsLog | None = None) -> Iterator[Finding]:
    """DCGM could not run a test or the diagnostic itself: plugins or their CUDA
    support packages missing, the diag config missing, packages of different versions,
    an unsupported driver; or a plugin's output it could not read (libnuma's affinity
    error under a CPU-restricted Slurm job). Never a GPU fault."""
    found: dict[str, list[tuple[str, list[str], str]]] = {}  # kind -> (text, lines, source)
    if dcgmi_diag is not None:
        for t in dcgmi_diag.tests:
            for m in t.messages:
                if (k := diag_kind(m)) in INSTALL | RUN:
                    found.setdefault(k, []).append((m.text, [t.lines[0], *m.lines], "dcgmi_diag"))
        for m in dcgmi_diag.errors:
            k = diag_kind(m) or "returned"
            if k == "mig":
                continue  # not DCGM's fault: diag_setup says it
            found.setdefault(k if k in INSTALL | RUN else "returned", []).append(
                (m.text, m.lines, "dcgmi_diag"))
    for e in nvvs_log.problems if nvvs_log is not None else ():
        if (k := message_kind(e.text)) in INSTALL | RUN:
            found.setdefault(k, []).append((e.text, e.lines[:1], "nvvs_log"))
    install = {k: v for k, v in found.items() if k in INSTALL or k == "returned"}
    run = {k: v for k, v in found.items() if k in RUN}
    if install:
        yield _install(install, dcgmi_diag)
    if run:
        yield _run_problem(run, dcgmi_diag)


_WHAT = {"plugins": "plugins missing or not loadable",
         "missing-test": "the requested test is not among its plugins",
         "config": "its diag config missing",
         "unsupported": "the driver not supported", "mismatch": "versions that differ",
         "returned": "dcgmi diag returned an error"}


def _sources(items: Iterable[tuple[str, list[str], str]]) -> list[Evidence]:
    by: dict[str, list[str]] = {}
    for _, lines, src in items:
        by.setdefault(src, []).extend(lines)
    return [evidence(src, lines, limit=16) for src, lines in by.items()]


def _install(found: dict[str, list[tuple[str, list[str], str]]],
             report: DiagReport | None) -> Finding:
    what = ", ".join(_WHAT[k] for k in _WHAT if k in found)
    code = (f" (Return {report.return_code}: {report.return_text})"
            if report is not None and report.return_code is not None else "")
    texts = " ".join(t for items in found.values() for t, _, _ in items)
    cuda = sorted(set(re.findall(r"plugins/(cuda[0-9]+)/", texts)))
    pkgs = (f" The {'/'.join(cuda)} plugins are missing: install the DCGM support packages "
            "for every CUDA major version the driver supports (datacenter-gpu-manager-4-"
            f"{cuda[0]} and the others)." if cuda else "")
    if "missing-test" in found:
        pkgs += (" dcgmi diag has no test of the name asked for: its plugin is not installed "
                 "(a DCGM built from source lacks the plugins NVIDIA does not publish, such "
                 "as memory bandwidth; a package of the CUDA support plugins is missing) or "
                 "the name is not one this release knows. Nothing was tested.")
    return finding(
        "dcgm.install-problem", Severity.WARNING,
        f"DCGM's installation cannot run its diagnostic: {what}{code}",
        "DCGM itself failed, not the GPUs: its tests did not run (or ran without what they "
        f"need), so their Fail or Skip says nothing of the hardware.{pkgs} Install one "
        "consistent DCGM version (dcgmi, nv-hostengine, the plugins and "
        "datacenter-gpu-manager-config with diag-skus.yaml), restart nvidia-dcgm, and rerun "
        "the diagnostic.", Action.FIX_SOFTWARE, Blame.CONFIG,
        evidence=_sources(x for items in found.values() for x in items), references=(DOC,))


def _run_problem(found: dict[str, list[tuple[str, list[str], str]]],
                 report: DiagReport | None) -> Finding:
    tests = [t for t in (report.tests if report else []) if t.status == "fail"
             and any(diag_kind(m) in RUN for m in t.messages)]
    passed = [t for t in tests if t.gpus and set(t.gpus.values()) == {"pass"}]
    names = ", ".join(t.name for t in tests) or "a test"
    gpus = (f" Every GPU passed it ({gpu_list(passed[0].gpus)}): the Fail is DCGM's, "
            "not the hardware's." if passed else "")
    slurm = "affinity" in found or bool(report and report.command and
                                        _SLURM.search(report.command))
    if slurm:
        blame, how = Blame.JOB_CONFIG, (
            " The plugin's helper printed libnuma's affinity error "
            "(numa_sched_setaffinity failed) before its JSON: the diagnostic ran inside a "
            "job confined to part of the node's CPUs (a non-exclusive Slurm allocation). "
            "Run it on the whole node: sbatch/srun --exclusive, or outside Slurm.")
    else:
        blame, how = Blame.UNKNOWN, (
            " A plugin's helper printed something DCGM could not parse. Under Slurm this is "
            "libnuma's affinity error of a non-exclusive allocation (nvvs.log shows "
            "numa_sched_setaffinity failed): rerun with --exclusive or outside Slurm; "
            "otherwise read nvvs.log for the helper's output and rerun.")
    return finding(
        "dcgm.internal-error", Severity.WARNING,
        f"DCGM diag: {names} failed on an internal error of DCGM, not of the GPUs",
        f"DCGM reported an internal error during {names}.{gpus}{how}",
        Action.FIX_CONFIG, blame,
        evidence=_sources(x for items in found.values() for x in items), references=(DOC,))
