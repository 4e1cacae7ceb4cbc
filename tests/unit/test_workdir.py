"""Each rank's working directory (raytf.worker.workdir), on real directories."""

import os

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
