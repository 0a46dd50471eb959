"""The NVIDIA k8s-device-plugin's log (``kubectl logs`` of its DaemonSet's pod).

Every form the plugin has printed: the Go log of its early releases (``2020/05/29
09:12:46 Loading NVML``), klog (``I0415 12:00:00.000000  1 main.go:199] ...``, the
thread id sometimes trimmed), either of them inside a CRI/containerd log line
(``2024-01-02T03:04:05.123Z stderr F ...``) or after ``kubectl logs --timestamps`` /
``--prefix`` (``[pod/name/container] ...``). The configuration the plugin dumps
(``Running with config:`` and a JSON document) is kept as a mapping.

Each record is a :class:`DpEntry` whose ``event`` names what the plugin said (see
:data:`EVENTS`; the 2020 wording "Retreiving plugins." [sic] included); other lines are
kept without an event. A text with no record of the plugin raises ParseError.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.text.fields import ParseError, split_lines
from gputriage.text.paste import PasteDoc

__all__ = ["EVENTS", "NEEDS", "DevicePluginLog", "DpEntry", "LogLine", "claim_device_plugin_log",
           "parse_device_plugin_log", "split_log_line"]

_KPREFIX = re.compile(r"^\[pod/(?P<pod>[^/\]\s]{1,253})/(?P<ctr>[^\]\s]{1,253})\]\s")
_ISO = (r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
        r"(?:Z|[+-][0-9]{2}:?[0-9]{2})")
_CRI = re.compile(rf"^(?P<ts>{_ISO})\s(?:stdout|stderr)\s[FP]\s?")
_STAMP = re.compile(rf"^(?P<ts>{_ISO})\s")
_GOLOG = re.compile(r"^(?P<ts>[0-9]{4}/[0-9]{2}/[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
                    r"(?:\.[0-9]{1,9})?)(?:\s|$)")
# logrus's text format (the operator's validator, mig-manager): time="..." level=info msg="..."
_LOGRUS = re.compile(r'^time="(?P<ts>[^"]{1,40})"\s+level=(?P<level>[a-z]{1,10})\s+'
                     r'msg="(?P<msg>(?:[^"\\]|\\.){0,4000})"')
_KLOG = re.compile(r"^(?P<level>[IWEF])(?P<ts>[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{1,9})"
                   r"\s+(?:[0-9]{1,10}\s+)?(?P<file>[\w./-]{1,200}:[0-9]{1,6})\]\s?")


@dataclass
class LogLine:
    """A log line with its prefixes taken off: time, klog level, file, pod and container
    (``kubectl logs --prefix``), and the message."""

    message: str
    time: str | None = None
    level: str | None = None  # I W E F (klog)
    origin: str | None = None  # main.go:199
    pod: str | None = None
    container: str | None = None
    prefixed: bool = False  # a log prefix (time, klog header, pod) was found


def split_log_line(line: str) -> LogLine:
    """The prefixes of one line (markdown backticks, ``--prefix``, CRI or
    ``--timestamps``, then logrus, Go log or klog), each optional, taken off in that
    order (logrus's message is its ``msg`` field)."""
    text = line.strip().strip("`")
    out = LogLine(text)
    if m := _KPREFIX.match(text):
        out.pod, out.container, out.prefixed = m.group("pod"), m.group("ctr"), True
        text = text[m.end():]
    if m := (_CRI.match(text) or _STAMP.match(text)):
        out.time, out.prefixed = m.group("ts"), True
        text = text[m.end():]
    if m := _LOGRUS.match(text):
        out.time, out.level, out.prefixed = m.group("ts"), m.group("level")[:1].upper(), True
        text = m.group("msg").replace('\\"', '"').replace("\\n", " ")
    elif m := _GOLOG.match(text):
        out.time, out.prefixed = m.group("ts"), True
        text = text[m.end():]
    elif m := _KLOG.match(text):
        out.time, out.level, out.origin, out.prefixed = (m.group("ts"), m.group("level"),
                                                         m.group("file"), True)
        text = text[m.end():]
    out.message = text.strip()
    return out


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


# event -> pattern on the message, first match wins (order matters)
EVENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("xid-unhealthy", _re(r"XidCriticalError: Xid=(?P<xid>[0-9]{1,4}) on Device=(?P<device>"
                          r"[^;,\s]{1,128})")),
    ("event-error", _re(r"Error waiting for event: (?P<detail>[^;]{1,200}?)\s*(?:;|$)")),
    ("all-unhealthy", _re(r"marking all devices as unhealthy")),
    # NVML cannot register the GPU for Xid events (older consumer GPUs): the 2018 plugin
    # said "GPU with UUID X is too old to support healtchecking [sic] ... Marking it
    # unhealthy", later ones "Device X is too old to support healthchecking."
    # the 1.x plugins instead exited on it: "Fatal: nvml: Not Supported", then a panic
    ("healthcheck-unsupported", _re(r"(?:GPU with UUID|Device) (?P<device>\S{1,128}) is too "
                                    r"old to support heal\w{0,4}checking|"
                                    r"Fatal: nvml: Not Supported")),
    ("device-unhealthy", _re(r"'(?P<resource>[^']{1,100})' device marked unhealthy: "
                             r"(?P<device>\S{1,128})|Marking device (?P<device2>\S{1,128}) as "
                             r"unhealthy")),
    ("nvml-init-failed", _re(r"failed to initiali[sz]e NVML(?::\s*(?P<detail>.{0,300}))?"
                             r"|NVML init failed:?\s*(?P<detail2>[^;]{0,300})")),
    ("hint-docker-runtime", _re(r"did you set the docker default runtime to")),
    ("hint-toolkit", _re(r"did you configure the NVIDIA Container Toolkit")),
    ("hint-not-gpu-node", _re(r"If this is not a GPU node")),
    # "NVML not detected": the resource manager of the 0.17 releases
    ("platform-non-nvml", _re(r"(?:Detected non-NVML platform|NVML not detected):?\s*"
                              r"(?P<detail>.{0,300})")),
    ("platform-nvml", _re(r"Detected NVML platform")),
    ("platform-non-tegra", _re(r"Detected non-Tegra platform")),
    ("platform-tegra", _re(r"Detected Tegra platform")),
    ("incompatible-strategy", _re(r"Incompatible strategy detected:?\s*(?P<detail>\S{1,40})")),
    ("incompatible-platform", _re(r"Incompatible platform detected")),
    ("no-devices", _re(r"No devices found\. Waiting indefinitely")),
    ("mig-fallback", _re(r"No MIG devices found\. Falling back to mig\.strategy=(?P<detail>\w+)")),
    ("null-cdi", _re(r"No valid resources detected")),
    ("grpc-start", _re(r"Starting GRPC server for '(?P<resource>[^']{1,100})'")),
    ("serving", _re(r"Starting to serve '(?P<resource>[^']{1,100})' on (?P<detail>\S{1,300})")),
    ("registered", _re(r"Registered device plugin for '(?P<resource>[^']{1,100})' with Kubelet")),
    ("register-failed", _re(r"Could not (?:register|contact Kubelet)|failed to register|"
                            r"error registering")),
    ("kubelet-restart", _re(r"inotify: \S{0,300}kubelet\.sock created, restarting")),
    # the kubelet's side (its journal): it holds no endpoint for a plugin's resource
    ("endpoint-lost", _re(r"endpoint not found in cache for a regist")),
    ("restart", _re(r"Restarting (?:all )?plugins|Received SIGHUP, restarting")),
    ("signal", _re(r"Received signal \"?(?P<detail>[^\",]{1,40})\"?, shutting down")),
    ("xids-ignored", _re(r"Ignoring the following XIDs for health checks:?\s*"
                         r"(?P<detail>.{0,200})")),
    ("healthchecks-disabled", _re(r"health ?checks? (?:are )?disabled|DP_DISABLE_HEALTHCHECKS")),
    ("config", _re(r"Running with config:?")),
    ("retrieving", _re(r"Retr(?:ei|ie)ving plugins")),
    ("loading-nvml", _re(r"^(?:Loading|Initiali[sz]ing) NVML")),
    ("starting", _re(r"^Starting (?:Plugins|FS watcher|OS watcher)|^Loading configuration|"
                     r"^Updating config with default resource")),
)
# messages only this plugin prints: a paste is the plugin's log where it has one of these
_OWN = frozenset({"xid-unhealthy", "event-error", "device-unhealthy", "hint-docker-runtime",
                  "endpoint-lost", "healthcheck-unsupported",
                  "hint-toolkit", "hint-not-gpu-node", "platform-non-nvml", "platform-nvml",
                  "platform-non-tegra", "platform-tegra", "incompatible-strategy",
                  "incompatible-platform", "no-devices", "mig-fallback", "grpc-start",
                  "serving", "registered", "kubelet-restart", "retrieving", "loading-nvml",
                  "starting", "config", "null-cdi"})
