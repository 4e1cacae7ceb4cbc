"""The Python (and native) stacks of the group's processes, read from outside them.

A hung worker cannot be asked: a SIGSTOPped one answers no actor call and runs
no signal handler, and one deadlocked in a collective holds the thread that
would. So ``py-spy dump --pid`` reads each process's memory from a Ray task
pinned to the worker's node (``num_cpus=0``: a busy node still runs it), all
ranks in parallel, and the driver waits ``CAPTURE_TIMEOUT_S`` at most: a rank
whose task has not answered by then gets a line saying so, never a hang.

What works here (py-spy 0.4.3, root in a container, measured):

- a running process: ``--native`` (Python frames and the C/C++ frames under
  them: a step blocked in ``tensorflow::ProcessFunctionLibraryRuntime::RunSync``
  shows as such) takes 0.05 s on a bare interpreter and 1.2-3 s on one with
  TensorFlow loaded (py-spy reads libtensorflow's symbols; 3 s with two busy
  cores); it pauses the process while it reads, which a process about to be
  torn down does not mind;
- a stopped process (``State: T`` in ``/proc/<pid>/status``): every mode that
  pauses the process fails ("Failed to suspend process"), ``--native``
  included; ``--nonblocking`` reads the Python stacks without pausing, in
  0.01 s. So a stopped process gets ``--nonblocking``, and a running one whose
  ``--native`` dump fails falls back to it;
- a whole capture (Ray task of ``num_cpus=0`` on the worker's node, py-spy
  included): 0.3 s for a stopped process, 0.9-3 s for two running ones with
  TensorFlow loaded (each dumped with ``--native``), on this 2-core machine with
  a local Ray.

Elsewhere py-spy may be missing (it comes with ``ray[default]``) or not allowed
to attach (no ``CAP_SYS_PTRACE`` in a container): the rank's entry says which,
with py-spy's own error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from raytf.messages import WorkerInfo

CAPTURE_TIMEOUT_S = 10.0  # the driver's whole wait for every rank's stacks
NATIVE_SHARE = 0.75  # of a rank's time, what a --native dump may take before the fallback
MARGIN_S = 2.0  # a dump ends this long before the driver stops waiting (task start-up)


def find_py_spy() -> str | None:
    """py-spy on this node: on ``PATH``, or beside this interpreter (a venv's bin/)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else None


def _is_stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("State:"):
                    return line.split()[1] in ("T", "t")  # stopped, or traced and stopped
    except OSError:
        pass
    return False


def _py_spy(spy: str, pid: int, mode: str, timeout_s: float) -> tuple[bool, str]:
    env = dict(os.environ, RUST_BACKTRACE="0")  # py-spy's own backtrace helps nobody here
    try:
        done = subprocess.run(
            [spy, "dump", "--pid", str(pid), mode],
            capture_output=True,
            text=True,
            timeout=max(timeout_s, 0.5),
            env=env,
        )
    except subprocess.TimeoutExpired:
        return False, f"py-spy dump {mode} took over {timeout_s:.1f} s"
    if done.returncode == 0:
        return True, done.stdout
    error = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return False, f"py-spy dump {mode} failed: " + " / ".join(error[:4])


def dump_stacks(pid: int, node_ip: str, timeout_s: float) -> str:
    """The stacks of process ``pid`` on this node as py-spy prints them, or why not."""
    spy = find_py_spy()
    if spy is None:
        return f"py-spy is not installed on {node_ip}: `pip install py-spy` for stacks"
    if not os.path.exists(f"/proc/{pid}"):
        return f"process {pid} is gone from {node_ip}"
    if _is_stopped(pid):
        ok, text = _py_spy(spy, pid, "--nonblocking", timeout_s)
        note = "(the process is stopped: Python stacks only, read without pausing it)\n"
        return note + text if ok else text
    ok, native = _py_spy(spy, pid, "--native", timeout_s * NATIVE_SHARE)
    if ok:
        return native
    ok, text = _py_spy(spy, pid, "--nonblocking", timeout_s * (1 - NATIVE_SHARE))
    return f"({native}: Python stacks only)\n{text}" if ok else f"{native}\n{text}"


@ray.remote(num_cpus=0, max_retries=0)
def _dump_task(pid: int, node_ip: str, timeout_s: float) -> str:
    return dump_stacks(pid, node_ip, timeout_s)


def capture_stacks(infos: list[WorkerInfo], timeout_s: float = CAPTURE_TIMEOUT_S) -> dict[int, str]:
    """Each rank's stacks (or a line saying why there are none), by rank.

    Returns within about ``timeout_s``; never raises for one rank's failure.
    """
    if not ray.is_initialized():  # a task's .remote() would start a Ray of its own
        return {info.rank: "stacks not captured: Ray is not running here" for info in infos}
    out: dict[int, str] = {}
    refs: dict[int, ray.ObjectRef] = {}
    dump_s = max(timeout_s - MARGIN_S, timeout_s / 2)
    for info in infos:
        try:
            strategy = NodeAffinitySchedulingStrategy(info.node_id, soft=False)
            task = _dump_task.options(scheduling_strategy=strategy)
            refs[info.rank] = task.remote(info.pid, info.node_ip, dump_s)
        except Exception as e:  # noqa: BLE001 - one rank's failure is a line, not an error
            out[info.rank] = f"stacks not captured: {type(e).__name__}: {e}"
    began = time.monotonic()
    if refs:
        ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    waited = time.monotonic() - began
    by_rank = {info.rank: info for info in infos}
    for rank, ref in refs.items():
        try:
            out[rank] = ray.get(ref, timeout=0)
        except ray.exceptions.GetTimeoutError:
            ip = by_rank[rank].node_ip
            out[rank] = f"stacks not captured: no answer from {ip} within {waited:.0f} s"
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - the task ends on its own timeout anyway
                pass
        except Exception as e:  # noqa: BLE001 - a lost node, a failed task: a line
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            out[rank] = f"stacks not captured: {type(e).__name__}: {first}"
    return dict(sorted(out.items()))


def format_dumps(stacks: dict[int, str], infos: list[WorkerInfo], silent: list[int]) -> str:
    """The full dumps as one text, a header per rank (the file in the run directory)."""
    by_rank = {info.rank: info for info in infos}
    parts = []
    for rank, text in sorted(stacks.items()):
        info = by_rank.get(rank)
        where = f"pid {info.pid} on {info.hostname} ({info.node_ip})" if info else "?"
        flag = ", silent" if rank in silent else ""
        parts.append(f"===== rank {rank}: {where}{flag} =====\n{text.rstrip()}\n")
    return "\n".join(parts)


def _threads(dump: str) -> list[tuple[str, str, list[str]]]:
    """(header, name, frames innermost first) for each thread py-spy printed."""
    threads: list[tuple[str, str, list[str]]] = []
    for line in dump.splitlines():
        if line.startswith("Thread "):
            name = line.rsplit('"', 2)[1] if line.count('"') >= 2 else ""
            threads.append((line.strip(), name, []))
        elif threads and line.startswith(" ") and line.strip():
            threads[-1][2].append(line.strip())
    return threads


def _is_python_frame(frame: str) -> bool:
    """``func (file.py:12)``; a native frame is ``func (libfoo.so)`` or a bare address."""
    where = frame.rpartition("(")[2].rstrip(")")
    return ".py:" in where or where.endswith(".py")


# Packages whose frames are not the user's (py-spy prints a path from its sys.path entry).
LIBRARIES = frozenset({"tensorflow", "keras", "tf_keras", "ray", "raytf", "absl", "numpy"})


def _is_user_frame(frame: str) -> bool:
    where = frame.rpartition("(")[2].rstrip(")").partition(":")[0]
    top = where.lstrip("/").split("/")[0].removesuffix(".py")
    return top not in LIBRARIES and top not in sys.stdlib_module_names


def excerpt(dump: str, frames: int = 3, thread_prefix: str = "raytf-tf") -> str:
    """The innermost ``frames`` Python frames of the thread running the user's loop
    (named ``raytf-tf_0``), else of the first thread, and the user's innermost frame
    when it lies deeper (under TensorFlow's); native frames are counted, not shown.
    Text that is no dump (an error line) comes back as its first lines."""
    threads = _threads(dump)
    if not threads:
        lines = [line for line in dump.strip().splitlines() if line.strip()]
        return "\n".join(lines[:3])
    notes = [line for line in dump.splitlines() if line.startswith("(")]  # dump_stacks' notes
    chosen = next((t for t in threads if t[1].startswith(thread_prefix)), threads[0])
    header, _, stack = chosen
    python = [f for f in stack if _is_python_frame(f)]
    lines = notes + [header] + [f"  {f}" for f in python[:frames]]
    last = min(frames, len(python))  # python[:last] shown
    user = next((i for i, f in enumerate(python) if _is_user_frame(f)), None)
    if user is not None and user >= frames:
        lines += [f"  ... ({_count(user - frames, 'frame')})"] if user > frames else []
        lines.append(f"  {python[user]}")
        last = user + 1
    native = len(stack) - len(python)
    rest = len(python) - last
    hidden = [_count(rest, "outer frame")] if rest else []
    hidden += [_count(native, "native frame")] if native else []
    if hidden:
        lines.append(f"  ... ({', '.join(hidden)} in the full dump)")
    return "\n".join(lines)


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")
