"""A Ray Train loop that a cluster test and a local-mode test both run."""

import os


def read_checkpoint(config):
    """A Ray Train loop's start: what ``get_checkpoint()`` gives it, as every rank sees it."""
    from raytf.integrations import ray_train

    checkpoint = ray_train.get_checkpoint()
    if checkpoint is None:
        found = None
    else:
        with checkpoint.as_directory() as d:
            with open(os.path.join(d, "epoch.txt")) as f:
                found = f.read()
    if config["report"]:
        with open(os.path.join(config["report"], "epoch.txt"), "w") as f:
            f.write("from the earlier run")
        ray_train.report({"step": 1}, checkpoint=ray_train.Checkpoint(config["report"]))
    return found
