"""Collection: the only code that touches the live host.

``collect(host, out)`` captures every declared source into a snapshot. Each
source runs in its own daemon thread under its timeout and the run's global
deadline, so one hung read or command cannot hold up the others, and an
unkillable one is abandoned (and recorded as a timeout) rather than waited on. While
an abandoned read has not returned, later collections of the same host (a watch's
cycles) start no other for that source: it is recorded as still hung.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import gputriage
from gputriage import sources
from gputriage.collect import readers
from gputriage.collect.host import Host
from gputriage.snapshot import writer as snapshot_writer
from gputriage.snapshot.redact import Redactor
from gputriage.sources import Source

DEFAULT_DEADLINE_S = 90.0
MAX_PARALLEL = 6


@dataclass
class CollectOptions:
    timeout_s: float | None = None  # per-command override
    deadline_s: float = DEFAULT_DEADLINE_S
    only: tuple[str, ...] = ()  # source names; empty = all collectable
    force: bool = False  # replace an existing output
    redact: bool = False  # replace identities (gputriage.snapshot.redact) before writing
    # opt-in sources' options (sources.Source.opt_in): "model_dir" -> DIR,
    # "dcgm_diag" -> LEVEL; an opt-in source runs only when its option is here
    opt_in: dict[str, str] = field(default_factory=dict)
    # told (what, done, total, unit) as sources come in: ("sources", 12, 40, "sources")
    progress: Callable[[str, int, int | None, str], None] | None = None


def _collect_command(host: Host, spec: Source, timeout_s: float,
                     argv: tuple[str, ...] | None = None) -> tuple[bytes | None, dict]:
    candidates = [host.nvml_argv()] if spec.kind == "nvml" else [_program(argv or spec.argv)]
    candidates += [list(a) for a in spec.fallback]
    outcome = None
    for candidate in candidates:
        outcome = host.run(candidate, timeout_s, spec.cap_bytes)
        if not outcome.not_found and not _worth_fallback(outcome):
            break
    assert outcome is not None
    rec: dict = {"argv": outcome.argv, "rc": outcome.rc, "duration_s": outcome.duration_s,
                 "truncated": outcome.truncated}
    if outcome.strays:  # what left the command's process group, or survived SIGKILL
        rec["strays"] = outcome.strays
    if outcome.not_found:
        rec.update(error="absent", error_detail=f"{outcome.argv[0]}: command not found", rc=None)
        return None, rec
    if outcome.timed_out:
        rec.update(error="timeout", error_detail=f"killed after {timeout_s:.0f} s")
        return outcome.output, rec
    if outcome.error:
        rec.update(error="failed", error_detail=outcome.error, rc=None)
        return None, rec
    if outcome.rc not in (0, None):
        rec.update(error="failed", error_detail=f"exit status {outcome.rc}")
    return outcome.output, rec


def _program(argv: tuple[str, ...]) -> list[str]:
    """gputriage's own commands run in this interpreter (its script may not be on PATH)."""
    if argv and argv[0] == "gputriage":
        return [sys.executable, "-I", "-m", "gputriage", *argv[1:]]
    return list(argv)


_NO_ENTRIES = (b"No journal files were found", b"-- No entries --",
               b"System has not been booted with systemd")


def _worth_fallback(outcome) -> bool:
    """journalctl without a journal (containers, minimal hosts): try dmesg."""
    if outcome.timed_out:
        return False
    if outcome.rc not in (0, None):
        return True
    lines = [ln for ln in outcome.output.splitlines() if ln.strip()]
    return all(ln.startswith(_NO_ENTRIES) for ln in lines)


def _collect_one(host: Host, spec: Source, timeout_s: float,
                 argv: tuple[str, ...] | None = None) -> tuple[bytes | None, dict]:
    if spec.kind in ("command", "nvml"):
        return _collect_command(host, spec, timeout_s, argv)
    if spec.kind == "file":
        return readers.read_file(host.root, spec)
    if spec.kind == "tree":
        return readers.read_tree(host.root, spec)
    if spec.kind == "devnodes":
        return readers.read_devnodes(host.root, spec)
    raise ValueError(f"unknown source kind {spec.kind}")


