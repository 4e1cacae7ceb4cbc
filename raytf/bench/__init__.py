"""raytf's benchmark: one workload run three ways, side by side, in one process.

- ``raytf``: ``raytf.Trainer`` on an embedded or joined Ray cluster.
- ``mwms``: the floor, the same step function in hand-launched MWMS processes
  with ``TF_CONFIG`` on loopback (no Ray, no recovery).
- ``raytrain``: the peer, Ray Train's ``TensorflowTrainer`` running the same
  step function (needs the ``bench`` extra: ``ray[train]``).

Every way runs ``workloads.train`` through a small host adapter, so the only
difference measured is the layer around the step. Figures come from trace
files the workers write (wall-clock times on one machine), never from the
layers' own reports. Entry points: ``python jobs/benchmark.py`` and
``raytf bench``.
"""
