"""dcgm-exporter: its ``/metrics`` text (Prometheus exposition of ``DCGM_FI_DEV_*`` and
``DCGM_FI_PROF_*`` fields) and its own log.

The metrics are read with prometheus_client's text parser (imported when first
needed), the whole text at once, or line by line when a line is damaged (a paste cut
in the middle of its last line): the readable samples are kept and the others counted.
Samples are grouped per GPU, or per MIG instance (``GPU_I_ID``).

The log is logrus text (``time="..." level=error msg="..."``, or ``ERRO[0000] ...`` on
a terminal), or, from 4.x, Go's slog text (``time=2025-01-01T00:00:00Z level=ERROR
msg="..."``), behind ``docker compose logs`` / ``kubectl logs --prefix`` / journal
prefixes; the plain lines of the old shell-script exporter (``Starting NVIDIA host
engine...``); and the exporter's own messages quoted bare (``Not collecting DCP metrics:
...``, ``Error starting nv-hostengine: ...``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gputriage.parsers.detect_gate import Gate, gated_by
from gputriage.parsers.nv_hostengine import PROFILING_BUSY
from gputriage.text.fields import ParseError, as_float, normalize_bus_id, split_lines, strict_int
from gputriage.text.paste import PasteDoc

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["EXPORTER_EVENTS", "ExporterEntry", "ExporterLog", "ExporterMetrics", "GpuMetrics",
           "claim_exporter_log", "claim_metrics", "parse_exporter_log", "parse_metrics"]

_SAMPLE = re.compile(r"^\s*(?P<name>DCGM_(?:FI|EXP)_[A-Z0-9_]+)(?:\{.*\})?\s+\S+")
# a series without its value, as Prometheus' and Grafana's series lists show it
_SERIES = re.compile(r"^\s*(?P<name>DCGM_(?:FI|EXP)_[A-Z0-9_]+)\{[^{}]*\}\s*$")
_NAME = re.compile(r"^\s*DCGM_(?:FI|EXP)_[A-Z0-9_]+")
_META = re.compile(r"^\s*# (?:HELP|TYPE) (?P<name>DCGM_(?:FI|EXP)_[A-Z0-9_]+)\b")


@dataclass
class GpuMetrics:
    """One GPU's (or MIG instance's) samples: field name -> value, and the lines."""

    gpu: str | None
    uuid: str | None = None
    bus_id: str | None = None
    model: str | None = None
    hostname: str | None = None
    mig_profile: str | None = None
    mig_instance: str | None = None
    values: dict[str, float] = field(default_factory=dict)
    lines: dict[str, str] = field(default_factory=dict)  # field name -> its sample line
    labels: dict[str, dict[str, str]] = field(default_factory=dict)  # field -> extra labels
    pod: str | None = None  # the pod a series attributes the GPU to (while one uses it)

    @property
    def index(self) -> int | None:
        return strict_int(self.gpu, signed=False) if self.gpu and len(self.gpu) < 6 else None

    @property
    def label(self) -> str:
        where = f"GPU {self.gpu}" if self.gpu is not None else "GPU"
        if self.mig_instance is not None:
            where += f" MIG {self.mig_profile or ''} instance {self.mig_instance}".replace(
                "  ", " ")
        return where


@dataclass
class ExporterMetrics:
    """Every GPU's samples in the order they first appear, how many lines could not be
    read, and how many samples were NaN or infinite (skipped: no judgement reads them)."""

    gpus: list[GpuMetrics] = field(default_factory=list)
    unreadable: int = 0
    non_finite: int = 0
    fields: set[str] = field(default_factory=set)
    series: int = 0  # series read without a value (label sets only)

    def gpu(self, key: _GpuKey) -> GpuMetrics | None:
        return next((g for g in self.gpus if _key(g) == key), None)


# What tells the GPUs of a scrape apart: (its UUID, else its gpu label; its MIG instance)
_GpuKey = tuple[str | None, str | None]


def _key(g: GpuMetrics) -> _GpuKey:
    return (g.uuid or g.gpu, g.mig_instance)


def _families(text: str) -> list[Metric]:
    from prometheus_client.parser import text_string_to_metric_families

    return list(text_string_to_metric_families(text))


_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "GPU_I_PROFILE",
           "GPU_I_ID", "DCGM_FI_DRIVER_VERSION")


def parse_metrics(text: str) -> ExporterMetrics:
    """Parse a dcgm-exporter ``/metrics`` text; ParseError when no DCGM sample is read."""
    out = ExporterMetrics()
    lines, series = [], []
    for ln in split_lines(text):
        if _SAMPLE.match(ln) or _META.match(ln):
            lines.append(ln)
        elif _SERIES.match(ln):
            series.append(ln)  # a series without its value: read after the samples
        elif _NAME.match(ln):
            out.unreadable += 1  # a sample cut short (the end of a paste)
    sample_lines = [ln for ln in lines if _SAMPLE.match(ln)]
    samples: list[tuple[dict[str, str], float]] = []
    try:
        samples = [(dict(s.labels), s.value)
                   for fam in _families("\n".join(lines) + "\n") for s in fam.samples]
    except (ValueError, TypeError, IndexError, KeyError):
        samples = []
    if len(samples) != len(sample_lines):  # read line by line: keep what can be read
        samples, kept = [], []
        for ln in sample_lines:
            try:
                got = [(dict(s.labels), s.value) for fam in _families(ln + "\n")
                       for s in fam.samples]
            except (ValueError, TypeError, IndexError, KeyError):
                got = []
            if len(got) != 1:
                out.unreadable += 1
                continue
            samples += got
            kept.append(ln)
        sample_lines = kept
    for (labels, value), line in zip(samples, sample_lines, strict=True):
        name = _SAMPLE.match(line).group("name")  # type: ignore[union-attr]
        number = as_float(value)
        if number is None:
            out.non_finite += 1  # NaN, +Inf: a field DCGM could not read, not a count
            continue
        _add(out, name, labels, number, line.strip())
    for ln in series:
        if (m := _SERIES.match(ln)) and (found := _series_labels(ln)) is not None:
            out.series += 1
            _add(out, m.group("name"), found, None, ln.strip())
    if not out.gpus:
        raise ParseError("not dcgm-exporter metrics: no readable DCGM_FI_* sample")
    return out


def _series_labels(line: str) -> dict[str, str] | None:
    """The labels of a series line without a value; None when they do not parse."""
    try:
        got = [dict(s.labels) for fam in _families(line.strip() + " 0\n") for s in fam.samples]
    except (ValueError, TypeError, IndexError, KeyError):
        return None
    return got[0] if len(got) == 1 else None


_POD_LABELS = ("pod", "exported_pod")


def _add(out: ExporterMetrics, name: str, labels: dict[str, str], value: float | None,
         line: str) -> None:
    key = (labels.get("UUID") or labels.get("gpu"), labels.get("GPU_I_ID"))
    gpu = out.gpu(key)
    if gpu is None:
        gpu = GpuMetrics(labels.get("gpu"), labels.get("UUID"),
                         normalize_bus_id(labels.get("pci_bus_id")), labels.get("modelName"),
                         labels.get("Hostname"), labels.get("GPU_I_PROFILE"),
                         labels.get("GPU_I_ID"))
        out.gpus.append(gpu)
    gpu.pod = gpu.pod or next((labels[k] for k in _POD_LABELS if labels.get(k)), None)
    if value is None:  # no number to judge: the GPU and its line only
        gpu.lines.setdefault(name, line)
        return
    out.fields.add(name)
    if name in gpu.values and gpu.values[name] >= value:
        return  # a field repeated (per pod or container labels): keep the largest
    gpu.values[name] = value
    gpu.lines[name] = line or f"{name} {value:g}"
    extra = {k: v for k, v in labels.items() if k not in _LABELS}
    if extra:
        gpu.labels[name] = extra


def _is_metric_line(line: str) -> bool:
    return bool(_SAMPLE.match(line) or _META.match(line) or _SERIES.match(line))


_METRICS_GATE = Gate(_SAMPLE, _META, _SERIES, test=_is_metric_line)  # each names DCGM_


@gated_by(_METRICS_GATE)
def claim_metrics(doc: PasteDoc) -> None:
    """Lines of DCGM samples (or series without a value) and their ``# HELP`` / ``# TYPE``
    lines."""
    if not _METRICS_GATE.open(doc):
        return
    for i, ln in enumerate(doc.lines):
        if doc.free(i) and _is_metric_line(ln):
            doc.claim("dcgm_exporter_metrics", i, i + 1)


# --- the exporter's log ------------------------------------------------------------------
_PREFIX = re.compile(r"^\s*(?:\[pod/[^\]]{1,300}\]\s+|[\w.-]{1,100}\s+\|\s+)?")
# logrus quotes the time; slog (4.x) does not, and leaves a one-word message unquoted
_LOGRUS = re.compile(r'time=(?:"(?P<time>[^"]{1,64})"|'
                     r'(?P<bare>[0-9]{4}-[0-9]{2}-[0-9]{2}T[\w:.+-]{1,40}))\s+level=(?P<level>\w{1,10})\s+msg=(?:"(?P<msg>.*?)"(?:\s|$)|'
                     r'"(?P<cut>.*?)>?$|(?P<word>\S{1,200}))')  # cut: a line systemctl cut
# the exporter's own messages, quoted without their log frame
_BARE = re.compile(r"^(?:Not collecting (?:DCP|GPU|NvSwitch|NvLink|CPU|CPU Core) metrics[:;] .+|"
                   r"Skipping line [0-9]{1,6} \('DCGM_\w{1,80}'\): .+|"
                   r"Error starting nv-hostengine: .+|Failed to watch metrics: .+|"
                   r"Error watching fields: .+|Cannot init NVML library; err: .+)$")
# what any NVML user prints: the exporter's only beside one of its own lines
_SHARED = re.compile(r"^Failed to initiali[sz]e NVML(?::.{0,200})?$")
_LOGRUS_TTY = re.compile(r"^(?P<level>INFO|WARN|WARNING|ERRO|ERROR|FATA|FATAL|DEBU|PANI)"
                         r"\[[0-9]{1,8}\]\s+(?P<msg>.*)$")
_LEVELS = {"INFO": "info", "WARN": "warning", "WARNING": "warning", "ERRO": "error",
           "ERROR": "error", "FATA": "fatal", "FATAL": "fatal", "DEBU": "debug",
           "PANI": "panic"}


def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


# event -> pattern on a message; first match wins
EXPORTER_EVENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("remote-hostengine", _re(r"connect to remote hostengine at (?P<addr>\S+?)\"?$")),
    ("collect-failed", _re(r"Failed to collect metrics.*Host engine connection invalid|"
                           r"Failed to collect metrics")),
    ("hostengine-unreachable", _re(r"Error connecting to nv-hostengine|Host engine connection "
                                   r"invalid/disconnected|Unable to connect to host engine")),
    ("profiling-busy", PROFILING_BUSY),
    ("dcp-unavailable", _re(r"Not collecting DCP metrics|module of DCGM that is not currently "
                            r"loaded|Unable to Get supported metric groups|DCP metrics not "
                            r"enabled|Profiling is not supported for this group of GPUs")),
    ("metrics-file-invalid", _re(r"Could not read metrics file|wrong number of fields|"
                                 r"bare \" in non-quoted field|extraneous or missing \" in quoted|"
                                 r"record on line [0-9]+")),
    ("nvml-init-failed", _re(r"Failed to initiali[sz]e NVML|NVML doesn't exist|libnvidia-ml\.so|"
                             r"Cannot init NVML library|ERROR_LIBRARY_NOT_FOUND|"
                             r"Error starting nv-hostengine: DCGM initiali[sz]ation error")),
    ("serving", _re(r"^(?:Starting webserver|Listening on)")),
    ("started", _re(r"Starting dcgm-exporter|DCGM successfully initialized|Collecting DCP "
                    r"Metrics|Pipeline starting")),
    ("legacy-hostengine-stopped", _re(r"Unable to terminate host engine, it may not be running|"
                                      r"Stopping NVIDIA host engine")),
    ("legacy-start", _re(r"Starting NVIDIA host engine|Collecting metrics at \S+ every")),
    ("fabricmanager-state", _re(r"Failed to get unit file state for nvidia-fabricmanager")),
)
_EXPORTER_HINT = _re(r"dcgm-exporter|dcgm_exporter|DCGM|hostengine|DCP metrics|metrics file|"
                     r"metric groups|Failed to collect metrics|configmap data")
_LEGACY = _re(r"^(?:Starting NVIDIA host engine\.\.\.|Collecting metrics at /\S+ every [0-9]+ms\.*|"
              r"Stopping NVIDIA host engine\.\.\.|Unable to terminate host engine, it may not be "
              r"running\.|\S*dcgm-exporter: line [0-9]+: .*|Done|Failed to get unit file state for "
              r"nvidia-fabricmanager\.service: .*)$")


@dataclass
class ExporterEntry:
    """One record of the exporter's log: its level, message, event (or None) and line."""

    message: str
    line: str
    level: str | None = None
    time: str | None = None
    event: str | None = None
    detail: str | None = None  # what the event's pattern captured (the remote address)


