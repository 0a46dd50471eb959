"""Logs of the NVIDIA GPU operator's containers.

* the driver container (``nvidia-driver-ctr``): the installer's steps (``Starting
  installation of NVIDIA driver version X for Linux kernel version Y``, ``Resolving
  Linux kernel version...``, ``Installing Linux kernel headers...``, ``Compiling NVIDIA
  driver kernel modules...``) and how they fail (``Could not resolve Linux kernel
  version``, ``Unable to open the file '/lib/modules/...'``, package and compile
  errors, a module in use or refused by Secure Boot), ``Done, now waiting for signal``;
* the toolkit container, the operator-validator's and cuda-validator's init containers
  (``nvidia-smi: executable file not found in $PATH``, ``Failed to allocate device
  vector A (error code system not yet initialized)``: the CUDA error is kept, ``cuda
  workload validation failed``), the operator's controller
  (ClusterPolicy not ready), NFD's kernel version, and the upgrade state of a node
  (``upgrade-done``, ``Successfully updated node state label to cordon-required``);
* the plugin validator waiting for the node to advertise GPUs (``GPU resources are not
  yet discovered by the node, retry: N``);
* the MIG manager and ``nvidia-mig-parted`` (run alone, or by HAMi): its steps, ``MIG
  configuration applied successfully``, the ``mig.config.state`` label it sets, its errors
  and a GPU it does not know (``failed to find device with id '2bb5'``).

Lines may carry the prefixes of :func:`gputriage.parsers.device_plugin_log.split_log_line`.
Each record is a :class:`OpEntry` with an ``event`` (see :data:`EVENTS`) and the
``component`` it belongs to. A text with no record of the operator raises ParseError.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.device_plugin_log import split_log_line
from gputriage.text.fields import ParseError, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["EVENTS", "FAILURES", "NEEDS", "UPGRADE_STATES", "GpuOperatorLog", "OpEntry",
           "claim_gpu_operator_log", "parse_gpu_operator_log"]

UPGRADE_STATES = ("upgrade-required", "cordon-required", "wait-for-jobs-required",
                  "pod-deletion-required", "drain-required", "pod-restart-required",
                  "validation-required", "uncordon-required", "upgrade-done",
                  "upgrade-failed")
_STATE = "|".join(re.escape(s) for s in UPGRADE_STATES)


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


# (event, component, pattern on the message), first match wins (order matters)
EVENTS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("install-start", "driver", _re(r"Starting installation of NVIDIA driver version "
                                    r"(?P<driver>[\w.-]{1,40}) for Linux kernel version "
                                    r"(?P<kernel>\S{1,100})")),
    ("kernel-unresolved", "driver", _re(r"Could not resolve Linux kernel version")),
    ("modules-missing", "driver", _re(r"Unable to open the file '?(?P<path>/lib/modules/"
                                      r"(?P<kernel>[^/'\s]{1,100})/[^'\s]{0,200})")),
    ("packages-failed", "driver", _re(r"Failed to fetch|Temporary failure resolving|"
                                      r"Unable to locate package|No package \S+ available|"
                                      r"Cannot find a valid baseurl|Could not resolve host|"
                                      r"Failed to download|Error downloading packages|"
                                      r"Unable to find a match|FATAL: failed to install")),
    ("build-failed", "driver", _re(r"\.[ch]:[0-9]+:[0-9]+: (?:fatal )?error: |"
                                   r"make(?:\[[0-9]+\])?: \*\*\* .{0,200}Error [0-9]+|"
                                   r"Unable to build the NVIDIA kernel module|"
                                   r"An error occurred while performing the step|"
                                   r"nvidia-installer .{0,40}ERROR|(?<!JIT )Compilation failed")),
    ("nouveau", "driver", _re(r"The Nouveau kernel driver is currently in use")),
    ("module-in-use", "driver", _re(r"Could not unload NVIDIA driver kernel modules|"
                                    r"driver is in use|already running, aborting")),
    # Secure Boot: a signed module whose key is not enrolled, or an unsigned one (ENOKEY)
    ("key-rejected", "driver", _re(r"Key was rejected by service|Required key not available")),
    # the driver's own modules: nvidia_peermem / nv_peer_mem failing is the RDMA stack's
    # (kernel.peermem-load-failed), not the driver container's
    ("modprobe-failed", "driver", _re(r"modprobe: ERROR: could not insert '?(?P<detail>"
                                      r"nvidia(?:_uvm|_modeset|_drm)?)\b'?(?!_)")),
    ("fatal", "driver", _re(r"^FATAL:\s*(?P<detail>.{1,300})")),
    ("resolving-kernel", "driver", _re(r"^Resolving Linux kernel version")),
    ("kernel-resolved", "driver", _re(r"Proceeding with Linux kernel version "
                                      r"(?P<kernel>\S{1,100})")),
    ("headers", "driver", _re(r"^Installing Linux kernel headers")),
    ("compiling", "driver", _re(r"^Compiling NVIDIA driver kernel modules")),
    ("loading", "driver", _re(r"^Loading NVIDIA driver kernel modules")),
    ("done", "driver", _re(r"Done, now waiting for signal")),
    ("teardown", "driver", _re(r"^(?:Stopping NVIDIA persistence daemon|Unloading NVIDIA "
                               r"driver kernel modules|Unmounting NVIDIA driver rootfs)")),
    ("installer-step", "driver", _re(r"^(?:=+ NVIDIA Software Installer =+|Checking NVIDIA "
                                     r"driver packages|Updating the package cache|Installing "
                                     r"Linux kernel module files|Generating Linux kernel "
                                     r"version string|Relinking NVIDIA driver kernel modules|"
                                     r"Building NVIDIA driver package|Installing NVIDIA driver "
                                     r"kernel modules|Mounting NVIDIA driver rootfs|Starting "
                                     r"NVIDIA persistence daemon|Loading ipmi and i2c_core)")),
    ("smi-not-found", "validator", _re(r"\"?nvidia-smi\"?: executable file not found in "
                                       r"\$?\S{0,1000}")),
    # the vectorAdd sample of the cuda validator names the CUDA error it got
    ("cuda-error", "validator", _re(r"Failed to (?:allocate|copy|launch|free) .{0,80}?"
                                    r"\(error code (?P<detail>[^()]{1,200})\)")),
    ("cuda-alloc-failed", "validator", _re(r"Failed to allocate device vector")),
    ("cuda-failed", "validator", _re(r"cuda workload validation failed|"
                                     r"Failed to (?:launch|run) (?:the )?(?:vectorAdd|CUDA)")),
    ("validation-failed", "validator", _re(r"(?P<detail>driver|toolkit|cuda|plugin) "
                                           r"validation failed|failed to validate (?:the )?"
                                           r"(?P<detail2>driver|toolkit|cuda|plugin)")),
    ("resources-undiscovered", "validator", _re(r"GPU resources are not (?:yet )?discovered "
                                                r"by the node(?:, retry: (?P<detail>[0-9]+))?")),
    ("validation-ok", "validator", _re(r"(?:all )?validations? (?:are |is )?successful")),
    ("toolkit-failed", "toolkit", _re(r"unable to (?:setup|install|configure) (?:the )?"
                                      r"(?:runtime|toolkit)|error running nvidia-toolkit")),
    ("policy-not-ready", "operator", _re(r"ClusterPolicy (?:is )?not ready|ClusterPolicy "
                                         r"step wasn't ready|\"?state\"?:\s*\"?notReady")),
    ("nfd-kernel", "nfd", _re(r"kernel-version\.full\s*=\s*(?P<kernel>\S{1,100})")),
    # the MIG manager (and nvidia-mig-parted run alone, or by HAMi): how an apply ended
    ("mig-unknown-device", "mig", _re(r"failed to find device with id '?(?P<detail>(?:0x)?"
                                      r"[0-9a-f]{4,8})'?")),
    ("mig-failed", "mig", _re(r"error (?:applying|asserting|selecting) MIG (?:config\w*|mode)"
                              r"(?P<detail>.{0,200})|(?:Failed|Unable) to (?:apply|set) MIG "
                              r"(?:config\w*|mode)(?P<detail2>.{0,200})|mig\.config\.state' "
                              r"node label to 'failed'")),
    ("mig-state", "mig", _re(r"mig\.config\.state' node label to '(?P<detail>[\w-]{1,40})'")),
    ("mig-applied", "mig", _re(r"MIG configuration applied successfully|Successfully updated to "
                               r"MIG config:?\s*(?P<detail>\S{0,100})")),
    ("mig-mode", "mig", _re(r"Current MIG mode: (?P<detail>\w{1,20})")),
    ("mig-step", "mig", _re(r"^(?:Applying the (?:MIG mode change|selected MIG config)|Walking "
                            r"MigConfig|Checking current MIG mode|Running [\w-]{1,40} hook|"
                            r"Parsing config file|Selecting specific MIG config|Asserting MIG "
                            r"(?:mode|config)|Applying MIG (?:device configuration|mode change)|"
                            r"Updating MIG config|MIG capable:)")),
    ("upgrade-step", "upgrade", _re(rf"updated node state label to (?P<detail>{_STATE})")),
    ("upgrade-state", "upgrade", _re(rf"^(?P<detail>{_STATE})$")),
    ("upgrade-enabled", "upgrade", _re(r"\"nvidia\.com/gpu-driver-upgrade-enabled\":\s*"
                                       r"\"(?P<detail>true|false)\"")),
)
# the events that say a step failed, in the order they explain one another
FAILURES = ("kernel-unresolved", "modules-missing", "packages-failed", "build-failed",
            "nouveau", "key-rejected", "module-in-use", "modprobe-failed", "fatal", "smi-not-found",
            "cuda-error", "cuda-alloc-failed", "cuda-failed", "validation-failed",
            "resources-undiscovered", "toolkit-failed", "policy-not-ready",
            "mig-unknown-device", "mig-failed")
# a line that starts a block of the operator's output (the lifecycle lines that are not
# the installer's own words are not enough alone)
_ANCHORS = frozenset(FAILURES) | {"install-start", "done", "headers", "compiling",
                                  "resolving-kernel", "kernel-resolved", "installer-step",
                                  "teardown", "upgrade-step", "upgrade-state",
                                  "upgrade-enabled", "nfd-kernel", "mig-applied", "mig-state",
                                  "mig-step"} - {"fatal"}


@dataclass
class OpEntry:
    """One record: message, line, event, its component and what it names."""

    message: str
    line: str
    time: str | None = None
    pod: str | None = None
    container: str | None = None
    event: str | None = None
    component: str | None = None  # driver | toolkit | validator | operator | nfd | upgrade
    # | mig (the MIG manager, nvidia-mig-parted)
    kernel: str | None = None
    driver: str | None = None
    detail: str | None = None
    at: int = 0


@dataclass
class GpuOperatorLog:
    """The operator's records in order."""

    entries: list[OpEntry] = field(default_factory=list)

    def having(self, *events: str) -> list[OpEntry]:
        return [e for e in self.entries if e.event in events]

    def of(self, component: str) -> list[OpEntry]:
        return [e for e in self.entries if e.component == component]

    @property
    def kernel(self) -> str | None:
        """The kernel the driver was built for (the installer's, else NFD's)."""
        for events in (("install-start", "kernel-resolved", "modules-missing"), ("nfd-kernel",)):
            found = [e.kernel for e in self.having(*events) if e.kernel]
            if found:
                return found[-1]
        return None

    @property
    def driver(self) -> str | None:
        found = [e.driver for e in self.having("install-start") if e.driver]
        return found[-1] if found else None

    @property
    def failures(self) -> list[OpEntry]:
        """The records of failed steps, in the log's order."""
        return [e for e in self.entries if e.event in FAILURES]

    @property
    def upgrade_states(self) -> list[str]:
        """The upgrade states the node went through, in order (its label last)."""
        return [e.detail for e in self.having("upgrade-step", "upgrade-state") if e.detail]


