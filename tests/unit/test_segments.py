"""The run's records on an object store: uploaded in segments that cost what they add, read
back whole, followed without reading a segment twice (fsspec's memory:// store)."""

import uuid

import pytest

from raytf.observe.append import AppendFile
from raytf.rundir import segments
from raytf.rundir.run_log import RUN_LOG, read_run_log
from raytf.rundir.storage import Storage


@pytest.fixture
def remote():
    storage = Storage(f"memory://bucket/run-{uuid.uuid4().hex}")
    yield storage
    storage.fs.rm(storage.root, recursive=True)


def objects(storage, name=RUN_LOG):
    return storage.listdir(segments.parts_dir(name))


def test_each_upload_is_what_the_file_gained(remote):
    log = AppendFile(remote, RUN_LOG)
    written = []
    for i in range(5):
        lines = "".join(f'{{"i": {i}, "k": {k}}}\n' for k in range(i + 1))
        log.write(lines)
        written.append(lines)
        log.flush(force=True)
    log.close()
    names = objects(remote)
    assert names == [segments.part_name(i, i) for i in range(5)]
    sizes = [remote.size(segments.parts_dir(RUN_LOG), n) for n in names]
    assert sizes == [len(w.encode()) for w in written]  # never the whole file again
    assert segments.read(remote, RUN_LOG).decode() == "".join(written)
    assert [r["i"] for r in read_run_log(remote)] == [i for i in range(5) for _ in range(i + 1)]


def test_merged_every_so_many_and_a_later_driver_goes_on(remote, monkeypatch):
    monkeypatch.setattr(segments, "MERGE_EVERY", 4)
    log = AppendFile(remote, RUN_LOG)
    text = ""
    for i in range(10):
        log.write(f"line {i}\n")
        text += f"line {i}\n"
        log.flush(force=True)
    log.close()
    assert objects(remote) == ["000000000000-000000000003", "000000000004-000000000007"] + [
        segments.part_name(i, i) for i in (8, 9)
    ]
    again = AppendFile(remote, RUN_LOG)  # the run continued by another driver
    again.write("line 10\n")
    again.close()
    assert objects(remote)[-1] == segments.part_name(10, 10)
    assert segments.read(remote, RUN_LOG).decode() == text + "line 10\n"


def test_a_whole_file_from_before_segments_is_read_first(remote):
    remote.write_atomic(b'{"old": 1}\n', RUN_LOG)
    log = AppendFile(remote, RUN_LOG)
    log.write('{"new": 2}\n')
    log.close()
    assert read_run_log(remote) == [{"old": 1}, {"new": 2}]


def test_a_reader_takes_a_merged_segment_over_those_it_replaced(remote):
    """The merged segment is uploaded before its parts are deleted: a reader between the
    two sees both and must read each byte once."""
    for i, text in enumerate((b"a\n", b"b\n", b"c\n")):
        remote.write_atomic(text, segments.parts_dir(RUN_LOG), segments.part_name(i, i))
    remote.write_atomic(b"a\nb\n", segments.parts_dir(RUN_LOG), segments.part_name(0, 1))
    assert segments.read(remote, RUN_LOG) == b"a\nb\nc\n"


def test_a_follower_reads_only_what_is_new_across_a_merge(remote, monkeypatch):
    monkeypatch.setattr(segments, "MERGE_EVERY", 3)
    log = AppendFile(remote, RUN_LOG)
    position, seen = segments.Position(), b""
    for i in range(8):
        log.write(f"{i}\n")
        log.flush(force=True)
        if i in (1, 4, 7):  # read in the middle of a merge window, and after one
            seen += segments.read_new(remote, position, RUN_LOG)
    log.close()
    seen += segments.read_new(remote, position, RUN_LOG)
    assert seen.decode() == "".join(f"{i}\n" for i in range(8))
    assert segments.read_new(remote, position, RUN_LOG) == b""


def test_a_week_of_512_workers_keeps_each_upload_at_a_constant_cost(remote, monkeypatch):
    """A simulated 7-day run, 512 workers (a test double of the driver's record calls,
    not training): a report from each worker every 10 minutes, a flush every 10 s. Each
    upload's bytes are the interval's lines, whatever the run's age; the file stays a few
    hundred objects; nothing is lost."""
    flushes = 7 * 24 * 360
    workers, every = 512, 60  # flushes between one worker's reports
    calls = []
    real = remote.write_atomic
    monkeypatch.setattr(
        remote, "write_atomic", lambda data, *p: (calls.append(len(data)), real(data, *p))
    )
    log = AppendFile(remote, RUN_LOG)
    lines = 0
    for tick in range(flushes):
        for rank in range(tick % every, workers, every):  # the workers due this interval
            log.write(f'{{"t":{tick},"r":{rank}}}\n')
            lines += 1
        log.flush(force=True)
    log.close()
    merges = flushes // segments.MERGE_EVERY
    assert len(calls) == flushes + merges
    singles = [c for c in calls if c < 2000]
    assert len(singles) == flushes and max(singles) <= 9 * 30  # an interval's lines, always
    assert max(calls) < 2000 * segments.MERGE_EVERY / 8  # a merge: its window, always
    assert len(objects(remote)) == merges + flushes % segments.MERGE_EVERY
    records = read_run_log(remote)
    assert len(records) == lines and records[-1]["t"] == flushes - 1
