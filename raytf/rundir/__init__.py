"""The run directory: storage (local or fsspec URL), committed checkpoints, state.json.

Shared by the driver (commits, status) and the workers (they write their
checkpoint parts), so every file layout of a run is written down once, here.
"""
