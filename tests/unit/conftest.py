"""Fixtures the unit tests of the run directory and the checkpointers share."""

import pytest

from raytf.rundir.storage import Storage


@pytest.fixture
def storage(tmp_path):
    """A local run directory's storage (test_run_state uses its own, at tmp_path)."""
    return Storage(str(tmp_path / "run"))


@pytest.fixture
def parts():
    """Where a checkpointer's ``on_part`` puts the parts it reports."""
    return []
