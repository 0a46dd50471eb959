#!/usr/bin/env bash
# Return a repaired node to service, on the node, as root:
#
#   resume.sh --reason "reseated GPU 4, INC-4821" [--gpu BUS] [--until TIME]
#             [--by NAME] [--dry-run] [FINDING-ID...]
#
# 1. Acknowledge (gputriage ack, kept in the node's history with who, when, why
#    and until when) what the repair dealt with:
#      FINDING-IDs          each of them, on --gpu BUS, else on the GPU the last
#                           result names for it;
#      --gpu BUS alone      every finding of that GPU;
#      neither              every current critical finding of the last result
#                           (GPUTRIAGE_RESULT_DIR/<node>.json), each with its GPU.
#    A finding on several GPUs is acknowledged by its id alone (on all of them).
# 2. Check again, as healthcheck.sh does (the result file is replaced).
# 3. Resume (scontrol update nodename=<node> state=resume) only when that check
#    exits 0 or 1. A critical still current (a new event after the
#    acknowledgement, another GPU, a finding not named) refuses, and so does a
#    check that could not tell or timed out: the acknowledgements stay recorded,
#    the node stays drained.
#
# A node drained by anyone for a job's reason (Slurm's "Kill task failed" after a
# job's unkillable processes, "Prolog error" / "Epilog error"):
#
#   resume.sh --job-fault [--dry-run]
#
# checks the node (as healthcheck.sh does) and returns it to service when the
# check exits 0 or 1, through `gputriage drain-guard --undrain` (the envelope of
# docs/unattended.md: the kill switch and observe-only apply; a gputriage drain or
# any other reason is left alone). Run it from a cron job or the epilog of the
# next job; the reason is logged.
#
# Exit status: 0 resumed; 1 refused (the check's findings on stderr); 64 usage;
# 70 an acknowledgement failed; 69 scontrol failed. --dry-run prints the
# gputriage ack and scontrol commands and runs neither (nor the check).
# Settings: those of healthcheck.sh (same GPUTRIAGE_HEALTHCHECK_CONF file);
# the history directory is the --state-dir in GPUTRIAGE_ARGS, else gputriage's
# default ($GPUTRIAGE_STATE_DIR, /var/lib/gputriage as root).

set -u

usage() {
    echo "usage: $0 --reason TEXT [--gpu BUS] [--until TIME] [--by NAME] [--dry-run]" \
        "[FINDING-ID...]" >&2
    exit 64
}

conf="${GPUTRIAGE_HEALTHCHECK_CONF:-/etc/default/gputriage-healthcheck}"
if [ -r "$conf" ]; then
    # shellcheck disable=SC1090
    . "$conf"
fi

reason="" gpu="" until_="" by="" dry_run="${GPUTRIAGE_DRY_RUN:-0}" job_fault=0
ids=()
while [ $# -gt 0 ]; do
    case "$1" in
        --reason) [ $# -ge 2 ] || usage; reason="$2"; shift 2 ;;
        --reason=*) reason="${1#*=}"; shift ;;
        --gpu) [ $# -ge 2 ] || usage; gpu="$2"; shift 2 ;;
        --gpu=*) gpu="${1#*=}"; shift ;;
        --until) [ $# -ge 2 ] || usage; until_="$2"; shift 2 ;;
        --until=*) until_="${1#*=}"; shift ;;
        --by) [ $# -ge 2 ] || usage; by="$2"; shift 2 ;;
        --by=*) by="${1#*=}"; shift ;;
        --dry-run) dry_run=1; shift ;;
        --job-fault) job_fault=1; shift ;;
        -h | --help) usage ;;
        --) shift; ids+=("$@"); break ;;
        -*) echo "$0: unknown option $1" >&2; usage ;;
        *) ids+=("$1"); shift ;;
    esac
done
if [ "$job_fault" = 0 ] && [ -z "${reason//[[:space:]]/}" ]; then
    echo "$0: --reason is required: say what was repaired" >&2
    usage
fi

GPUTRIAGE="${GPUTRIAGE:-gputriage}"
GPUTRIAGE_ARGS="${GPUTRIAGE_ARGS:---deadline 60}"
GPUTRIAGE_TIMEOUT="${GPUTRIAGE_TIMEOUT:-120}"
SCONTROL_TIMEOUT="${SCONTROL_TIMEOUT:-20}"
GPUTRIAGE_RESULT_DIR="${GPUTRIAGE_RESULT_DIR:-/var/log/gputriage}"
node="${SLURMD_NODENAME:-$(hostname -s 2>/dev/null || uname -n)}"
result="$GPUTRIAGE_RESULT_DIR/$node.json"

log() {
    echo "resume $node: $*" >&2
    if command -v logger >/dev/null 2>&1; then
        timeout 5 logger -t gputriage-resume -- "$node: $*" 2>/dev/null || true
    fi
}

