"""A driver's hold on its run directory, taken before anything is written there.

In order: the lease (one driver per run, ``raytf.rundir.lease``), then, with
``RunConfig.start_fresh``, the earlier run's files set aside
(``raytf.rundir.set_aside``), then the writer that keeps ``state.json`` and
the lease's heartbeat off the control loop (``raytf.rundir.state_writer``).
Trainer, Session, Tune trial and local mode all start through here.
"""

from __future__ import annotations

from collections.abc import Callable

from raytf.checkpoint.retention import highest_generation
from raytf.config import RunConfig
from raytf.rundir.lease import Lease
from raytf.rundir.set_aside import set_aside
from raytf.rundir.state_writer import StateWriter
from raytf.rundir.storage import Storage
from raytf.settings import Settings


def hold_run_dir(run_config: RunConfig, settings: Settings, say: Callable[[str], None]):
    """The run directory's ``StateWriter``, holding its lease; raises ``RunDirInUseError``
    while another live driver holds it."""
    storage = Storage(run_config.run_dir)
    # Generations go on from the newest commit's: a lease released at a clean end is
    # gone, and the next driver must still count past every holder that committed.
    lease = Lease(storage, settings.lease_stale_s, floor=highest_generation(storage))
    took_over = lease.acquire()
    if took_over:
        say(took_over)
    if run_config.start_fresh:
        try:
            moved = set_aside(storage)
        except BaseException:
            lease.release()
            raise
        if moved:
            say(f"start_fresh: the earlier run's files were moved to {moved}")
    return StateWriter(storage, lease, heartbeat_s=settings.lease_heartbeat_s, say=say)
