"""Workers get raytf without any package index: `ray job submit` to a `raytf local`
cluster of two nodes, a job whose two workers say where their ``raytf.__file__`` is.

- the README's command (``--runtime-env-json '{"py_modules": ["raytf"]}'``): the job
  brings raytf, the driver and both workers import that copy, the driver adds nothing;
- a job that brings only its script: the driver imports the node's raytf (this
  checkout, installed editable) and ships it (``raytf.group.shipping``), so the
  workers import Ray's py_modules copy, not the checkout they could also read here.
"""

import json
import os
import re
import subprocess
import sys

from .jobrun import ROOT
from .test_local_cli import RAY, raytf_local

PY_MODULES = f"{os.sep}runtime_resources{os.sep}py_modules_files{os.sep}"

JOB = '''"""Where each rank's raytf came from (tests/integration/test_ship_package.py)."""
import json
import sys

import raytf


def where(config):
    import raytf

    return raytf.__file__


result = raytf.Trainer(
    where,
    scaling_config=raytf.ScalingConfig(num_workers=2),
    run_config=raytf.RunConfig(storage_path=sys.argv[1], verbose=0),
).fit()
print("WHERE " + json.dumps({"driver": raytf.__file__, "workers": result.worker_results}))
'''


def _package(path: str) -> str | None:
    """The py_modules package a file was imported from, or None (not one)."""
    if PY_MODULES not in path:
        return None
    return path.split(PY_MODULES, 1)[1].split(os.sep, 1)[0]


def _submit(dashboard: str, job_dir: str, storage: str, *runtime_env: str) -> dict:
    env = dict(os.environ, RAY_AUTH_MODE="token")
    env.pop("RAY_ADDRESS", None)
    cmd = [RAY, "job", "submit", "--address", dashboard, "--working-dir", job_dir, *runtime_env]
    cmd += ["--", sys.executable, "where.py", storage]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    return json.loads(next(ln for ln in out.splitlines() if ln.startswith("WHERE "))[6:])


def test_workers_import_the_raytf_their_driver_shipped(tmp_path):
    state_file = str(tmp_path / "cluster.json")
    up = raytf_local(state_file, "up", "--nodes", "2", "--cpus-per-node", "1")
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        dashboard = re.search(r"(http://127\.0\.0\.2:\d+)", up.stdout).group(1)
        job_dir = tmp_path / "job"
        job_dir.mkdir()
        (job_dir / "where.py").write_text(JOB)
        storage = str(tmp_path / "runs")

        # The README's command: the job's runtime_env carries raytf to driver and workers.
        brought = _submit(
            dashboard, str(job_dir), storage, "--runtime-env-json", '{"py_modules": ["raytf"]}'
        )
        package = _package(brought["driver"])  # Ray's _ray_pkg_<content hash>
        assert package is not None, brought
        assert [_package(p) for p in brought["workers"]] == [package] * 2, brought

        # Only the script travels: the driver's own raytf (this checkout) is shipped.
        shipped = _submit(dashboard, str(job_dir), storage)
        assert shipped["driver"].startswith(os.path.join(ROOT, "raytf")), shipped
        assert all(_package(p) and not p.startswith(ROOT) for p in shipped["workers"]), shipped
    finally:
        down = raytf_local(state_file, "down")
    assert down.returncode == 0, down.stderr
    assert not os.path.exists(state_file)
