"""What an operator runs: the ``raytf`` CLI, the local multi-node simulation, config validation."""