_JETSON = _re(r"jetson|(?<!non-)tegra|\bl4t\b|xavier|\borin\b")


@dataclass
class DpEntry:
    """One record: time as printed, klog level, message, line, event and what it names."""

    message: str
    line: str
    time: str | None = None
    level: str | None = None
    pod: str | None = None
    event: str | None = None
    detail: str | None = None  # NVML's reason, the strategy, the socket
    resource: str | None = None  # nvidia.com/gpu
    xid: int | None = None
    device: str | None = None  # the device's UUID (or MIG id)
    at: int = 0  # where in the message the event's words start


@dataclass
class DevicePluginLog:
    """The plugin's records in order, its configuration dump (``None``: not printed),
    and where it ran when the paste says (pods from ``--prefix``, a Jetson named in the
    command that printed the log)."""

    entries: list[DpEntry] = field(default_factory=list)
    config: dict[str, Any] | None = None
    config_lines: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    tegra_hint: str | None = None  # the line that names a Jetson/Tegra board

    def having(self, *events: str) -> list[DpEntry]:
        """The entries whose event is one of ``events``."""
        return [e for e in self.entries if e.event in events]

    @property
    def resources(self) -> list[str]:
        """The resources the plugin registered with the kubelet, each once."""
        return list(dict.fromkeys(e.resource for e in self.having("registered") if e.resource))

    @property
    def mig_strategy(self) -> str | None:
        """The MIG strategy in effect: the fallback the plugin took, else its flags'."""
        fallback = self.having("mig-fallback")
        if fallback:
            return fallback[-1].detail
        flags = (self.config or {}).get("flags")
        value = flags.get("migStrategy") if isinstance(flags, dict) else None
        return str(value) if value else None

    @property
    def driver_root(self) -> str | None:
        """Where the plugin looks for the driver's files (``nvidiaDriverRoot`` of its
        configuration dump); None when it printed none."""
        flags = (self.config or {}).get("flags")
        value = flags.get("nvidiaDriverRoot") if isinstance(flags, dict) else None
        return str(value)[:200] if isinstance(value, str) and value else None

    @property
    def configured_strategy(self) -> str | None:
        """The MIG strategy the flags asked for (before a fallback)."""
        flags = (self.config or {}).get("flags")
        value = flags.get("migStrategy") if isinstance(flags, dict) else None
        return str(value) if value else None