if [ "$job_fault" = 1 ]; then
    # The node's own check first; drain-guard resumes only a job's drain, and only
    # when that check is clean.
    export GPUTRIAGE_DRAIN GPUTRIAGE_KILL_SWITCH
    mkdir -p "$GPUTRIAGE_RESULT_DIR" 2>/dev/null
    # shellcheck disable=SC2086
    timeout -k 10 "$GPUTRIAGE_TIMEOUT" "$GPUTRIAGE" check --json $GPUTRIAGE_ARGS \
        >"$result.tmp.$$" 2>"${result%.json}.stderr"
    rc=$?
    mv -f "$result.tmp.$$" "$result" 2>/dev/null || true
    guard=("$GPUTRIAGE" drain-guard "$node" --undrain --check-exit "$rc")
    [ "$dry_run" = 1 ] && guard+=(--dry-run)
    said="$(timeout -k 5 $((SCONTROL_TIMEOUT * 2 + 10)) "${guard[@]}" 2>&1)"
    grc=$?
    log "${said//[$'\n\r']/ }"
    [ "$grc" = 0 ] && exit 0
    exit 1
fi

# The check's history directory, where the acknowledgements must go.
state_args=()
# shellcheck disable=SC2086
set -- $GPUTRIAGE_ARGS
while [ $# -gt 0 ]; do
    case "$1" in
        --state-dir) [ $# -ge 2 ] && state_args=(--state-dir "$2"); shift ;;
        --state-dir=*) state_args=(--state-dir "${1#*=}") ;;
    esac
    shift
done

# "ID<TAB>BUS" for each current critical finding of the last result (all of
# them, or the ids given), BUS empty for a node-wide or several-GPU finding.
targets() {
    [ -s "$result" ] && command -v python3 >/dev/null 2>&1 || return 0
    timeout 10 python3 - "$result" "$@" 2>/dev/null <<'PY'
import json, sys
try:
    with open(sys.argv[1], encoding="utf-8") as fh:
        doc = json.load(fh)
    asked = sys.argv[2:]
    seen = set()
    for f in doc.get("findings", []):
        if not isinstance(f, dict) or f.get("status", "current") != "current":
            continue
        fid = str(f.get("id", ""))
        if (fid not in asked) if asked else f.get("severity") != "critical":
            continue
        scopes = [f.get("scope"), *(f.get("also") or [])]
        buses = {s.get("pci_bus_id") for s in scopes if isinstance(s, dict)} - {None}
        line = f"{fid}\t{buses.pop() if len(buses) == 1 else ''}"
        if fid and line not in seen:
            seen.add(line)
            print(line)
except Exception:
    pass
PY
}

ack_cmds=()  # one "ID<TAB>BUS" per acknowledgement
if [ ${#ids[@]} -eq 0 ] && [ -n "$gpu" ]; then
    ack_cmds=($'\t'"$gpu")
elif [ -n "$gpu" ]; then
    for id in "${ids[@]}"; do ack_cmds+=("$id"$'\t'"$gpu"); done
else
    while IFS= read -r line; do
        [ -n "$line" ] && ack_cmds+=("$line")
    done < <(targets "${ids[@]}")
    for id in "${ids[@]}"; do  # an id the result does not name: by its id alone
        printf '%s\n' "${ack_cmds[@]}" | cut -f1 | grep -qxF -- "$id" || ack_cmds+=("$id"$'\t')
    done
fi

extra=()
[ -n "$until_" ] && extra+=(--until "$until_")
[ -n "$by" ] && extra+=(--by "$by")
if [ ${#ack_cmds[@]} -eq 0 ]; then
    echo "resume $node: nothing to acknowledge (no current critical in $result)" >&2
fi
for line in "${ack_cmds[@]}"; do
    id="${line%%$'\t'*}" bus="${line#*$'\t'}"
    cmd=("$GPUTRIAGE" ack)
    [ -n "$id" ] && cmd+=("$id")
    [ -n "$bus" ] && cmd+=(--gpu "$bus")
    cmd+=(--reason "$reason" "${extra[@]}" "${state_args[@]}")
    if [ "$dry_run" = 1 ]; then
        echo "dry run: ${cmd[*]}"
    elif ! "${cmd[@]}"; then
        echo "resume $node: gputriage ack failed; node left as is" >&2
        exit 70
    fi
done

resume=(scontrol update "nodename=$node" state=resume)
if [ "$dry_run" = 1 ]; then
    echo "dry run: ${resume[*]}"
    exit 0
fi

# Check again: only an unacknowledged critical (exit 2), or no verdict at all,
# keeps the node out.
mkdir -p "$GPUTRIAGE_RESULT_DIR" 2>/dev/null
# shellcheck disable=SC2086
timeout -k 10 "$GPUTRIAGE_TIMEOUT" "$GPUTRIAGE" check --json $GPUTRIAGE_ARGS \
    >"$result.tmp.$$" 2>"${result%.json}.stderr"
rc=$?
mv -f "$result.tmp.$$" "$result" 2>/dev/null || true
case "$rc" in
    0 | 1) ;;
    2)
        echo "resume $node: refused, still critical after the acknowledgement:" \
            "$(targets | cut -f1 | sort -u | paste -sd, -) (see $result)" >&2
        exit 1
        ;;
    *)
        echo "resume $node: refused, the check did not conclude (exit $rc; see" \
            "${result%.json}.stderr)" >&2
        exit 1
        ;;
esac
if ! timeout -k 5 "$SCONTROL_TIMEOUT" "${resume[@]}"; then
    echo "resume $node: scontrol failed or timed out" >&2
    exit 69
fi
echo "resume $node: resumed (check exit $rc), acknowledged ${#ack_cmds[@]} finding(s)"
