#!/usr/bin/env bash
# Slurm Epilog: slurm.conf Epilog=/usr/local/lib/gputriage/epilog.sh, with healthcheck.sh
# in the same directory. Runs the gputriage health check in epilog mode.
exec "$(dirname "$(readlink -f "$0")")/healthcheck.sh" epilog
