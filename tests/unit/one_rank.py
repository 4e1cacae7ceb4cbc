"""The arguments of one rank on one device in this process (TF's default strategy), as
a worker's context and its rank host take them: the in-process tests' common start."""


def one_rank(**more):
    import tensorflow as tf

    return dict(
        strategy=tf.distribute.get_strategy(),
        rank=0,
        world_size=1,
        local_rank=0,
        node_ip="127.0.0.1",
        config={},
        **more,
    )
