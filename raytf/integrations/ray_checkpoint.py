"""Ray Train's checkpoint objects on raytf: a directory of files, local or in object storage.

``Checkpoint`` is what ``ray_train.report(checkpoint=...)`` stores and
``get_checkpoint()`` returns. ``TensorflowCheckpoint`` is Ray's Keras-model
flavour: ``from_model`` (a ``model.keras`` file), ``from_h5``,
``from_saved_model`` and ``get_model``, with the model's file name in the
directory's ``.metadata.json`` as Ray keeps it, so a directory written by
either reads back with either. Ray's preprocessors belong to Ray Data's
pipelines, which raytf does not run: passing one is refused with what to do.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from raytf.checkpoint.layout import copy_flat, safe_name
from raytf.errors import ConfigError
from raytf.rundir.storage import Storage

METADATA = ".metadata.json"  # Ray's name for a checkpoint's metadata file


@dataclass(frozen=True)
class Checkpoint:
    """A directory of files, local or in object storage (Ray Train's ``Checkpoint``).

    Args:
        path: The directory: a local path or a URL (``s3://``, ``gs://``, ...).
    """

    path: str

    @classmethod
    def from_directory(cls, path: str | os.PathLike) -> Checkpoint:
        """Ray's constructor: the checkpoint of the files in ``path`` (not copied here).

        Args:
            path: A local directory or a URL.
        """
        return cls(os.fspath(path))

    def to_directory(self, path: str | None = None) -> str:
        """Copy the files, subdirectories included, into ``path`` (a new temporary
        directory by default).

        Args:
            path: A local directory. Default None: a new temporary one.

        Returns:
            The local directory written.
        """
        path = path or tempfile.mkdtemp(prefix="raytf-checkpoint-")
        copy_flat(Storage(self.path), dest=path)  # a raytf checkpoint's files side by side
        return path

    @contextlib.contextmanager
    def as_directory(self) -> Iterator[str]:
        """A local directory holding the files, for the ``with`` block.

        Returns:
            A context manager giving the directory: the checkpoint's own when local,
                else a temporary copy removed at the block's end.
        """
        if Storage(self.path).local:
            yield self.path
            return
        path = self.to_directory()
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def get_metadata(self) -> dict[str, Any]:
        """The checkpoint's ``.metadata.json``, as Ray Train keeps it.

        Returns:
            The metadata dict; empty when the file does not exist.

        Raises:
            ConfigError: The file is not a JSON object.
        """
        storage = Storage(self.path)
        if not storage.exists(METADATA):
            return {}
        try:
            doc = storage.read_json(METADATA)
        except ValueError as exc:
            raise ConfigError(f"{storage.url(METADATA)} is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"{storage.url(METADATA)} is not a JSON object")
        return doc

    def update_metadata(self, metadata: dict[str, Any]) -> None:
        """Merge ``metadata`` into ``.metadata.json`` (written whole, atomically).

        Args:
            metadata: JSON-able keys and values; they replace those of the same key.

        Raises:
            ConfigError: The existing file is not a JSON object.
        """
        Storage(self.path).write_json_atomic({**self.get_metadata(), **metadata}, METADATA)


def _no_preprocessor(preprocessor: Any) -> None:
    if preprocessor is not None:
        raise ConfigError(
            "TensorflowCheckpoint(preprocessor=...) is not supported: raytf does not run "
            "Ray Data preprocessors; apply it in the loop or before the data reaches the "
            "trainer, and save its state beside the model yourself"
        )


class TensorflowCheckpoint(Checkpoint):
    """Ray Train's ``TensorflowCheckpoint``: a Keras model in a checkpoint directory."""

    MODEL_FILENAME_KEY = "_model_filename"

    @classmethod
    def from_model(cls, model: Any, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """A checkpoint holding ``model`` as ``model.keras``, in a new temporary directory.

        Args:
            model: A Keras model.
            preprocessor: Ray Data's; refused. Default None.

        Raises:
            ConfigError: A ``preprocessor`` was given.
        """
        _no_preprocessor(preprocessor)
        path = tempfile.mkdtemp(prefix="raytf-tf-checkpoint-")
        model.save(os.path.join(path, "model.keras"))
        return cls._named(path, "model.keras")

    @classmethod
    def from_h5(cls, file_path: str, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """A checkpoint holding a copy of an ``.h5`` model file.

        Args:
            file_path: A local ``.h5`` file.
            preprocessor: Ray Data's; refused. Default None.

        Raises:
            ConfigError: ``file_path`` is not an ``.h5`` file, or a ``preprocessor``.
        """
        _no_preprocessor(preprocessor)
        if not os.path.isfile(file_path) or not file_path.endswith(".h5"):
            raise ConfigError(f"TensorflowCheckpoint.from_h5 needs an .h5 file, got {file_path!r}")
        path = tempfile.mkdtemp(prefix="raytf-tf-checkpoint-")
        shutil.copy(file_path, path)
        return cls._named(path, os.path.basename(file_path))

    @classmethod
    def from_saved_model(cls, dir_path: str, *, preprocessor: Any = None) -> TensorflowCheckpoint:
        """A checkpoint holding a copy of a SavedModel directory.

        Args:
            dir_path: A local SavedModel directory.
            preprocessor: Ray Data's; refused. Default None.

        Raises:
            ConfigError: ``dir_path`` is not a directory, or a ``preprocessor``.
        """
        _no_preprocessor(preprocessor)
        if not os.path.isdir(dir_path):
            raise ConfigError(
                f"TensorflowCheckpoint.from_saved_model needs a directory, got {dir_path!r}"
            )
        path = os.path.join(tempfile.mkdtemp(prefix="raytf-tf-checkpoint-"), "model")
        shutil.copytree(dir_path, path)
        return cls._named(path, ".")

    @classmethod
    def _named(cls, path: str, filename: str) -> TensorflowCheckpoint:
        checkpoint = cls(path)
        checkpoint.update_metadata({cls.MODEL_FILENAME_KEY: filename})
        return checkpoint

    def get_model(self) -> Any:
        """The Keras model in the checkpoint (Keras 3, or tf_keras under
        ``TF_USE_LEGACY_KERAS=1``, as ``tf.keras`` resolves).

        Returns:
            The Keras model, or the loaded SavedModel for ``from_saved_model``'s.

        Raises:
            ConfigError: The metadata names no model file, or one outside the directory.
        """
        filename = self.get_metadata().get(self.MODEL_FILENAME_KEY)
        if filename is None:
            raise ConfigError(
                f"{self.path} names no model ({self.MODEL_FILENAME_KEY} missing from its "
                f"{METADATA}): make it with TensorflowCheckpoint.from_model, from_h5 or "
                "from_saved_model"
            )
        import tensorflow as tf

        if filename != "." and not safe_name(filename):  # "." : the directory is the model
            raise ConfigError(f"{self.path}: model file {filename!r} is outside the directory")
        with self.as_directory() as directory:
            target = os.path.join(directory, filename)
            if filename == ".":
                return tf.saved_model.load(target)
            return tf.keras.models.load_model(target)
