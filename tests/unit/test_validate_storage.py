"""``raytf validate`` finds temp-directory storage and placeholders (validate/storage.py):
each form of each, in cluster YAML, KubeRay manifests and a job's --storage argument."""

import os
import tempfile

import pytest
import yaml

from raytf.tools.cli import main
from raytf.tools.validate.launcher import validate_file
from raytf.tools.validate.storage import placeholder_in, temp_dir_of

from .test_cluster_validate import AWS, RAYJOB, ROOT, SHIPPED, errors, variant

pytestmark = pytest.mark.unit

RAYCLUSTER = os.path.join(ROOT, "cluster_configs", "kuberay", "raycluster.yaml")


@pytest.mark.parametrize(
    "storage,temp",
    [
        ("/tmp/raytf_results", "/tmp"),
        ("/tmp", "/tmp"),
        ("/var/tmp/runs", "/var/tmp"),
        ("file:///tmp/runs", "/tmp"),
        ("$TMPDIR/runs", "$TMPDIR"),
        ("${TMPDIR}/runs", "$TMPDIR"),
        ("/tmp/ray/session_latest/runs", "Ray's session directory"),
        ("/data/ray/session_2026-12-06_10-00-00_123456_7/runs", "Ray's session directory"),
        ("'/tmp/quoted'", "/tmp"),
    ],
)
def test_storage_under_a_temp_directory(storage, temp):
    assert temp_dir_of(storage) == temp


def test_this_machine_s_temp_directory_counts(monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", "/scratch/me/tmp")
    assert temp_dir_of("/scratch/me/tmp/runs") == "/scratch/me/tmp"


@pytest.mark.parametrize(
    "storage",
    ["s3://$BUCKET/raytf_results", "gs://b/tmp/runs", "/mnt/shared/raytf", "~/raytf_results",
     "/tmpfs/runs", "/home/u/tmp/runs", "hdfs://nn/tmp/x"],
)  # fmt: skip
def test_storage_elsewhere_is_not_temp(storage):
    assert temp_dir_of(storage) is None


@pytest.mark.parametrize(
    "text,found",
    [
        ("https://github.com/your-org/raytf/archive/main.zip", "your-org"),
        ("s3://your-bucket/raytf_results", "your-bucket"),
        ("s3://YOUR_BUCKET/runs", "YOUR_BUCKET"),
        ("s3://my-bucket/runs", "my-bucket"),
        ("gs://<bucket>/runs", "<bucket>"),
        ("https://example.com/raytf.zip", "example.com"),
        ("s3://CHANGE_ME/runs", "CHANGE_ME"),
        ("s3://changeme/runs", "changeme"),
        ("REPLACE-ME", "REPLACE-ME"),
        ("s3://TODO/runs", "TODO"),
    ],
)
def test_placeholders(text, found):
    assert placeholder_in(text) == found


@pytest.mark.parametrize(
    "text",
    ["s3://$BUCKET/raytf_results", "s3://${BUCKET}/raytf/raytf.zip", "${RAYTF_STORAGE}",
     "numpy>=1.26,<3", "todo-app", "s3://acme-ml/runs", "python -m pip install x 2>/dev/null"],
)  # fmt: skip
def test_variables_and_ordinary_values_are_no_placeholders(text):
    assert placeholder_in(text) is None


def test_a_launcher_config_s_commands(tmp_path):
    def temp(doc):
        doc["head_setup_commands"].append("export RAYTF_STORAGE_PATH=/tmp/raytf_results")
        doc["worker_setup_commands"].append("echo s3://your-bucket > ~/bucket")

    found = {p.path: p for p in errors(variant(tmp_path, AWS, temp))}
    assert set(found) == {"head_setup_commands.1", "worker_setup_commands.1"}
    temp_dir, hole = found["head_setup_commands.1"], found["worker_setup_commands.1"]
    assert temp_dir.message.startswith("storage /tmp/raytf_results is under /tmp,")
    assert "object storage" in temp_dir.fix
    assert hole.message == "the placeholder 'your-bucket' is left in" and "$BUCKET" in hole.fix


def test_a_rayjob_s_entrypoint_and_runtime_env(tmp_path):
    """The issue's rayjob.yaml: storage under the temp directory, code from your-org."""

    def old(doc):
        spec = doc["spec"]
        spec["entrypoint"] = "python jobs/train_keras.py --storage /tmp/raytf_results"
        spec["runtimeEnvYAML"] = yaml.safe_dump(
            {
                "working_dir": "https://github.com/your-org/raytf/archive/main.zip",
                "env_vars": {"RAYTF_STORAGE_PATH": "${TMPDIR}/runs"},
            }
        )

    problems = errors(variant(tmp_path, RAYJOB, old))
    assert {p.path: p.message for p in problems} == {
        "spec.entrypoint": "storage /tmp/raytf_results is under /tmp, a temp directory of "
        "each node: checkpoints there stay on the node that wrote them and are cleared with it",
        "spec.runtimeEnvYAML.working_dir": "the placeholder 'your-org' is left in",
        "spec.runtimeEnvYAML.env_vars.RAYTF_STORAGE_PATH": "storage ${TMPDIR}/runs is under "
        "$TMPDIR, a temp directory of each node: checkpoints there stay on the node that "
        "wrote them and are cleared with it",
    }


def test_a_raycluster_container_s_storage_variable(tmp_path):
    def env(doc):
        container = doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        container["env"] = [{"name": "RAYTF_STORAGE_PATH", "value": "gs://<bucket>/runs"}]

    (problem,) = errors(variant(tmp_path, RAYCLUSTER, env))
    assert problem.path == "spec.headGroupSpec.template.spec.containers.0.env.0.value"
    assert problem.message == "storage gs://<bucket>/runs holds the placeholder '<bucket>'"
    assert problem.fix.startswith("name your bucket: ")


def test_a_job_s_storage_argument(capsys):
    assert main(["validate", "--storage", "/var/tmp/raytf_results"]) == 2
    err = capsys.readouterr().err
    assert "job: --storage: error: storage /var/tmp/raytf_results is under /var/tmp" in err
    assert "fix: keep runs in object storage" in err
    assert main(["validate", "--storage", "s3://acme-ml/raytf_results", AWS]) == 0
    assert "--storage s3://acme-ml/raytf_results: ok" in capsys.readouterr().out
    assert main(["validate"]) == 2


def test_every_shipped_config_uses_variables_for_what_the_user_fills():
    """The shipped files pass, the RayJob's bucket included: it is ``${BUCKET}``."""
    for path in SHIPPED:
        assert validate_file(path, {"GPU": 1}) == [], path
    with open(RAYJOB) as f:
        job = yaml.safe_load(f)
    assert "--storage s3://${BUCKET}/raytf_results" in job["spec"]["entrypoint"]
    assert yaml.safe_load(job["spec"]["runtimeEnvYAML"])["working_dir"].startswith(
        "s3://${BUCKET}/"
    )
