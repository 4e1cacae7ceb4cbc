"""The worker group and where it runs: slots, standbys, sizes, the cluster.

Everything that places, starts, wires (``TF_CONFIG``), polls and ends the
actors of one attempt, and what outlives attempts (the pool's placement
groups and standby processes). Ray's placement and autoscaler APIs are used
here and nowhere else in the driver.
"""
