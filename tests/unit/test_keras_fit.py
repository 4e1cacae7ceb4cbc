"""The narrow Keras patch behind ``model.fit`` under multi-worker MWMS (raytf.worker.fit.mwms).

The first test is the tripwire the patch promises: it fails as soon as the
installed Keras is not a version the patch was checked against, or no longer
has the code it works around (then re-run the multi-worker ``fit`` test without
the patch, and drop or adapt it). The multi-worker behaviour itself is tested
on real MWMS workers in tests/integration/test_keras_fit.py.
"""

import numpy as np
import pytest

from raytf.worker.fit import mwms as keras_fit


def test_installed_keras_still_has_the_code_the_patch_works_around():
    assert keras_fit.why_not_patchable() is None


def test_an_unchecked_keras_version_is_left_unpatched(monkeypatch):
    import keras

    monkeypatch.setattr(keras, "__version__", "3.99.0")
    assert keras_fit.why_not_patchable() == ("keras 3.99.0 is installed, raytf supports 3.15.*")


def test_the_patched_fit_delegates_to_keras_outside_multi_worker_mwms():
    import keras

    assert keras_fit.install() and keras_fit.install()  # once per process, idempotent
    from keras.src.backend.tensorflow import trainer

    assert trainer.reduce_per_replica.__wrapped__ is not None
    x = np.random.RandomState(0).randn(64, 4).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]


def test_steps_per_execution_above_one_is_refused_with_what_to_use():
    class Model:
        steps_per_execution = 4

    with pytest.raises(keras_fit.KerasMultiWorkerError, match="steps_per_execution=1"):
        keras_fit.check_steps_per_execution(Model())
    Model.steps_per_execution = 1
    keras_fit.check_steps_per_execution(Model())


def test_jit_compile_on_cpu_workers_is_refused_with_what_to_use():
    """Seen on 2 CPU workers: "Only compiling NCCL/auto collective is supported, got:
    ring" from the first step, after the trace. GPUs (NCCL) may compile it."""

    class Model:
        jit_compile = True

    with pytest.raises(keras_fit.KerasMultiWorkerError, match=r"jit_compile=False .*xla"):
        keras_fit.check_jit_compile(Model(), has_gpus=False)
    keras_fit.check_jit_compile(Model(), has_gpus=True)
    Model.jit_compile = "auto"  # resolved by Keras, never to True on CPU or under a strategy
    keras_fit.check_jit_compile(Model(), has_gpus=False)
