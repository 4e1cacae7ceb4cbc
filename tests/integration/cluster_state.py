"""What a test checks on the cluster after a run: nothing of raytf's may remain."""

import ray


def alive_raytf_actors() -> list:
    from ray.util.state import list_actors

    # Name the cluster: other Ray instances on the machine must not confuse the lookup.
    address = ray.get_runtime_context().gcs_address
    actors = list_actors(address=address, filters=[("class_name", "=", "RaytfWorker")], limit=1000)
    return [a for a in actors if a.state != "DEAD"]


def live_raytf_placement_groups() -> list:
    return [
        pg
        for pg in ray.util.placement_group_table().values()
        if pg["name"].startswith("raytf:") and pg["state"] != "REMOVED"
    ]
