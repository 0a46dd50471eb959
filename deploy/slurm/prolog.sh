#!/usr/bin/env bash
# Slurm Prolog: slurm.conf Prolog=/usr/local/lib/gputriage/prolog.sh, with healthcheck.sh
# in the same directory. Runs the gputriage health check in prolog mode.
exec "$(dirname "$(readlink -f "$0")")/healthcheck.sh" prolog
