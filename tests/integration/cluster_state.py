"""What a test checks on the cluster after a run: nothing of raytf's may remain."""

import time

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


def assert_nothing_left(timeout_s: float = 10.0) -> None:
    """No raytf actor or placement group remains. ray.kill is asynchronous, so allow the
    cluster a few seconds to record the deaths it was told about."""
    deadline = time.monotonic() + timeout_s
    while True:
        actors, pgs = alive_raytf_actors(), live_raytf_placement_groups()
        if not actors and not pgs:
            return
        assert time.monotonic() < deadline, f"left behind: actors {actors}, groups {pgs}"
        time.sleep(0.5)


def wait_until_idle(timeout_s: float = 30.0) -> float:
    """Every CPU of the cluster is free again: actors killed and groups removed by the
    test before give their resources back asynchronously. Returns the CPUs free."""
    deadline = time.monotonic() + timeout_s
    total = ray.cluster_resources().get("CPU", 0)
    while True:
        free = ray.available_resources().get("CPU", 0)
        if free >= total:
            return free
        assert time.monotonic() < deadline, f"{free} of {total} CPUs free after {timeout_s} s"
        time.sleep(0.2)
