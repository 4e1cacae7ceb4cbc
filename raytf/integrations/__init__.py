"""raytf inside other Ray libraries' loops (Ray Tune)."""
