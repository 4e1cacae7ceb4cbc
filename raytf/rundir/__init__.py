"""The run directory: storage (local or fsspec URL), state.json, the run's logs.

Shared by the driver (status, records) and the workers (they write their
checkpoint parts through its storage). The checkpoints' and the model's file
layout is the checkpoint component's (``raytf.checkpoint.layout``,
``raytf.checkpoint.model_files``), which stands above this package.
"""