def _container_component(name: str | None) -> str | None:
    if not name:
        return None
    for word, component in (("mig-manager", "mig"), ("driver", "driver"),
                            ("validat", "validator"), ("toolkit", "toolkit"),
                            ("gpu-operator", "operator")):
        if word in name:
            return component
    return None


# for each event, words (lower case) one of which its message must contain (see
# device_plugin_log.NEEDS)
NEEDS: dict[str, tuple[str, ...]] = {
    "install-start": ("starting installation",), "kernel-unresolved": ("could not resolve linux",),
    "modules-missing": ("/lib/modules",),
    "packages-failed": ("failed to fetch", "temporary failure", "unable to locate",
                        "no package", "baseurl", "could not resolve host", "download",
                        "unable to find a match", "failed to install"),
    "build-failed": ("error:", "*** ", "unable to build", "an error occurred",
                     "compilation failed", "nvidia-installer"),
    "nouveau": ("nouveau kernel driver",),
    "module-in-use": ("could not unload", "in use", "already running"),
    "key-rejected": ("key was rejected", "required key not available"),
    "modprobe-failed": ("modprobe",),
    "fatal": ("fatal",), "resolving-kernel": ("resolving linux",),
    "kernel-resolved": ("proceeding with linux",), "headers": ("kernel headers",),
    "compiling": ("compiling nvidia",), "loading": ("loading nvidia",),
    "done": ("done, now waiting",), "teardown": ("nvidia persistence", "nvidia driver"),
    "installer-step": ("nvidia", "linux kernel", "ipmi"), "smi-not-found": ("nvidia-smi",),
    "cuda-error": ("error code",), "cuda-alloc-failed": ("device vector",),
    "cuda-failed": ("validation failed", "failed to"),
    "validation-failed": ("validation failed", "failed to validate"),
    "resources-undiscovered": ("not yet discovered", "not discovered"),
    "validation-ok": ("successful",), "toolkit-failed": ("runtime", "toolkit"),
    "policy-not-ready": ("clusterpolicy", "notready"), "nfd-kernel": ("kernel-version.full",),
    "upgrade-step": ("state label",), "upgrade-state": ("required", "upgrade-"),
    "upgrade-enabled": ("gpu-driver-upgrade-enabled",),
    "mig-unknown-device": ("failed to find device with id",),
    "mig-failed": (" mig ", "mig.config.state"), "mig-state": ("mig.config.state",),
    "mig-applied": ("mig configuration applied", "updated to mig config"),
    "mig-mode": ("current mig mode",),
    "mig-step": ("mig", "hook", "parsing config"),
}
_WORDS = tuple(dict.fromkeys(w for words in NEEDS.values() for w in words))


