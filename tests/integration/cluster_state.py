"""What a test checks on the cluster after a run: nothing of raytf's may remain."""

import ray


def alive_raytf_actors() -> list:
    from ray.util.state import list_actors

    return [
        a
        for a in list_actors(filters=[("class_name", "=", "RaytfWorker")], limit=1000)
        if a.state != "DEAD"
    ]


def live_raytf_placement_groups() -> list:
    return [
        pg
        for pg in ray.util.placement_group_table().values()
        if pg["name"].startswith("raytf:") and pg["state"] != "REMOVED"
    ]
