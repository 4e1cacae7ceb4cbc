"""``raytf validate``: cluster YAML (Ray's launcher and KubeRay) checked against raytf's needs."""
