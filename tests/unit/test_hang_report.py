"""The hang report's pure parts: the excerpt of a py-spy dump, the message, the file."""

import pytest

import raytf.driver.hang_report as hang_report
from raytf.driver.hang_report import explain_hang, hang_message
from raytf.errors import WorkerHangError
from raytf.group import stacks
from raytf.group.stacks import capture_stacks, dump_stacks, excerpt, format_dumps
from raytf.messages import WorkerInfo

pytestmark = pytest.mark.unit

# A real `py-spy dump --native` of a Ray actor with TensorFlow loaded (trimmed).
NATIVE = """\
Process 2723: ray::Sleeper
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 2723 (idle): "MainThread"
    epoll_wait (libc.so.6)
    boost::asio::detail::epoll_reactor::run (ray/_raylet.so)
    ray::core::CoreWorker::RunTaskExecutionLoop (ray/_raylet.so)
    run_task_loop (ray/_raylet.so)
    Worker.main_loop (ray/_private/worker.py:1069)
    <module> (ray/_private/workers/default_worker.py:323)
    0x7fad2964524a (libc.so.6)
Thread 2808 (idle): "PythonGCThread"
    0x7fad296a3f16 (libc.so.6)
    PyThread_acquire_lock_timed (libpython3.11.so.1.0)
    Condition.wait (threading.py:327)
    Event.wait (threading.py:629)
    PythonGCThread.run (ray/_private/gc_collect_manager.py:29)
    Thread._bootstrap_inner (threading.py:1045)
    Thread._bootstrap (threading.py:1002)
Thread 2894 (idle): "raytf-tf_0"
    clock_nanosleep (libc.so.6)
    time_sleep (libpython3.11.so.1.0)
    waiting_in_a_distinctive_frame (spy_ray.py:9)
    Thread.run (threading.py:982)
    Thread._bootstrap_inner (threading.py:1045)
    Thread._bootstrap (threading.py:1002)
    thread_run (libpython3.11.so.1.0)
    0x7fad296a71f5 (libc.so.6)
    0x7fad297278ec (libc.so.6)
"""

# A real `py-spy dump --nonblocking` of the same kind of actor, SIGSTOPped, with the note
# dump_stacks puts first.
STOPPED = """\
(the process is stopped: Python stacks only, read without pausing it)
Process 2362: ray::Sleeper
Python v3.11.7 (/root/.pyenv/versions/3.11.7/bin/python3.11)

Thread 2362 (idle): "MainThread"
    Worker.main_loop (ray/_private/worker.py:1069)
    <module> (ray/_private/workers/default_worker.py:323)
Thread 2387 (idle): "PythonGCThread"
    Condition.wait (threading.py:327)
    Event.wait (threading.py:629)
"""


# A real `py-spy dump --native` of a step blocked in a tf.function (frames cut): the user's
# frame lies under TensorFlow's.
IN_A_STEP = """\
Thread 5258 (idle): "raytf-tf_0"
    syscall (libc.so.6)
    absl::lts_20250814::Notification::WaitForNotification (tensorflow/libtensorflow_framework.so.2)
    tensorflow::ProcessFunctionLibraryRuntime::RunSync (tensorflow/libtensorflow_framework.so.2)
    TFE_Execute (tensorflow/libtensorflow_cc.so.2)
    pybind11::cpp_function::dispatcher (tensorflow/python/_pywrap_tfe.so)
    0x7f2e491fcb40 (?)
    quick_execute (tensorflow/python/eager/execute.py:53)
    Context.call_function (tensorflow/python/eager/context.py:1688)
    AtomicFunction.call_flat (tensorflow/python/eager/polymorphic_function/atomic_function.py:251)
    Function._call (tensorflow/python/eager/polymorphic_function/polymorphic_function.py:919)
    Function.__call__ (tensorflow/python/eager/polymorphic_function/polymorphic_function.py:833)
    filter_traceback.<locals>.error_handler (tensorflow/python/util/traceback_utils.py:164)
    train_loop_per_worker (my_job.py:15)
    _WorkItem.run (concurrent/futures/thread.py:58)
    _worker (concurrent/futures/thread.py:83)
    Thread.run (threading.py:982)
Thread 5262 (idle)
    clock_nanosleep (libc.so.6)
    slow (my_job.py:6)
"""


def test_excerpt_adds_the_users_frame_under_tensorflows():
    assert excerpt(IN_A_STEP, frames=2).splitlines() == [
        'Thread 5258 (idle): "raytf-tf_0"',
        "  quick_execute (tensorflow/python/eager/execute.py:53)",
        "  Context.call_function (tensorflow/python/eager/context.py:1688)",
        "  ... (4 frames)",
        "  train_loop_per_worker (my_job.py:15)",
        "  ... (3 outer frames, 6 native frames in the full dump)",
    ]


def _info(rank, pid=100):
    return WorkerInfo(rank, "10.0.0.1", "ab" * 28, "node-a", pid + rank, 2222, ())