def _entry(line: str) -> OpEntry:
    parts = split_log_line(line)
    entry = OpEntry(parts.message, line.rstrip(), parts.time, parts.pod, parts.container)
    entry.component = _container_component(parts.container or parts.pod)
    low = parts.message.lower()
    if not any(w in low for w in _WORDS):
        return entry
    for name, component, pattern in EVENTS:
        if not any(w in low for w in NEEDS[name]):
            continue
        m = pattern.search(parts.message)
        if m is None:
            continue
        groups = {k: v for k, v in m.groupdict().items() if v}
        entry.event, entry.at = name, m.start()
        entry.component = entry.component or component
        entry.kernel = groups.get("kernel")
        entry.driver = groups.get("driver")
        entry.detail = groups.get("detail") or groups.get("detail2") or groups.get("path")
        break
    return entry


def parse_gpu_operator_log(text: str) -> GpuOperatorLog:
    """Parse the operator's container logs; ParseError when no line is one of their
    records."""
    out = GpuOperatorLog()
    for line in split_lines(text):
        if not line.strip():
            continue
        out.entries.append(_entry(line))
    if not any(e.event in _ANCHORS for e in out.entries):
        raise ParseError("not a GPU operator log: none of its records (Starting installation "
                         "of NVIDIA driver, Could not resolve Linux kernel version, "
                         "validation failed...)")
    return out


