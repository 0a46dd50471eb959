"""NCCL logs at scale: the input of `gputriage nccl`, the scan of large logs and their
summary across ranks."""