def test_excerpt_is_the_loop_threads_innermost_python_frames():
    text = excerpt(NATIVE)
    assert text.splitlines() == [
        'Thread 2894 (idle): "raytf-tf_0"',
        "  waiting_in_a_distinctive_frame (spy_ray.py:9)",
        "  Thread.run (threading.py:982)",
        "  Thread._bootstrap_inner (threading.py:1045)",
        "  ... (1 outer frame, 5 native frames in the full dump)",
    ]


def test_excerpt_counts_the_outer_frames_it_leaves_out():
    text = excerpt(NATIVE, frames=2)
    assert "Thread._bootstrap_inner" not in text
    assert "... (2 outer frames, 5 native frames in the full dump)" in text
    assert excerpt(NATIVE, frames=9).endswith(
        "Thread._bootstrap (threading.py:1002)\n  ... (5 native frames in the full dump)"
    )


def test_excerpt_falls_back_to_the_first_thread_and_keeps_notes():
    text = excerpt(STOPPED)
    assert text.splitlines() == [
        "(the process is stopped: Python stacks only, read without pausing it)",
        'Thread 2362 (idle): "MainThread"',
        "  Worker.main_loop (ray/_private/worker.py:1069)",
        "  <module> (ray/_private/workers/default_worker.py:323)",
    ]


def test_excerpt_of_an_error_line_is_the_line():
    assert excerpt("py-spy is not installed on 10.0.0.1: `pip install py-spy` for stacks\n") == (
        "py-spy is not installed on 10.0.0.1: `pip install py-spy` for stacks"
    )


def test_without_py_spy_the_entry_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(stacks, "find_py_spy", lambda: None)
    assert dump_stacks(1, "10.0.0.7", 5.0) == (
        "py-spy is not installed on 10.0.0.7: `pip install py-spy` for stacks"
    )


def test_a_gone_process_is_said_to_be_gone(monkeypatch):
    monkeypatch.setattr(stacks, "find_py_spy", lambda: "/bin/false")
    assert dump_stacks(2**22 + 7, "10.0.0.7", 5.0) == f"process {2**22 + 7} is gone from 10.0.0.7"


def test_format_dumps_heads_each_rank():
    text = format_dumps({1: "B\n", 0: "A"}, [_info(0), _info(1)], silent=[1])
    assert text == (
        "===== rank 0: pid 100 on node-a (10.0.0.1) =====\nA\n\n"
        "===== rank 1: pid 101 on node-a (10.0.0.1), silent =====\nB\n"
    )


def test_message_shows_the_silent_ranks_only():
    msg = hang_message("ranks [1] answered no poll", {0: NATIVE, 1: STOPPED}, [1], "f.txt")
    lines = msg.splitlines()
    assert lines[:3] == [
        "ranks [1] answered no poll",
        "where the ranks were (f.txt):",
        "rank 1: (the process is stopped: Python stacks only, read without pausing it)",
    ]
    assert "rank 0" not in msg


def test_message_shows_every_rank_when_none_is_silent():
    msg = hang_message("no progress for 300 s", {0: NATIVE, 1: "stacks not captured: x"}, [], "f")
    assert 'rank 0: Thread 2894 (idle): "raytf-tf_0"' in msg
    assert "  waiting_in_a_distinctive_frame (spy_ray.py:9)" in msg
    assert "rank 1: stacks not captured: x" in msg


def test_explain_hang_writes_the_dumps_and_keeps_the_type(monkeypatch, storage):
    monkeypatch.setattr(hang_report, "capture_stacks", lambda infos, timeout_s: {0: NATIVE})
    error = explain_hang(WorkerHangError("no progress for 9 s"), [_info(0)], storage, 3, [])
    assert type(error) is WorkerHangError
    assert error.detail.startswith("no progress for 9 s\nwhere the ranks were (full dumps")
    assert storage.url("stacks", "attempt_3.txt") in error.detail
    assert "waiting_in_a_distinctive_frame" in error.detail
    written = storage.fs.cat_file(storage.path("stacks", "attempt_3.txt")).decode()
    assert written.startswith("===== rank 0: pid 100 on node-a (10.0.0.1) =====\nProcess 2723")


def test_explain_hang_never_raises(monkeypatch, storage):
    def fails(infos, timeout_s):
        raise RuntimeError("ray is down")

    monkeypatch.setattr(hang_report, "capture_stacks", fails)
    error = explain_hang(WorkerHangError("hung"), [_info(0)], storage, 1, [0])
    assert error.detail == "hung\nstacks not captured: RuntimeError: ray is down"

    def no_write(data, *parts):
        raise OSError("disk full")

    monkeypatch.setattr(hang_report, "capture_stacks", lambda infos, timeout_s: {0: "x"})
    monkeypatch.setattr(storage, "write_atomic", no_write)
    error = explain_hang(WorkerHangError("hung"), [_info(0)], storage, 1, [0])
    assert "full dumps not written: OSError: disk full" in error.detail
    assert "rank 0: x" in error.detail


def test_without_ray_nothing_is_started(monkeypatch):
    # In the whole suite this process has joined the integration tier's Ray by now.
    monkeypatch.setattr(stacks.ray, "is_initialized", lambda: False)
    assert capture_stacks([_info(0)]) == {0: "stacks not captured: Ray is not running here"}
