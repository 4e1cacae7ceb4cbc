"""Keras's own ``model.fit`` under MWMS: the patch (``mwms``), its hooks, and resuming mid-fit.

Reached from the worker only through the context and the patches: the fit
support and the checkpoint component never import each other.
"""
