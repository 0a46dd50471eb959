#!/usr/bin/env bash
# gputriage node health check for Slurm: HealthCheckProgram, Prolog, Epilog,
# or any NHC-style caller that reads the exit status.
#
#   healthcheck.sh [healthcheck|prolog|epilog|nhc]   (default: healthcheck)
#
# It runs `gputriage check --json` under a hard timeout, keeps the whole result
# (GPUTRIAGE_RESULT_DIR/<node>.json), and maps gputriage's exit status (Nagios
# convention) to an action:
#   0 OK        nothing
#   1 WARNING   log (syslog via logger, and stderr); a job's fault is at most this
#   2 CRITICAL  drain this node, through `gputriage drain-guard` (the envelope of
#               docs/unattended.md: kill switch, observe-only until
#               GPUTRIAGE_DRAIN=enforce, allow-list, a budget per hour and at once):
#               scontrol update nodename=... state=drain
#               reason="gputriage CRITICAL: xid.79 GPU 0000:9a:00.0, ..." (the
#               current critical findings and their GPUs; acknowledged or past
#               ones are never named). A refused drain is logged with its breaker
#               and leaves the node in service (exit 0, also in prolog/epilog).
#   3 UNKNOWN   GPUTRIAGE_ON_UNKNOWN: log (default), drain, or ignore
#   timeout     GPUTRIAGE_ON_TIMEOUT: log (default), drain, or ignore
#   other       (usage error, gputriage missing or broken) log only: a broken
#               tool must never drain a fleet.
#
# Repair -> acknowledge -> resume (docs/slurm.md). A check judges the whole
# boot's kernel log, so after a repair that leaves the node up (a GPU reset, a
# reseat with the same boot) the old Xid would drain the node again. Run
# resume.sh on the node instead of a bare `scontrol update state=resume`:
#   resume.sh --reason "GPU reset after Xid 48, INC-4821"
# acknowledges every current critical of the last result (gputriage ack, kept
# in the node's history with who, when and why), checks again, and resumes
# only when nothing unacknowledged is critical. A new event after the
# acknowledgement is current again and drains again.
#
# Exit status of this script: 0, except after a drain in prolog/epilog mode,
# where it exits GPUTRIAGE_FAIL_EXIT (default 1) so that Slurm drains the node
# itself ("Prolog error") and requeues the job (prolog) or keeps the node out
# of service (epilog); the reason set here stays. HealthCheckProgram
# ignores the exit status, which is why the script drains by itself.
# nhc mode never calls scontrol: where it would drain, it prints the reason
# on stdout and exits GPUTRIAGE_FAIL_EXIT, and the caller (LBNL NHC's
# check_cmd_status, or any monitor) marks the node down its own way.
#
# Settings (environment, or a file named by GPUTRIAGE_HEALTHCHECK_CONF, or
# /etc/default/gputriage-healthcheck when readable; the file is sourced):
#   GPUTRIAGE            the gputriage command          (default: gputriage)
#   GPUTRIAGE_ARGS       extra arguments to check       (default: --deadline 60)
#   GPUTRIAGE_TIMEOUT    seconds before the check is killed        (default: 120)
#   SCONTROL_TIMEOUT     seconds for each scontrol call            (default: 20)
#   GPUTRIAGE_RESULT_DIR where <node>.json is kept (default: /var/log/gputriage)
#   GPUTRIAGE_ON_UNKNOWN log | drain | ignore                      (default: log)
#   GPUTRIAGE_ON_TIMEOUT log | drain | ignore                      (default: log)
#   GPUTRIAGE_FAIL_EXIT  exit after a drain: prolog, epilog, nhc    (default: 1)
#   GPUTRIAGE_DRY_RUN    1: print the scontrol command instead of running it
#   GPUTRIAGE_DRAIN      observe (default: log what would be drained) | enforce
#   GPUTRIAGE_KILL_SWITCH  the file that turns every recipe observe-only
#                        (default: /etc/gputriage/observe-only)
#   GPUTRIAGE_DRAIN_PER_HOUR, GPUTRIAGE_DRAIN_MAX_OUT  N or P% (default 2%, 10%)
#   GPUTRIAGE_DRAIN_MIN  the floor of a percentage limit               (default: 2)
#   GPUTRIAGE_DRAIN_ALLOW  what may drain (default: blame:node, the hardware)