class _Job(threading.Thread):
    def __init__(self, host: Host, spec: Source, timeout_s: float,
                 slots: threading.Semaphore, deadline: float,
                 argv: tuple[str, ...] | None = None) -> None:
        super().__init__(daemon=True, name=f"collect-{spec.name}")
        self.host, self.spec, self.timeout_s, self.slots = host, spec, timeout_s, slots
        self.deadline = deadline
        self.argv = argv
        self.result: tuple[bytes | None, dict] | None = None
        self.started_at = 0.0
        self.duration = 0.0
        self.since = datetime.now(timezone.utc)  # when it started

    def run(self) -> None:
        # a slot held by a hung read may never free: wait no longer than the deadline
        if not self.slots.acquire(timeout=max(0.0, self.deadline - time.monotonic())):
            return
        try:
            self.started_at = time.monotonic()
            self.since = datetime.now(timezone.utc)
            try:
                self.result = _collect_one(self.host, self.spec, self.timeout_s, self.argv)
            except Exception as exc:  # an outcome is data, never a crash
                self.result = (None, {"error": "failed", "error_detail": repr(exc)})
            self.duration = time.monotonic() - self.started_at
        finally:
            self.slots.release()


# Jobs abandoned at a deadline and still running, by (host root, source name): a read
# stuck in the kernel (D state) may never return, and its thread cannot be killed.
_ABANDONED: dict[tuple[str, str], _Job] = {}
_ABANDONED_LOCK = threading.Lock()


def _still_hung(host: Host, name: str) -> _Job | None:
    """The abandoned job of this source that has not returned yet, if any."""
    key = (str(host.root), name)
    with _ABANDONED_LOCK:
        job = _ABANDONED.get(key)
        if job is not None and not job.is_alive():
            del _ABANDONED[key]
            job = None
    return job


def _abandon(host: Host, job: _Job) -> None:
    with _ABANDONED_LOCK:
        _ABANDONED[(str(host.root), job.spec.name)] = job


def _start_jobs(host: Host, specs: list[Source], opts: CollectOptions, deadline: float,
                records: dict[str, dict]) -> list[_Job]:
    """A started job per source; a source whose earlier read still hangs gets a record
    in ``records`` instead (no second thread for it)."""
    slots = threading.Semaphore(MAX_PARALLEL)
    jobs = []
    for spec in specs:
        hung = _still_hung(host, spec.name)
        if hung is not None:
            records[spec.name] = snapshot_writer.source_record(
                spec.name, rc=None, duration_s=0.0, error="timeout",
                error_detail=f"still hung since {hung.since.isoformat(timespec='seconds')} "
                             "(an earlier collection's read has not returned)",
                with_file=False)
            continue
        if spec.opt_in:
            job = _Job(host, spec, opt_in_timeout(spec, opts), slots, deadline,
                       spec.argv_for(opts.opt_in[spec.opt_in]))
        else:
            timeout = (opts.timeout_s if opts.timeout_s and spec.kind == "command"
                       else spec.timeout_s)
            job = _Job(host, spec, min(timeout, opts.deadline_s), slots, deadline)
        job.start()
        jobs.append(job)
    return jobs


def _gather(host: Host, jobs: list[_Job], opts: CollectOptions, start: float,
            deadline: float, records: dict[str, dict]) -> dict[str, bytes]:
    """Wait for the jobs until the deadline: each one's record into ``records``; the
    payloads by source name."""
    payloads: dict[str, bytes] = {}
    for done, job in enumerate(jobs, 1):
        # a job's own command timeout fires first; this bound covers hung reads (the
        # half-second of grace is paid once, not once per job)
        job.join(timeout=max(0.0, deadline + 0.5 - time.monotonic()))
        if opts.progress is not None:
            opts.progress("collecting", done, len(jobs), "sources")
        name = job.spec.name
        if job.result is None:
            if job.started_at:  # one that found no slot has ended
                _abandon(host, job)
            detail = ("global deadline reached" if job.started_at
                      else "global deadline reached before it could start")
            records[name] = snapshot_writer.source_record(
                name, rc=None, duration_s=time.monotonic() - (job.started_at or start),
                error="timeout", error_detail=detail, with_file=False)
            continue
        data, fields = job.result
        argv = fields.pop("argv", None)
        rec = snapshot_writer.source_record(name, argv=argv, with_file=data is not None,
                                            nbytes=len(data or b""), duration_s=job.duration)
        rec.update(fields)
        records[name] = rec
        if data is not None:
            payloads[name] = data
    return payloads


