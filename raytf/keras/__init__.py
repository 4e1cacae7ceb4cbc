"""Keras on the cluster: ``KerasTrainer``, ``Session``, and the worker loop they share.

``import keras`` inside this package is the Keras library, never this
package: every import here is absolute.
"""