@dataclass
class ExporterLog:
    entries: list[ExporterEntry] = field(default_factory=list)

    def of(self, *events: str) -> list[ExporterEntry]:
        return [e for e in self.entries if e.event in events]


def _split(line: str) -> tuple[str | None, str | None, str] | None:
    """(time, level, message) of a logrus record or a legacy exporter line; None otherwise."""
    text = _PREFIX.sub("", line.strip().strip("`"), count=1)
    if m := _LOGRUS.search(text):
        msg = next(g for g in (m.group("msg"), m.group("cut"), m.group("word")) if g is not None)
        msg = msg.replace('\\"', '"').replace("\\n", " ").strip()
        return m.group("time") or m.group("bare"), m.group("level").lower(), msg
    if _BARE.match(text):
        return None, None, text
    if _SHARED.match(text):
        return None, "error", text
    if m := _LOGRUS_TTY.match(text):
        return None, _LEVELS.get(m.group("level").upper()), m.group("msg").strip()
    if text.startswith("Error: ") and _EXPORTER_HINT.search(text):
        return None, "error", text[len("Error: "):].strip()
    if _LEGACY.match(text):
        return None, None, text
    return None


def _event(message: str) -> tuple[str | None, str | None]:
    for name, pat in EXPORTER_EVENTS:
        if m := pat.search(message):
            return name, (m.groupdict().get("addr") or None)
    return None, None


