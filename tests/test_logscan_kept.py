"""LineSource keeps what stamps, Xid prefixes and messages read as across the sources of
one process (a worker's blocks): each input still reads as it does in a fresh process."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gputriage.logscan import lines
from gputriage.logscan.lines import LineSource

UTC = timezone.utc
EST = timezone(timedelta(hours=-5))
LINES = [
    b"Dec 31 23:59:59 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
    b"name=<unknown>, GPU has fallen off the bus.",
    b"Jan  1 00:00:01 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
    b"name=<unknown>, GPU has fallen off the bus.",
    b"Jan  1 00:00:02 node kernel: mlx5_core 0000:53:00.0 ib0: Link down",
    b"Jan  1 00:00:03.250000 node kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=a, b",
    b"2024-12-31T23:59:59-0500 node kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, y",
    b"2024-12-31T23:59:59-0500 node kernel: mlx5_core 0000:53:00.0 ib0: Link up",
]
# equal times in other zones (other years and wall clocks), a syslog file's name or not
REFERENCES = [("kern.log", datetime(2025, 1, 1, tzinfo=UTC)),
              ("dmesg.txt", datetime(2025, 1, 1, tzinfo=UTC)),
              ("kern.log", datetime(2024, 12, 31, 19, tzinfo=EST)),
              ("messages", datetime(2026, 6, 1, tzinfo=UTC)),
              ("dmesg.txt", None)]


def _read(name: str, now: datetime | None) -> tuple[list[tuple[object, ...]], list[str]]:
    src = LineSource(name, now)
    for n, raw in enumerate(LINES, 1):
        src.line(n, raw, False)
    src.finish()
    events = [(ev.kind, ev.line, ev.bus_id, ev.time, ev.time and ev.time.utcoffset(),
               ev.uptime_s, ev.details) for ev in src.events]
    return events, list(src.formats)


def test_each_input_reads_as_in_a_fresh_process():
    fresh = []
    for name, now in REFERENCES:
        lines._STAMPS.clear()
        lines._FAST_XIDS.clear()
        fresh.append(_read(name, now))
    assert len({repr(f) for f in fresh}) == len(REFERENCES)  # (each reads otherwise)
    for _ in range(2):  # one after the other, what the others kept kept
        for (name, now), expected in zip(REFERENCES, fresh, strict=True):
            assert _read(name, now) == expected, (name, now)
