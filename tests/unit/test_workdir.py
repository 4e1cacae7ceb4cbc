"""Each rank's working directory (raytf.worker.workdir), on real directories."""

import os
import tempfile

import pytest

from raytf.worker.workdir import own_workdir, rank_dir

pytestmark = pytest.mark.unit


@pytest.fixture
def job_dir(tmp_path, monkeypatch):
    job = tmp_path / "job"
    (job / "data").mkdir(parents=True)
    (job / "data" / "train.csv").write_text("x,y\n")
    (job / "helpers.py").write_text("VALUE = 1\n")
    monkeypatch.chdir(job)
    return job


def test_the_chief_stays_in_the_jobs_directory(job_dir, tmp_path):
    with own_workdir(str(tmp_path / "run"), 0) as where:
        assert os.getcwd() == str(job_dir) == where
    assert not (tmp_path / "run").exists()


def test_another_rank_reads_the_jobs_files_and_writes_its_own(job_dir, tmp_path):
    run = str(tmp_path / "run")
    with own_workdir(run, 1) as where:
        assert os.getcwd() == where == rank_dir(run, 1) == str(tmp_path / "run/workdirs/rank_1")
        assert os.environ["PWD"] == where
        assert open("data/train.csv").read() == "x,y\n"  # the job's, through its link
        os.makedirs("ckpt")
        open("ckpt/model.keras", "w").write("rank 1")
    assert os.getcwd() == str(job_dir)  # the process's own again
    assert not (job_dir / "ckpt").exists()
    assert (tmp_path / "run/workdirs/rank_1/ckpt/model.keras").read_text() == "rank 1"


def test_a_restarted_rank_finds_its_own_files_and_new_job_entries(job_dir, tmp_path):
    run = str(tmp_path / "run")
    with own_workdir(run, 2):
        os.makedirs("ckpt")
    (job_dir / "ckpt").mkdir()  # the chief made its own meanwhile
    (job_dir / "late.txt").write_text("late")
    with own_workdir(run, 2) as where:
        assert not os.path.islink("ckpt")  # still the rank's own, not the chief's
        assert open("late.txt").read() == "late"
    assert os.path.realpath(where) == os.path.realpath(rank_dir(run, 2))


def test_a_run_on_object_storage_keeps_them_in_the_nodes_temp_directory(tmp_path):
    a, b = rank_dir("s3://bucket/runs/a", 1), rank_dir("s3://bucket/runs/b", 1)
    assert a != b and "raytf-workdirs" in a and a.endswith("rank_1")


def test_each_attempt_links_the_jobs_directory_it_starts_in(job_dir, tmp_path, monkeypatch):
    """A relaunch from a new job directory (``ray job submit`` unpacks each submission's
    working dir apart): ranks > 0 read the new files, as rank 0 does, not the old ones."""
    run = str(tmp_path / "run")
    with own_workdir(run, 1):
        assert open("helpers.py").read() == "VALUE = 1\n"
        open("own.txt", "w").write("rank 1")  # the rank's own file
        os.symlink("own.txt", "own_link")  # and a link of its own
    new = tmp_path / "job2"
    new.mkdir()
    (new / "helpers.py").write_text("VALUE = 2\n")  # edited; data/ gone; a new entry
    (new / "extra.py").write_text("")
    (new / "own.txt").write_text("the job's")
    monkeypatch.chdir(new)
    with own_workdir(run, 1) as where:
        assert open("helpers.py").read() == "VALUE = 2\n"
        assert os.readlink("helpers.py") == str(new / "helpers.py")
        assert not os.path.lexists("data")  # the old job's entry, no longer there
        assert os.path.exists("extra.py")
        assert open("own.txt").read() == "rank 1"  # the rank's own file is kept
        assert os.readlink("own_link") == "own.txt"
    assert sorted(os.listdir(where)) == ["extra.py", "helpers.py", "own.txt", "own_link"]


def test_a_dangling_link_of_an_earlier_attempt_is_made_anew(job_dir, tmp_path):
    run = str(tmp_path / "run")
    with own_workdir(run, 1) as where:
        pass
    os.unlink(os.path.join(where, "helpers.py"))
    os.symlink("/gone/helpers.py", os.path.join(where, "helpers.py"))  # old job dir removed
    with own_workdir(run, 1):
        assert open("helpers.py").read() == "VALUE = 1\n"


@pytest.fixture
def node_tmp(tmp_path, monkeypatch):
    tmp = tmp_path / "nodetmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def test_object_storage_rank_directories_are_private_to_their_user(job_dir, node_tmp):
    mine = node_tmp / f"raytf-workdirs-{os.getuid()}"
    mine.mkdir(mode=0o755)
    os.chmod(mine, 0o755)  # as an older raytf (or umask) left it: closed now
    with own_workdir("s3://bucket/runs/a", 1) as where:
        assert where.startswith(str(mine) + os.sep)
        assert open("data/train.csv").read() == "x,y\n"
    assert os.stat(mine).st_mode & 0o777 == 0o700
    assert os.stat(mine).st_uid == os.getuid()
    assert os.listdir(node_tmp) == [mine.name]


def test_object_storage_rank_directories_refuse_a_planted_link(job_dir, node_tmp, tmp_path):
    """Another user who made the predictable path first (here, a link to a directory of
    theirs) gets no rank's files: the rank refuses to run there."""
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    os.symlink(elsewhere, node_tmp / f"raytf-workdirs-{os.getuid()}")
    with pytest.raises(PermissionError, match="not a directory of this user's"):
        with own_workdir("s3://bucket/runs/a", 1):
            pass
    assert os.listdir(elsewhere) == []
    assert os.getcwd() == str(job_dir)