def _anchor(line: str) -> bool:
    entry = _entry(line)
    if entry.event not in _ANCHORS:
        return False
    if entry.event in ("upgrade-state", "upgrade-step", "nfd-kernel", "upgrade-enabled"):
        return True  # a bare state label, NFD's feature, must-gather's annotation
    return entry.at == 0 or split_log_line(line).prefixed or entry.event in FAILURES


# an anchor's event is set only on a message holding one of its words
_GATE = Gate(literals=tuple(w for name in sorted(_ANCHORS) for w in NEEDS[name]))


@gated_by(_GATE)
def claim_gpu_operator_log(doc: PasteDoc) -> None:
    """Each block of non-blank lines around a record of the operator's containers."""
    if not _GATE.open(doc):
        return
    after = 0  # the line after the last block
    candidates = _GATE.candidates(doc)  # (an anchor holds one of the gate's words)
    for i in range(len(doc.lines)) if candidates is None else candidates:
        if i < after or not (doc.free(i) and _anchor(doc.lines[i])):
            continue
        first = i
        while doc.free(first - 1) and doc.lines[first - 1].strip() and \
                not _prose(doc.lines[first - 1]):
            first -= 1
        end = doc.extend(i + 1, lambda s: bool(s.strip()) and not _prose(s))
        doc.claim("gpu_operator_log", first, end)
        after = max(end, i + 1)


_PROSE = re.compile(r"^\s*(?:#{1,6}\s|\*\*|[-*]\s)|[.?!:]\s+[A-Z][a-z]+ [a-z]+ [a-z]+ ")


def _prose(line: str) -> bool:
    """A markdown heading or list item, or sentences: a person's words about the log."""
    return bool(_PROSE.search(line)) and _entry(line).event is None