def collect(host: Host, out: str | os.PathLike, options: CollectOptions | None = None) -> Path:
    """Capture the host into a snapshot directory or ``.tar.gz``."""
    opts = options or CollectOptions()
    snapshot_writer.check_output(out, opts.force)  # fail before collecting, not after
    specs = [s for s in sources.SOURCES if (s.collect or s.opt_in in opts.opt_in)
             and (not opts.only or s.name in opts.only)]
    start = time.monotonic()
    deadline = start + max([opts.deadline_s] + [opt_in_timeout(s, opts) + 1.0 for s in specs
                                                 if s.opt_in])
    records: dict[str, dict] = {}
    jobs = _start_jobs(host, specs, opts, deadline, records)
    payloads = _gather(host, jobs, opts, start, deadline, records)
    records = {s.name: records[s.name] for s in specs}  # in the sources' order
    _mark_not_applicable(records, payloads.get("pci_devices"))
    manifest = snapshot_writer.new_manifest(
        host=_text(payloads.get("hostname")) or socket.gethostname(),
        created=host.now().isoformat(timespec="seconds"),
        boot_id=_text(payloads.get("boot_id")),
        tool_version=gputriage.__version__,
        extra={"collector": {"deadline_s": opts.deadline_s, "timeout_s": opts.timeout_s,
                             "euid": os.geteuid() if hasattr(os, "geteuid") else None,
                             "opt_in": dict(opts.opt_in),
                             # each command's cell: "cgroup" or "process group" (confine.py)
                             "confine": getattr(host, "confinement", None),
                             "duration_s": round(time.monotonic() - start, 3)}},
    )
    manifest["sources"] = records
    redactor = _redactor(manifest["host"]) if opts.redact else None
    return snapshot_writer.write_snapshot(out, manifest, payloads, force=opts.force,
                                          redactor=redactor)


def opt_in_timeout(spec: Source, opts: CollectOptions) -> float:
    """An opt-in command's timeout: ``dcgmi diag``'s by its level, else its own."""
    if spec.opt_in == "dcgm_diag":
        level = int(opts.opt_in.get("dcgm_diag", "1"))
        return sources.DCGM_DIAG_TIMEOUT_S.get(level, spec.timeout_s)
    return spec.timeout_s


def _redactor(host: str) -> Redactor:
    """A redactor that knows the snapshot's host name (``host-1``), this machine's
    and the collecting user's (no DNS lookup for the FQDN: it could hang)."""
    users = [os.environ.get(v) or "" for v in ("SUDO_USER", "USER", "LOGNAME")]
    try:
        import pwd

        users.append(pwd.getpwuid(os.geteuid()).pw_name)
    except (ImportError, KeyError, AttributeError):
        pass
    return Redactor(hostnames=[host, socket.gethostname()], users=users)


def _hardware(pci_tree: bytes | None) -> set[str] | None:
    """Which kinds of hardware the PCI tree shows (None: unknown)."""
    if pci_tree is None:
        return None
    try:
        files = json.loads(pci_tree).get("files", {})
    except (ValueError, AttributeError):
        return None
    found: set[str] = set()
    for key, value in files.items():
        device, _, attr = key.rpartition("/")
        if attr != "vendor":
            continue
        klass = str(files.get(f"{device}/class", "")).strip().lower()
        if value.strip().lower() == "0x10de":
            found.add("nvidia")
        if klass.startswith("0x0207") or value.strip().lower() == "0x15b3":
            found.add("infiniband")
    return found


def _mark_not_applicable(records: dict[str, dict], pci_tree: bytes | None) -> None:
    """An absent tool for hardware the host does not have is not-applicable, not missing."""
    present = _hardware(pci_tree)
    if present is None:
        return
    for name, rec in records.items():
        spec = sources.get(name)
        if rec.get("error") == "absent" and spec.applies and spec.applies not in present:
            rec["error"] = "not-applicable"
            rec["error_detail"] = f"no {spec.applies} PCI function on this host"


def _text(data: bytes | None) -> str | None:
    if not data:
        return None
    return data.decode("utf-8", errors="replace").strip() or None
