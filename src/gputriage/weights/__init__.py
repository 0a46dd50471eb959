"""``gputriage weights``: how big a model is, where it fits, how long it takes to load.

Sizes come from the model's files (safetensors headers, sharded indexes, GGUF headers,
``config.json``), never from its name; the arithmetic (fit per GPU model, load time per
storage tier, the herd of replicas starting together) is plain functions of them.
Nothing here loads a tensor or writes a byte.
"""
