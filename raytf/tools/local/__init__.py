"""``raytf local``: a multi-node Ray cluster simulated on one machine."""
