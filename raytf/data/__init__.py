"""Input: Ray Data shards (the driver's feed, a worker's shard), batch arithmetic,
and the examples' synthetic data set.

Importing this package pulls in neither Ray nor TensorFlow: the benchmark's
hand-launched processes read ``raytf.data.synthetic`` without either.
"""
