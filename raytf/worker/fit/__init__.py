"""Keras's own ``model.fit`` under MWMS: the patch (``mwms``), its hooks, and resuming mid-fit.

Installed by the worker's ``patches`` (``raytf.keras.loop`` also takes the
metric state). The fit support and the checkpoint component never import each
other: they meet only through the loop's context.
"""
