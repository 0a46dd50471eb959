"""The drain budget (gputriage.drain): the pure decision table-tested, sinfo's answers
read, and the guard against a fleet where every node's check fails at once."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gputriage.drain.guard import guard
from gputriage.drain.k8s import fleet_of
from gputriage.drain.policy import (
    DEFAULTS,
    Fleet,
    Limit,
    OutNode,
    Settings,
    allowed,
    confirm,
    decide,
    decide_undrain,
    is_ours,
    settings_from,
)
from gputriage.drain.slurm import SlurmFleet, comment_after, split_comment

NOW = datetime(2026, 12, 6, 16, 0, 0)
ON = Settings(enforce=True)
HW = [{"id": "xid.79", "severity": "critical", "status": "current", "blame": "node"}]


def _out(name: str, minutes_ago: float | None, ours: bool = True) -> OutNode:
    since = None if minutes_ago is None else NOW - timedelta(minutes=minutes_ago)
    return OutNode(name, since, ours, "gputriage CRITICAL: xid.79" if ours else "maint")


@pytest.mark.parametrize("size, per_hour, at_once", [
    (8, 2, 2), (64, 2, 6), (100, 2, 10), (1000, 20, 100), (10_000, 200, 1000),
])
def test_default_limits_scale_with_the_fleet(size: int, per_hour: int, at_once: int) -> None:
    assert DEFAULTS.per_hour.of(size) == per_hour
    assert DEFAULTS.out_at_once.of(size) == at_once


@pytest.mark.parametrize("fleet, settings, kill, findings, breaker", [
    (Fleet(8), ON, True, HW, "kill-switch"),
    (Fleet(8), DEFAULTS, False, HW, "observe-only"),  # the first-install default
    (Fleet(8), ON, False, [dict(HW[0], blame="job")], "allow-list"),
    (Fleet(8), ON, False, [dict(HW[0], blame="unknown")], "allow-list"),
    (Fleet(8), ON, False, [dict(HW[0], blame="config")], "allow-list"),
    (Fleet(8), ON, False, [dict(HW[0], status="acknowledged")], "allow-list"),
    (Fleet(8), ON, False, [dict(HW[0], severity="warning")], "allow-list"),
    (Fleet(0), ON, False, HW, "fleet-unknown"),
    (Fleet(8, (_out("n1", 5),)), ON, False, HW, "already-out"),
    (Fleet(8, (_out("a", 300), _out("b", 300))), ON, False, HW, "fleet-fraction"),
    (Fleet(100, (_out("a", 10), _out("b", 50))), ON, False, HW, "rate"),
    # not ours (maintenance) counts for neither limit; an old drain only for the fraction
    (Fleet(8, (_out("a", 5, ours=False), _out("b", 5, ours=False))), ON, False, HW, None),
    (Fleet(100, (_out("a", 61), _out("b", 300), _out("c", None))), ON, False, HW, None),
    (Fleet(8), ON, False, None, None),  # the caller's own policy: the budget only
])
def test_decide(fleet: Fleet, settings: Settings, kill: bool, findings: list | None,
                breaker: str | None) -> None:
    d = decide("n1", fleet, NOW, settings, findings=findings, kill_switch_on=kill)
    assert d.breaker == breaker, d
    assert d.drain is (breaker is None)
    if breaker:
        assert breaker in d.line("n1")


def test_allow_list_entries() -> None:
    f = [dict(HW[0], id="nvlink.down"), dict(HW[0], id="xid.79", blame="config"),
         dict(HW[0], id="ib.port-flap", blame="job")]
    assert allowed(f, ["blame:node"]) == ["nvlink.down"]
    assert allowed(f, ["xid"]) == ["xid.79"]  # a family: xid.*
    assert allowed(f, ["nv*", "xid.79"]) == ["nvlink.down", "xid.79"]
    assert allowed(f, ["ib"]) == []  # a job's blame never drains


def test_confirm_keeps_exactly_the_budget_of_simultaneous_drains() -> None:
    # 8 nodes all drained in the same second: each ranks them the same way
    fleet = Fleet(8, tuple(_out(f"n{i}", 0) for i in range(8)))
    kept = [n for n in (f"n{i}" for i in range(8)) if confirm(n, fleet, NOW, ON).drain]
    assert kept == ["n0", "n1"]
    refused = confirm("n5", fleet, NOW, ON)
    assert refused.breaker == "fleet-fraction" and "number 6 of 8" in refused.why


def test_settings_from_the_environment() -> None:
    s = settings_from({"GPUTRIAGE_DRAIN": "enforce", "GPUTRIAGE_DRAIN_PER_HOUR": "5",
                       "GPUTRIAGE_DRAIN_MAX_OUT": "20%", "GPUTRIAGE_DRAIN_MIN": "1",
                       "GPUTRIAGE_DRAIN_ALLOW": "xid,nvlink"})
    assert s.enforce and s.per_hour == Limit(absolute=5)
    assert s.out_at_once == Limit(percent=20, floor=1) and s.allow == ("xid", "nvlink")
    assert not settings_from({}).enforce
    assert settings_from({"GPUTRIAGE_DRAIN": "enforce"}, enforce=False).enforce is False
    for bad in ({"GPUTRIAGE_DRAIN": "maybe"}, {"GPUTRIAGE_DRAIN_PER_HOUR": "x%"},
                {"GPUTRIAGE_DRAIN_MAX_OUT": "120%"}, {"GPUTRIAGE_DRAIN_MIN": "two"}):
        with pytest.raises(ValueError):
            settings_from(bad)


def test_reasons_of_ours() -> None:
    assert is_ours("gputriage CRITICAL: xid.79 GPU 0000:9a:00.0")
    assert is_ours("NHC: check_cmd_status: gputriage CRITICAL: xid.79")
    assert not is_ours("Kill task failed") and not is_ours("not-gputriage-x")


# --- sinfo's answers ---------------------------------------------------------------

def _sinfo(*rows: str) -> str:
    """sinfo's answer to the fleet's ``-O`` read: each row "name;gres;state;time;reason;
    comment" (this test's shorthand) as sinfo prints it: a field whose size is left out
    (``Reason:<end>``) unpadded, each ended by the separator the read asks for."""
    return "".join("".join(f"{field}\x1f" for field in row.split(";", 5)) + "\n"
                   for row in rows)


def _runner(answers: str, calls: list[tuple[str, ...]]):
    def run(argv, timeout_s):
        calls.append(tuple(argv))
        return 0, answers if argv[0] == "sinfo" else "", ""
    return run


def test_slurm_fleet_reads_gpu_nodes_and_reasons() -> None:
    calls: list[tuple[str, ...]] = []
    answers = _sinfo(
        "gpu1;gpu:h100:8;drain;2026-12-06T15:30:00;gputriage CRITICAL: xid.79 | odd|text;",
        "gpu2;gpu:h100:8(S:0-1);idle;Unknown;none;(null)",
        "gpu3;gpu:8;down*;Unknown;Not responding;rack B | row 2",
        "cpu1;(null);drain;2026-12-06T15:00:00;gputriage CRITICAL: x;(null)",
        "gpu4;gpu:8;drng;Unknown;none;(null)")
    fleet = SlurmFleet(_runner(answers, calls)).read()
    assert fleet.size == 4  # cpu1 has no GPU
    by = {n.name: n for n in fleet.out}
    assert by["gpu1"].ours and by["gpu1"].since == datetime(2026, 12, 6, 15, 30)
    assert not by["gpu3"].ours and by["gpu3"].since is None
    assert not by["gpu4"].ours  # draining without a listed reason
    assert by["gpu1"].reason == "gputriage CRITICAL: xid.79 | odd|text"
    assert "gpu2" not in by
    assert [c[:3] for c in calls] == [("sinfo", "-h", "-N")]  # one answer of the controller


def test_a_sinfo_line_that_does_not_read_as_its_fields_counts_nothing() -> None:
    torn = _sinfo("gpu1;gpu:8;idle;Unknown;none;(null)") + "gpu2\x1fgpu:8\x1fidle\n"
    d = guard(SlurmFleet(_runner(torn, [])), "gpu1", "gputriage CRITICAL: x", ON,
              now=lambda: NOW, findings=HW, settle_s=0)
    assert not d.drain and d.breaker == "fleet-unknown" and "gpu2" in d.why


def test_slurm_fleet_without_gres_counts_every_node_and_errors_say_why() -> None:
    idle = _sinfo("a;(null);idle;Unknown;none;(null)", "b;(null);idle;Unknown;none;(null)")
    fleet = SlurmFleet(_runner(idle, [])).read()
    assert fleet.size == 2 and fleet.out == ()

    def failing(argv, timeout_s):
        return 1, "", "slurm_load_partitions: Unable to contact slurm controller\n"
    d = guard(SlurmFleet(failing), "a", "gputriage CRITICAL: x", ON, now=lambda: NOW,
              findings=HW, settle_s=0)
    assert d.breaker == "fleet-unknown" and "Unable to contact" in d.why


def test_kubernetes_fleet_counts_gpu_nodes_and_our_annotation() -> None:
    def node(name: str, gpu: bool, cordoned: bool = False, note: str | None = None) -> dict:
        return {"metadata": {"name": name, "annotations": {"gputriage/cordoned": note}
                             if note else {}},
                "spec": {"unschedulable": cordoned},
                "status": {"capacity": {"nvidia.com/gpu": "8" if gpu else "0"}}}
    fleet = fleet_of([node("g1", True, True, "2026-12-06T15:00:00Z gputriage CRITICAL"),
                      node("g2", True, True), node("g3", True), node("c1", False, True)])
    assert fleet.size == 3
    assert [(n.name, n.ours) for n in fleet.out] == [("g1", True), ("g2", False)]
    assert fleet.out[0].since is not None and fleet.out[0].since.hour == 15


# --- the rate's memory on Slurm: the node's Comment ---------------------------------

def test_the_comment_keeps_a_persons_text_and_the_last_hour() -> None:
    old = NOW - timedelta(hours=2)
    comment = comment_after(f"PSU swap, INC-7 gputriage-drains={old.isoformat()},"
                            "2026-12-06T15:30:00", NOW)
    assert comment == "PSU swap, INC-7 gputriage-drains=2026-12-06T15:30:00," \
                      "2026-12-06T16:00:00"
    assert split_comment(comment) == ("PSU swap, INC-7", [datetime(2026, 12, 6, 15, 30),
                                                         NOW])
    assert comment_after("(null)", NOW) == "gputriage-drains=2026-12-06T16:00:00"
    assert split_comment("gputriage-drains=garbage,") == ("", [])


def test_drained_resumed_and_failing_again_within_the_hour_meets_the_rate() -> None:
    """gpu1 and gpu2 were drained by gputriage and resumed: nothing is out, but their
    Comments remember the two drains, so the third node in the hour is refused."""
    calls: list[tuple[str, ...]] = []
    answers = _sinfo("gpu1;gpu:8;idle;Unknown;none;gputriage-drains=2026-12-06T15:20:00",
                     "gpu2;gpu:8;idle;Unknown;none;swapped riser "
                     "gputriage-drains=2026-12-06T15:21:00",
                     "gpu3;gpu:8;idle;Unknown;none;(null)",
                     "gpu4;gpu:8;idle;Unknown;none;gputriage-drains=2026-12-06T14:00:00")
    fleet = SlurmFleet(_runner(answers, calls)).read()
    assert fleet.out == () and len(fleet.drains(NOW)) == 2  # gpu4's is past the hour
    d = guard(SlurmFleet(_runner(answers, calls)), "gpu3", "gputriage CRITICAL: xid.79",
              ON, now=lambda: NOW, findings=HW, settle_s=0)
    assert not d.drain and d.breaker == "rate", d
    assert not [c for c in calls if c[0] == "scontrol"]
    # an hour later the same memory no longer refuses
    later = decide("gpu3", fleet, NOW + timedelta(minutes=45), ON, findings=HW)
    assert later.drain, later


def test_a_drain_in_place_and_its_comment_count_once() -> None:
    answers = _sinfo("gpu1;gpu:8;drain;2026-12-06T15:50:02;gputriage CRITICAL: xid.79;"
                     "gputriage-drains=2026-12-06T15:50:01",
                     "gpu2;gpu:8;idle;Unknown;none;(null)",
                     "gpu3;gpu:8;idle;Unknown;none;(null)")
    fleet = SlurmFleet(_runner(answers, [])).read()
    assert len(fleet.drains(NOW)) == 1
    assert decide("gpu2", fleet, NOW, ON, findings=HW).drain


class Slurmctld:
    """An in-memory controller behind ``sinfo`` and ``scontrol update``: it answers each
    sinfo from its state at that moment (the ``-O`` fields asked for, or ``-R``'s
    ``%N|%H|%E``), and applies ``between`` (another node's update) once, right after
    its ``after``-th answer."""

    def __init__(self, nodes: dict[str, tuple[str, str, str, str]]) -> None:
        self.nodes = {n: dict(zip(("state", "time", "reason", "comment"), v, strict=True))
                      for n, v in nodes.items()}
        self.answers = 0
        self.after = -1
        self.between: tuple[str, ...] = ()

    def _field(self, name: str, node: str) -> str:
        row = self.nodes[node]
        return {"NodeList": node, "Gres": "gpu:8", "StateCompact": row["state"],
                "TimeStamp": row["time"] or "Unknown", "Reason": row["reason"] or "none",
                "Comment": row["comment"] or "(null)"}[name]

    def run(self, argv, timeout_s):
        if argv[0] == "scontrol":
            self.update(*argv)
            return 0, "", ""
        if "-R" in argv:
            out = "".join(f"{n}|{r['time']}|{r['reason']}\n" for n, r in self.nodes.items()
                          if r["reason"])
        else:
            fields = [f.split(":", 1) for f in argv[argv.index("-O") + 1].split(",")]
            out = "".join("".join(f"{self._field(name, node)}{end}"
                                  for name, end in fields) + "\n" for node in self.nodes)
        self.answers += 1
        if self.answers == self.after:
            self.update(*self.between)
        return 0, out, ""

    def update(self, *argv: str) -> None:
        words = dict(a.split("=", 1) for a in argv[2:])
        row = self.nodes[words["nodename"]]
        if words.get("state") == "resume":
            row.update(state="idle", time="", reason="")
        if "comment" in words:
            row["comment"] = words["comment"]


@pytest.mark.parametrize("after", [0, 1, 2])
def test_a_drain_given_back_while_another_confirms_is_not_a_past_drain(after: int) -> None:
    """As on a real fleet: gpu2 and gpu5 drained in the controller's second 16:00:00 and
    keep the budget; gpu1, drained a second later (its node's clock still said 16:00:00
    when it wrote the Comment), gives its drain back while gpu5 reads the fleet to
    confirm. However the give-back falls among the reads, gpu5 keeps its drain: the
    Comment's time of a drain in place is never counted as a past drain."""
    drained = "gputriage CRITICAL: rule.misfiring"
    ledger = "gputriage-drains=2026-12-06T16:00:00"
    nodes = {f"gpu{i}": ("idle", "", "", "") for i in range(1, 9)}
    nodes.update({"gpu1": ("drain", "2026-12-06T16:00:01", drained, ledger),
                  "gpu2": ("drain", "2026-12-06T16:00:00", drained, ledger),
                  "gpu5": ("drain", "2026-12-06T16:00:00", drained, ledger)})
    ctld = Slurmctld(dict(sorted(nodes.items())))
    ctld.after = after
    ctld.between = ("scontrol", "update", "nodename=gpu1", "state=resume", "comment=")
    if after == 0:  # given back before the read
        ctld.update(*ctld.between)
    fleet = SlurmFleet(ctld.run).read()
    kept = confirm("gpu5", fleet, NOW + timedelta(seconds=2), ON)
    assert kept.drain, kept
    assert len(fleet.drains(NOW + timedelta(seconds=2))) in (2, 3)


def test_drain_records_its_time_and_a_given_back_drain_leaves_the_comment() -> None:
    calls: list[tuple[str, ...]] = []
    answers = _sinfo("gpu1;gpu:8;idle;Unknown;none;ticket 42 | rack B")
    slurm = SlurmFleet(_runner(answers, calls))
    slurm.read()
    slurm.drain("gpu1", "gputriage CRITICAL: xid.79", now=NOW)
    assert calls[-1] == ("scontrol", "update", "nodename=gpu1", "state=drain",
                         "reason=gputriage CRITICAL: xid.79",
                         "comment=ticket 42 | rack B gputriage-drains=2026-12-06T16:00:00")
    slurm.give_back("gpu1")
    assert calls[-1] == ("scontrol", "update", "nodename=gpu1", "state=resume",
                         "comment=ticket 42 | rack B")
    slurm.give_back("gpu1")  # a drain not ours (--undrain): the Comment untouched
    assert calls[-1] == ("scontrol", "update", "nodename=gpu1", "state=resume")


# --- every node at once -------------------------------------------------------------

class SharedScheduler:
    """An in-memory controller: drains stamped with its clock's second, as slurmctld."""

    def __init__(self, size: int, barrier: threading.Barrier | None = None) -> None:
        self.size = size
        self.barrier = barrier  # every node has read the fleet before any drains
        self.out: dict[str, OutNode] = {}
        self.lock = threading.Lock()
        self.gave_back: list[str] = []

    def read(self) -> Fleet:
        with self.lock:
            return Fleet(self.size, tuple(self.out.values()))

    def drain(self, node: str, reason: str) -> None:
        if self.barrier:
            self.barrier.wait()
        with self.lock:
            self.out[node] = OutNode(node, NOW, is_ours(reason), reason)

    def give_back(self, node: str) -> None:
        with self.lock:
            self.out.pop(node, None)
            self.gave_back.append(node)


@pytest.mark.parametrize("size, budget", [(8, 2), (64, 2)])
def test_every_node_failing_at_once_drains_exactly_the_budget(size: int,
                                                             budget: int) -> None:
    sched = SharedScheduler(size, threading.Barrier(size))
    barrier = threading.Barrier(size)
    decisions = {}

    def one(name: str) -> None:
        # all read the fleet before anyone drains: each alone would be allowed
        decisions[name] = guard(sched, name, "gputriage CRITICAL: rule.bad", ON,
                                now=lambda: NOW, findings=HW, settle_s=0.05,
                                sleep=lambda s: barrier.wait())
    threads = [threading.Thread(target=one, args=(f"n{i:02d}",)) for i in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    drained = sorted(sched.out)
    assert len(drained) == budget, drained
    assert len(sched.gave_back) == size - budget
    refused = [d for d in decisions.values() if not d.drain]
    assert len(refused) == size - budget
    assert {d.breaker for d in refused} <= {"fleet-fraction", "rate"}
    assert all("given back" in d.why for d in refused)


def test_observe_only_never_asks_the_scheduler(tmp_path: Path) -> None:
    class Untouchable:
        def read(self) -> Fleet:
            raise AssertionError("read")
        drain = give_back = read  # type: ignore[assignment]
    d = guard(Untouchable(), "n1", "gputriage x", DEFAULTS, now=lambda: NOW, findings=HW)
    assert d.breaker == "observe-only"
    d = guard(Untouchable(), "n1", "gputriage x", ON, now=lambda: NOW, findings=HW,
              kill_switch_on=True)
    assert d.breaker == "kill-switch"


@pytest.mark.parametrize("reason, check_exit, settings, breaker", [
    ("Kill task failed", 0, ON, None),
    ("Kill task failed", 1, ON, None),          # a warning is no reason to keep it out
    ("Prolog error", 0, ON, None),
    ("Epilog error", 0, ON, None),
    ("Kill task failed", 2, ON, "check"),      # the node is not clean after all
    ("Kill task failed", 3, ON, "check"),      # could not tell
    ("gputriage CRITICAL: xid.79", 0, ON, "ours"),
    ("Not responding", 0, ON, "not-a-job"),
    ("replacing PSU, INC-77", 0, ON, "not-a-job"),
    ("Kill task failed", 0, DEFAULTS, "observe-only"),
])
def test_decide_undrain(reason: str, check_exit: int, settings: Settings,
                        breaker: str | None) -> None:
    fleet = Fleet(8, (OutNode("n1", NOW, is_ours(reason), reason),))
    d = decide_undrain("n1", fleet, check_exit, settings)
    assert d.breaker == breaker and d.drain is (breaker is None), d
    assert decide_undrain("n2", fleet, 0, ON).breaker == "not-out"
    assert decide_undrain("n1", fleet, 0, ON, kill_switch_on=True).breaker == "kill-switch"
