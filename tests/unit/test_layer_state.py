"""State Keras layers hold outside ``layer.weights`` or outside what MWMS keeps equal, through
a real checkpoint on disk: random layers' seed generators, and the BatchNormalization
statistics each rank updates on its own (``raytf.checkpoint.restore.with_seed_states``,
``raytf.checkpoint.rank_local``)."""

import keras
import numpy as np
import tensorflow as tf

from raytf.checkpoint.layout import commit, latest_intact

from .test_worker_checkpointer import checkpointer, values

X = np.arange(2 * 4 * 4, dtype=np.float32).reshape(2, 4, 4, 1) / 10


def random_model():
    """A seeded model whose forward pass in training draws: a flip and a Dropout mask."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((4, 4, 1)),
            keras.layers.RandomFlip("horizontal"),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(3),
        ]
    )
    return model


def test_random_layers_draw_on_after_a_restore_as_they_would_have(storage, parts):
    model = random_model()
    ck = checkpointer(storage, parts)
    ck.track({"model": model})
    for _ in range(3):  # three steps' draws move the seed generators on
        model(X, training=True)
    ck.save_now(3, "session")
    commit(storage, parts, world_size=1, attempt=1)
    next_draw = model(X, training=True).numpy()

    untouched = random_model()  # the same seed, no restore: step 0's draws
    assert not np.array_equal(untouched(X, training=True).numpy(), next_draw)

    fresh = random_model()
    again = checkpointer(storage, [], restore_url=latest_intact(storage).path)
    assert again.track({"model": fresh}) == 3
    np.testing.assert_array_equal(fresh(X, training=True).numpy(), next_draw)


def bn_model(moving: float):
    model = keras.Sequential(
        [keras.Input((3,)), keras.layers.BatchNormalization(), keras.layers.Dense(2)]
    )
    bn = model.layers[0]
    bn.moving_mean.assign(np.full(3, moving, np.float32))
    bn.moving_variance.assign(np.full(3, moving * 2, np.float32))
    return model


def test_each_rank_gets_its_own_batchnorm_statistics_back_bit_for_bit(storage, parts, capfd):
    chief, other = bn_model(0.1), bn_model(1 / 3)
    for rank, model in enumerate((chief, other)):
        ck = checkpointer(storage, parts, rank=rank, world_size=2)
        ck.track({"model": model})
        ck.save_now(2, "session")
    commit(storage, parts, world_size=2, attempt=1)
    url = latest_intact(storage).path

    restored = {}
    for rank in (0, 1, 2):  # rank 2: new since a resize, no state file of its own
        model = bn_model(7.0)
        again = checkpointer(storage, [], rank=rank, world_size=3, restore_url=url)
        again.track({"model": model})
        restored[rank] = values(model.layers[0].non_trainable_weights)
    for rank, model in ((0, chief), (1, other)):
        want = values(model.layers[0].non_trainable_weights)
        assert all(np.array_equal(a, b) for a, b in zip(restored[rank], want)), rank
    assert not np.array_equal(restored[0][0], restored[1][0])
    out = capfd.readouterr().out
    assert "rank 2: its own values of the variables each worker updates" in out
    assert "(not exact)" in out and "rank 0:" not in out and "rank 1:" not in out


def test_trainable_weights_are_not_kept_per_rank():
    from raytf.checkpoint.rank_local import unreduced

    model = bn_model(0.5)
    kept = unreduced({"model": model, "step": tf.Variable(1)})
    assert [v.path for v in kept] == [v.path for v in model.layers[0].non_trainable_weights]


def test_synchronized_statistics_are_the_same_on_every_rank_and_not_kept_per_rank():
    """``BatchNormalization(synchronized=True)`` updates its statistics from all-reduced
    batch moments: the chief's stand for every rank's, and an emergency checkpoint that
    lost a rank loses nothing of its own."""
    import keras

    from raytf.checkpoint.rank_local import unreduced

    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.BatchNormalization(synchronized=True),
            keras.layers.Dense(4),
            keras.layers.BatchNormalization(),
        ]
    )
    kept = unreduced({"model": model})
    assert [v.path for v in kept] == [v.path for v in model.layers[2].non_trainable_weights]
    assert all(v.aggregation == "none" for v in model.layers[0].non_trainable_weights)
