"""Log records of every prefix :mod:`gputriage.parsers.kernel_log` knows (a kernel line,
or any program's syslog line): what a kernel-log gate must let through, wherever a
paste holds one."""

from __future__ import annotations

# one record of each prefix kernel_log knows (a kernel line, or any program's syslog line)
RECORDS = [
    "[   12.345678] hello world",
    "<4>[   12.345678] hello world",
    "> [+0.000123] hello world",
    "[Mar 2 10:11] hello world",
    "[Sun Mar  2 10:11:12 2025] hello world",
    "6,1234,5678901,-;hello world",
    "mlx5_core 0000:3b:00.0: hello world",
    "nv_peer_mem: hello world",
    "modprobe: FATAL: could not insert 'foo'",
    "2025-03-02T10:11:12,345678+00:00 hello world",
    "  kernel: hello world",
    '{"_TRANSPORT":"kernel","MESSAGE":"hello world"}',
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "NVRM:GPU at PCI 0000:3b:00 lost",
    "nvidia-uvm: hello world",
    "nvidia_drm 0000:3b:00.0 hello world",
    "kern  :warn  : [   12.345678] hello world",
    "kern:warn:[   12.345678] hello world",
    "kern  :err   : 2025-01-17T15:36:15,345059+00:00 hello world",
    "kern:err:2025-01-17T15:36:15 hello world",
    "user:notice:2025-01-17T15:36:15 hello world",
    "Wed Mar 13 05:43:31 2024 kern.err kernel: hello world",
    "1709876543.123456 gpu-node-018 kernel: hello world",
    "Mar  2 10:11:12 gpu-node-018 kernel[0]: hello world",
    "172.20.0.2: kern: warning: [2024-03-02T10:11:12.123Z]: hello world",
    "Mar  2 10:11:12 gpu-node-018 systemd[1]: hello world",
    "2025-03-02T10:11:12.123456+00:00 gpu-node-018 nv-fabricmanager[812]:\thello world",
    "2025-03-02 10:11:12 gpu-node-018 foo: hello world",
    "\x1b[32m[   12.345678]\x1b[0m hello world",
    "\x1b[1mMar  2 10:11:12\x1b[0m gpu-node-018 systemd[1]:\x1b[0m hello world",
]