# for each event, words (lower case) one of which its message must contain: the patterns
# run only where one is found, so that a long paste of other logs costs little
NEEDS: dict[str, tuple[str, ...]] = {
    "xid-unhealthy": ("xidcriticalerror",), "event-error": ("error waiting for event",),
    "all-unhealthy": ("all devices as unhealthy",),
    "healthcheck-unsupported": ("too old to support", "nvml: not supported"),
    "device-unhealthy": ("marked unhealthy", "as unhealthy"),
    "nvml-init-failed": ("nvml",), "hint-docker-runtime": ("docker default runtime",),
    "hint-toolkit": ("container toolkit",), "hint-not-gpu-node": ("not a gpu node",),
    "platform-non-nvml": ("non-nvml", "nvml not detected"), "platform-nvml": ("nvml platform",),
    "platform-non-tegra": ("non-tegra",), "platform-tegra": ("tegra platform",),
    "incompatible-strategy": ("incompatible strategy",),
    "incompatible-platform": ("incompatible platform",),
    "no-devices": ("no devices found",), "mig-fallback": ("no mig devices",),
    "null-cdi": ("no valid resources",), "grpc-start": ("grpc server",),
    "serving": ("starting to serve",), "registered": ("registered device plugin",),
    "register-failed": ("register", "contact kubelet"), "kubelet-restart": ("kubelet.sock",),
    "endpoint-lost": ("endpoint not found in cache",),
    "restart": ("restarting",), "signal": ("received signal",),
    "xids-ignored": ("ignoring the following xids",),
    "healthchecks-disabled": ("health", "dp_disable"), "config": ("running with config",),
    "retrieving": ("plugins",), "loading-nvml": ("nvml",),
    "starting": ("starting", "loading configuration", "updating config"),
}
_WORDS = tuple(dict.fromkeys(w for words in NEEDS.values() for w in words))


