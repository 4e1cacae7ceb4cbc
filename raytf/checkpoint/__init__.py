"""The checkpoint component: when to save, what a save writes, how a run commits and restores it.

Below both the worker and the driver, so neither reaches the other through it:
the worker side plans and writes a rank's part (``checkpointer``, ``schedule``,
``snapshot``, ``writer``), keeps copies in host memory (``host_copy``,
``emergency``, ``copy_cadence``) and restores (``restore``, ``unbroadcast``,
``structure``); the driver side commits the parts and keeps the best
(``commits``); ``layout`` and ``model_files`` name the files of a run
directory's ``checkpoints/`` and ``model/``. Nothing here imports the worker,
the driver, the group, Keras, the integrations or the tools.
"""