set -u

conf="${GPUTRIAGE_HEALTHCHECK_CONF:-/etc/default/gputriage-healthcheck}"
if [ -r "$conf" ]; then
    # shellcheck disable=SC1090
    . "$conf"
fi

# The mode: the argument, else what Slurm says it runs us as (Prolog= and
# Epilog= in slurm.conf take no arguments), else healthcheck.
case "${SLURM_SCRIPT_CONTEXT:-}" in
    prolog_slurmd) default_mode=prolog ;;
    epilog_slurmd) default_mode=epilog ;;
    *) default_mode=healthcheck ;;
esac
mode="${1:-$default_mode}"
case "$mode" in
    healthcheck | prolog | epilog | nhc) ;;
    *)
        echo "usage: $0 [healthcheck|prolog|epilog|nhc]" >&2
        exit 64
        ;;
esac

GPUTRIAGE="${GPUTRIAGE:-gputriage}"
GPUTRIAGE_ARGS="${GPUTRIAGE_ARGS:---deadline 60}"
GPUTRIAGE_TIMEOUT="${GPUTRIAGE_TIMEOUT:-120}"
SCONTROL_TIMEOUT="${SCONTROL_TIMEOUT:-20}"
GPUTRIAGE_RESULT_DIR="${GPUTRIAGE_RESULT_DIR:-/var/log/gputriage}"
GPUTRIAGE_ON_UNKNOWN="${GPUTRIAGE_ON_UNKNOWN:-log}"
GPUTRIAGE_ON_TIMEOUT="${GPUTRIAGE_ON_TIMEOUT:-log}"
GPUTRIAGE_FAIL_EXIT="${GPUTRIAGE_FAIL_EXIT:-1}"
GPUTRIAGE_DRY_RUN="${GPUTRIAGE_DRY_RUN:-0}"
# sinfo twice, scontrol once, sinfo twice again to confirm: bounded as a whole
GUARD_TIMEOUT=$((SCONTROL_TIMEOUT * 5 + 10))
# The envelope's settings, read by gputriage drain-guard (docs/unattended.md):
export GPUTRIAGE_DRAIN GPUTRIAGE_KILL_SWITCH GPUTRIAGE_DRAIN_PER_HOUR \
    GPUTRIAGE_DRAIN_MAX_OUT GPUTRIAGE_DRAIN_MIN GPUTRIAGE_DRAIN_ALLOW GPUTRIAGE_DRAIN_SETTLE

# Slurm's name for this node (NodeName may differ from the host name).
node="${SLURMD_NODENAME:-$(hostname -s 2>/dev/null || uname -n)}"

log() {
    # One line to stderr (slurmd log for prolog/epilog) and to syslog.
    echo "gputriage-healthcheck[$mode] $node: $*" >&2
    if command -v logger >/dev/null 2>&1; then
        timeout 5 logger -t gputriage-healthcheck -- "$node: $*" 2>/dev/null || true
    fi
}

# Where the JSON result goes: the result directory, else a private temp file.
if mkdir -p "$GPUTRIAGE_RESULT_DIR" 2>/dev/null && [ -w "$GPUTRIAGE_RESULT_DIR" ]; then
    result="$GPUTRIAGE_RESULT_DIR/$node.json"
else
    result="$(mktemp "${TMPDIR:-/tmp}/gputriage-$node.XXXXXX")" || result=/dev/null
fi
tmp_result="$result.tmp.$$"
err_file="${result%.json}.stderr"
if [ "$result" = /dev/null ]; then
    tmp_result=/dev/null
    err_file=/dev/null
fi

# Word splitting of GPUTRIAGE_ARGS is intended (several options).
# shellcheck disable=SC2086
timeout -k 10 "$GPUTRIAGE_TIMEOUT" "$GPUTRIAGE" check --json $GPUTRIAGE_ARGS \
    >"$tmp_result" 2>"$err_file"
rc=$?
if [ "$tmp_result" != /dev/null ]; then
    mv -f "$tmp_result" "$result" 2>/dev/null || true
fi

