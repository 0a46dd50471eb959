"""A sample line of every row of the NCCL and node message catalogs, as the tools print
it: read by the tests that check explain finds each row and that explain and analyze give
it one verdict."""

from __future__ import annotations

SAMPLES = {
    "nccl.no-socket-interface": "host:1:1 [0] bootstrap.cc:42 NCCL WARN Bootstrap : no "
                                "socket interface found",
    "nccl.ofi-register-failed": "ip-10-0-0-1:7:7 [0] NCCL WARN NET/OFI Unable to register "
                                "memory (type = 2) for device 0. RC: -22, Error: Invalid argument",
    "nccl.ib-memlock": "node1:2:2 [1] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_reg_mr failed "
                       "with error Cannot allocate memory",
    "nccl.shm-too-small": "node1:7:7 [0] include/shm.h:28 NCCL WARN Error while creating shared "
                          "memory segment /dev/shm/nccl-x (size 9637888)",
    "nvidia-smi.inforom-corrupted": "WARNING: infoROM is corrupted at gpu 0000:3B:00.0",
    "driver.gsp-firmware-missing": "NVRM: RmFetchGspRmImages: No firmware image found",
}
