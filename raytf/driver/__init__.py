"""The driver: one run's state machine and the policies it asks.

The controller owns the loop and every action; the policies beside it
(failure, resize, watchdog; the checkpoint commits, from ``raytf.checkpoint``)
only decide, from what the workers said, and hand the controller typed
decisions. The driver reaches the workers through ``raytf.group`` and the types
of ``raytf.messages`` only, never through the actor's module. A run ends in
``outcome``: its ``Result`` built from the run's record.
"""