# A short reason: the current findings of the given severities (a comma list)
# and their GPUs, from the JSON result, the node's side first, the job's marked
# "(job)"; acknowledged and past findings are not named. python3 when
# available; a pointer to the result otherwise.
summary() {
    local named=""
    if [ -s "$result" ] && command -v python3 >/dev/null 2>&1; then
        named="$(timeout 10 python3 - "$result" "${1:-critical}" 2>/dev/null <<'PY'
import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as fh:
        doc = json.load(fh)
    wanted = set(sys.argv[2].split(","))
    named = {}  # (job side?, id) -> GPU bus ids, in the result's order
    for f in doc.get("findings", []):
        if not isinstance(f, dict) or f.get("severity") not in wanted:
            continue
        if f.get("status", "current") != "current":
            continue
        key = (f.get("blame") in ("job", "job-config"), str(f.get("id", "?")))
        buses = named.setdefault(key, [])
        for scope in [f.get("scope"), *(f.get("also") or [])]:
            bus = scope.get("pci_bus_id") if isinstance(scope, dict) else None
            if bus and bus not in buses:
                buses.append(bus)
    parts = []
    for (job, fid), buses in sorted(named.items(), key=lambda item: item[0][0]):
        gpus = " ".join(buses[:2]) + (f" +{len(buses) - 2}" if len(buses) > 2 else "")
        where = f" GPU {gpus}" if len(buses) == 1 else f" GPUs {gpus}" if buses else ""
        parts.append(fid + where + (" (job)" if job else ""))
    text = ""
    for n, part in enumerate(parts):
        if len(text) + len(part) > 150:
            text += f", +{len(parts) - n} more"
            break
        text += (", " if text else "") + part
    print(text)
except Exception:
    pass
PY
)"
    fi
    echo "${named:-see $result}"
}

drain() {
    # Every drain goes through gputriage's envelope (docs/unattended.md): the kill
    # switch, observe-only (the default until GPUTRIAGE_DRAIN=enforce), the allow-list
    # (judged on the result's findings when $2 is "findings") and the fleet's budget,
    # counted on the controller. A refusal leaves the node in service, says which
    # breaker refused, and the result still says critical.
    local reason="gputriage $1"
    reason="${reason//[$'\n\r\t']/ }"
    reason="${reason:0:200}"
    local guard=("$GPUTRIAGE" drain-guard "$node" --reason "$reason")
    [ "${2:-}" = findings ] && [ -s "$result" ] && guard+=(--result "$result")
    if [ "$mode" = nhc ] || [ "$GPUTRIAGE_DRY_RUN" = 1 ]; then
        guard+=(--dry-run)  # decide only: NHC (or nobody) drains
    fi
    local said grc
    said="$(timeout -k 5 "$GUARD_TIMEOUT" "${guard[@]}" 2>&1)"
    grc=$?
    said="${said//[$'\n\r']/ }"
    case "$grc" in
        0) ;;
        1)
            log "CRITICAL, $said"
            exit 0
            ;;
        *)
            log "could not drain ($reason): drain-guard exit $grc: ${said:-no answer}"
            exit 0
            ;;
    esac
    if [ "$mode" = nhc ]; then
        echo "$reason"
        log "unhealthy: $reason"
        exit "$GPUTRIAGE_FAIL_EXIT"
    elif [ "$GPUTRIAGE_DRY_RUN" = 1 ]; then
        echo "dry run: scontrol update nodename=$node state=drain reason=$reason ($said)"
    else
        log "$said"
    fi
    if [ "$mode" != healthcheck ]; then
        exit "$GPUTRIAGE_FAIL_EXIT"
    fi
    exit 0
}

# Apply a configurable policy (log | drain | ignore) for an outcome.
apply() {
    local policy="$1" what="$2"
    case "$policy" in
        drain) drain "$what" ;;
        ignore) ;;
        *) log "$what" ;;
    esac
    exit 0
}

case "$rc" in
    0) exit 0 ;;
    1) log "WARNING: $(summary critical,warning)"; exit 0 ;;
    2) drain "CRITICAL: $(summary critical)" findings ;;
    3) apply "$GPUTRIAGE_ON_UNKNOWN" "UNKNOWN: could not tell ($result)" ;;
    124 | 137) apply "$GPUTRIAGE_ON_TIMEOUT" "timed out after ${GPUTRIAGE_TIMEOUT}s" ;;
    *) log "gputriage failed to run (exit $rc), node left as is"; exit 0 ;;
esac
