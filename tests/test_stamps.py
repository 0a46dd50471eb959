"""stamp_time's ISO branch (its groups read at once, zones kept per offset) against the
plain reading of the same pattern."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gputriage.logscan import stamps
from gputriage.logscan.stamps import stamp_time, usec


def _iso_reference(stamp: str) -> tuple[datetime | None, float | None] | None:
    """An ISO stamp read group by group, a new zone each time (None: not an ISO stamp)."""
    m = stamps._ISO.match(stamp)
    if m is None:
        return None
    try:
        tz = timezone.utc
        off = m.group(8)
        if off and off != "Z":
            sign = -1 if off[0] == "-" else 1
            tz = timezone(sign * timedelta(hours=int(off[1:3]), minutes=int(off[-2:])))
        y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
        return datetime(y, mo, d, h, mi, s, usec(m.group(7)), tzinfo=tz), None
    except (ValueError, OverflowError):
        return None, None


_D2 = st.integers(0, 99).map(lambda n: f"{n:02d}")
_ISO_STAMPS = st.builds(
    lambda y, mo, d, sep, h, mi, s, frac, zone: f"{y}-{mo}-{d}{sep}{h}:{mi}:{s}{frac}{zone}",
    st.sampled_from(["2024", "2026", "1999", "0000", "9999"]), _D2, _D2, st.sampled_from("T "),
    _D2, _D2, _D2, st.sampled_from(["", ".5", ",123456", ".123456789", ".0000001"]),
    st.one_of(st.sampled_from(["", "Z"]), st.builds(
        lambda sign, hh, colon, mm: f"{sign}{hh}{colon}{mm}", st.sampled_from("+-"), _D2,
        st.sampled_from(["", ":"]), _D2)))


@given(_ISO_STAMPS)
@example("2024-08-30T03:53:20+0000")
@example("2024-08-30T03:53:20.123456-05:30")
@example("2024-02-30T03:53:20Z")
@example("2024-08-30T03:53:20+2400")
@settings(deadline=None)
def test_iso_stamps_read_as_group_by_group(stamp):
    expected = _iso_reference(stamp)
    assert expected is not None
    got = stamp_time(stamp, None)
    assert got == expected
    if got[0] is not None and expected[0] is not None:
        assert got[0].utcoffset() == expected[0].utcoffset()
        assert got[0].isoformat() == expected[0].isoformat()