def parse_exporter_log(text: str) -> ExporterLog:
    """Parse dcgm-exporter's log; ParseError when no line is one of its records."""
    out = ExporterLog()
    for line in split_lines(text):
        parts = _split(line)
        if parts is None:
            continue
        time, level, msg = parts
        event, detail = _event(msg)
        out.entries.append(ExporterEntry(msg, line.strip(), level, time, event, detail))
    if not out.entries:
        raise ParseError("not a dcgm-exporter log: no logrus record or exporter line")
    return out


def _is_exporter_line(line: str) -> bool:
    parts = _split(line)
    if parts is None or _SHARED.match(parts[2]):
        return False
    return parts[1] is None or bool(_EXPORTER_HINT.search(parts[2])) or (
        _event(parts[2])[0] is not None)


# a run is claimed only around a free line of the exporter's own, which holds a literal
# of the way _split read it: logrus' "level=", a terminal's "INFO[", "Error: ", a bare or
# legacy message
_LOG_GATE = Gate(_LOGRUS, _BARE, _SHARED, _LEGACY,
                 literals=(*(f"{level}[" for level in _LEVELS), "Error: "),
                 test=_is_exporter_line)


@gated_by(_LOG_GATE)
def claim_exporter_log(doc: PasteDoc) -> None:
    """Runs of logrus / exporter lines of which one at least is dcgm-exporter's own."""
    if not _LOG_GATE.open(doc):
        return
    i = 0
    while i < len(doc.lines):
        if not (doc.free(i) and _split(doc.lines[i]) is not None):
            i += 1
            continue
        end = doc.extend(i, lambda s: _split(s) is not None)
        if any(_is_exporter_line(doc.lines[j]) for j in range(i, end)):
            doc.claim("dcgm_exporter_log", i, end)
        i = max(end, i + 1)