def _entry(parts: LogLine, line: str) -> DpEntry:
    entry = DpEntry(parts.message, line.rstrip(), parts.time, parts.level, parts.pod)
    low = parts.message.lower()
    if not any(w in low for w in _WORDS):
        return entry
    for name, pattern in EVENTS:
        if not any(w in low for w in NEEDS[name]):
            continue
        m = pattern.search(parts.message)
        if m is None:
            continue
        entry.event, entry.at = name, m.start()
        groups = {k: v for k, v in m.groupdict().items() if v}
        entry.detail = (groups.get("detail") or groups.get("detail2") or "").strip() or None
        entry.resource = groups.get("resource")
        entry.device = groups.get("device") or groups.get("device2")
        entry.xid = int(groups["xid"]) if "xid" in groups else None
        break
    return entry


def _json_end(lines: list[str], start: int) -> int:
    """The index after the JSON document that starts at or after ``start`` (blank lines
    before it skipped); ``start`` when none starts there."""
    i = start
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i >= len(lines) or not split_log_line(lines[i]).message.startswith("{"):
        return start
    depth = 0
    for j in range(i, min(len(lines), i + 2000)):
        text = split_log_line(lines[j]).message
        depth += text.count("{") - text.count("}")
        if depth <= 0:
            return j + 1
    return start


def parse_device_plugin_log(text: str) -> DevicePluginLog:
    """Parse the plugin's log; ParseError when no line is one of its records."""
    out = DevicePluginLog()
    lines = split_lines(text)
    i = 0
    while i < len(lines):
        line = lines[i]
        parts = split_log_line(line)
        if parts.pod and parts.pod not in out.pods:
            out.pods.append(parts.pod)
        if out.tegra_hint is None and _JETSON.search(line):
            out.tegra_hint = line.strip().strip("`")
        if not parts.message:
            i += 1
            continue
        entry = _entry(parts, line)
        if parts.prefixed or (entry.event is not None and entry.at == 0):
            out.entries.append(entry)
        if entry.event == "config":
            end = _json_end(lines, i + 1)
            if end > i + 1:
                body = "\n".join(split_log_line(ln).message for ln in lines[i + 1:end])
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = None
                if isinstance(doc, dict):
                    out.config, out.config_lines = doc, lines[i + 1:end]
                i = end
                continue
        i += 1
    if not any(e.event in _OWN for e in out.entries):
        raise ParseError("not a device plugin log: none of its records (Loading NVML, "
                         "Registered device plugin, Incompatible strategy...)")
    return out


def _own(line: str) -> bool:
    """A record only the plugin prints: behind a log prefix, or starting the line."""
    parts = split_log_line(line)
    entry = _entry(parts, line)
    return entry.event in _OWN and (parts.prefixed or entry.at == 0)


# an event of its own is set only on a message holding one of its words
_GATE = Gate(literals=tuple(w for name in sorted(_OWN) for w in NEEDS[name]))


@gated_by(_GATE)
def claim_device_plugin_log(doc: PasteDoc) -> None:
    """Each run of log lines (and the configuration dump) around a record only the
    plugin prints, with the ``kubectl logs`` command line just above it when a
    markdown paste left it unmarked."""
    if not _GATE.open(doc):
        return
    after = 0  # the line after the last run
    candidates = _GATE.candidates(doc)  # (a record of its own holds one of the gate's words)
    for i in range(len(doc.lines)) if candidates is None else candidates:
        if i < after or not (doc.free(i) and _own(doc.lines[i])):
            continue
        first = i
        while doc.free(first - 1) and split_log_line(doc.lines[first - 1]).prefixed:
            first -= 1
        if doc.free(first - 1) and _is_logs_command(doc.lines[first - 1]):
            first -= 1
        end = i
        while doc.free(end):
            parts = split_log_line(doc.lines[end])
            if _entry(parts, doc.lines[end]).event == "config":
                end = max(end + 1, _json_end(doc.lines, end + 1))
            elif parts.prefixed or _own(doc.lines[end]):
                end += 1
            else:
                break
        doc.claim("device_plugin_log", first, end)
        after = max(end, i + 1)


_LOGS_CMD = re.compile(r"^\s*`?.{0,200}\blogs\b.{0,200}device-plugin.{0,200}$")


def _is_logs_command(line: str) -> bool:
    return bool(_LOGS_CMD.match(line))
