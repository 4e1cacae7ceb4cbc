"""``raytf validate`` on the shipped configs and on broken variants of them."""

import glob
import os

import pytest
import yaml

from raytf.tools.cli import main
from raytf.tools.validate.launcher import validate_file

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED = sorted(
    glob.glob(os.path.join(ROOT, "cluster_configs", "*.yaml"))
    + glob.glob(os.path.join(ROOT, "cluster_configs", "kuberay", "*.yaml"))
)
AWS = os.path.join(ROOT, "cluster_configs", "aws-gpu.yaml")
RAYJOB = os.path.join(ROOT, "cluster_configs", "kuberay", "rayjob.yaml")
ONPREM = os.path.join(ROOT, "cluster_configs", "onprem.yaml")


def errors(path, job=None):
    return [p for p in validate_file(path, job) if not p.warning]


def variant(tmp_path, source, change):
    with open(source) as f:
        doc = yaml.safe_load(f)
    change(doc)
    path = tmp_path / os.path.basename(source)
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_every_shipped_config_passes_ray_and_raytf_rules():
    assert len(SHIPPED) == 7
    for path in SHIPPED:
        assert validate_file(path, {"GPU": 1}) == [], path


def test_typo_in_a_key_names_the_field_and_the_likely_key(tmp_path):
    def typo(doc):
        doc["available_node_types"]["gpu_spot"]["min_worker"] = 1

    (problem,) = errors(variant(tmp_path, AWS, typo))
    assert problem.path == "available_node_types.gpu_spot"
    assert "min_worker" in problem.message and "did you mean 'min_workers'" in problem.fix


def test_fractional_resources_are_refused_by_rays_schema(tmp_path):
    def half(doc):
        doc["available_node_types"]["gpu_spot"]["resources"]["GPU"] = 0.5

    (problem,) = errors(variant(tmp_path, AWS, half))
    assert problem.path == "available_node_types.gpu_spot.resources.GPU"
    assert "integer" in problem.fix


def test_min_above_max(tmp_path):
    def inverted(doc):
        doc["available_node_types"]["gpu_on_demand"]["min_workers"] = 5

    (problem,) = errors(variant(tmp_path, AWS, inverted))
    assert problem.path == "available_node_types.gpu_on_demand.min_workers"
    assert "above max_workers 4" in problem.message


def test_head_type_that_does_not_exist(tmp_path):
    def missing(doc):
        doc["head_node_type"] = "hed"

    (problem,) = errors(variant(tmp_path, AWS, missing))
    assert problem.path == "head_node_type" and "'head'" in problem.fix


def test_pool_too_small_for_the_job():
    (problem,) = errors(AWS, {"GPU": 4, "CPU": 8})
    assert "no worker pool can hold one worker" in problem.message
    (problem,) = errors(RAYJOB, {"GPU": 2})
    assert problem.path == "spec.rayClusterSpec.workerGroupSpecs"


def test_gpu_machines_must_declare_gpus_and_install_the_gpu_extra(tmp_path):
    def no_gpu(doc):
        del doc["available_node_types"]["gpu_spot"]["resources"]["GPU"]

    (problem,) = errors(variant(tmp_path, AWS, no_gpu))
    assert problem.path == "available_node_types.gpu_spot.resources"

    def cpu_extra(doc):
        doc["worker_setup_commands"] = ['pip install -e "$HOME/raytf[cpu]"']

    (problem, _) = errors(variant(tmp_path, AWS, cpu_extra))
    assert "without the gpu extra" in problem.message


def test_credentials_and_kuberay_mismatches(tmp_path):
    def secret(doc):
        doc["provider"]["aws_secret_access_key"] = "AKIA..."

    (problem,) = errors(variant(tmp_path, AWS, secret))
    assert problem.path == "provider.aws_secret_access_key"

    def kuberay(doc):
        group = doc["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
        group["minReplicas"], group["rayStartParams"]["num-gpus"] = 9, "2"

    found = {p.path for p in errors(variant(tmp_path, RAYJOB, kuberay))}
    assert found == {
        "spec.rayClusterSpec.workerGroupSpecs.0.minReplicas",
        "spec.rayClusterSpec.workerGroupSpecs.0.rayStartParams.num-gpus",
    }


def test_cli_exit_codes(tmp_path, capsys):
    assert main(["validate", *SHIPPED]) == 0
    broken = variant(tmp_path, AWS, lambda d: d.update(head_node_type="nope"))
    assert main(["validate", AWS, broken]) == 2
    err = capsys.readouterr().err
    assert f"{broken}: head_node_type: error:" in err and "fix:" in err
    assert main(["validate", "--job-resources", "GPU=1", AWS]) == 2


def test_onprem_head_must_run_the_autoscaler_that_starts_every_worker(tmp_path):
    """Found by ``ray up`` (tests/integration/test_launcher.py): under Ray 2.60's default
    autoscaler v2 the local provider brought up one of two worker_ips."""

    def v2(doc):
        doc["head_start_ray_commands"] = [
            c.replace("RAY_enable_autoscaler_v2=0 ", "") for c in doc["head_start_ray_commands"]
        ]

    (problem,) = errors(variant(tmp_path, ONPREM, v2))
    assert problem.path == "head_start_ray_commands"
    assert "RAY_enable_autoscaler_v2=0" in problem.fix

    def one_worker(doc):
        v2(doc)
        doc["provider"]["worker_ips"] = doc["provider"]["worker_ips"][:1]

    assert errors(variant(tmp_path, ONPREM, one_worker)) == []


def test_a_synced_checkout_must_leave_its_virtualenv_behind(tmp_path):
    """Found by `ray up` of onprem.yaml from a checkout with its .venv inside: every node
    got the whole venv (73 s to ready instead of 17-20 s)."""
    path = variant(tmp_path, AWS, lambda doc: doc.pop("rsync_filter"))
    [problem] = validate_file(path, {"GPU": 1})
    assert problem.warning and problem.path == "file_mounts"
    assert "~/raytf" in problem.message and ".gitignore" in problem.fix


def test_credentials_in_env_lists_and_a_kuberay_head_without_token_auth(tmp_path):
    """A shared Kubernetes cluster: a key written into a container's env: list is an error
    (a Secret's valueFrom is how it comes); a head without Ray's token authentication
    takes anyone's job, a warning naming the field."""
    worker = ("spec", "rayClusterSpec", "workerGroupSpecs", 0, "template", "spec", "containers")

    def env(doc):
        node = doc
        for key in worker:
            node = node[key]
        node[0]["env"] = [
            {"name": "AWS_SECRET_ACCESS_KEY", "value": "wJalrXUtnFEMI"},
            {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "w", "key": "k"}}},
            {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "1"},
        ]
        del doc["spec"]["rayClusterSpec"]["authOptions"]

    problems = validate_file(variant(tmp_path, RAYJOB, env))
    (secret,) = [p for p in problems if not p.warning]
    assert secret.path == ".".join(map(str, worker)) + ".0.env.0.value"
    assert "AWS_SECRET_ACCESS_KEY" in secret.message
    (exposed,) = [p for p in problems if p.warning]
    assert exposed.path == "spec.rayClusterSpec.authOptions" and "token" in exposed.fix


@pytest.mark.parametrize("auth, warned", [("", True), ("RAY_AUTH_MODE=token ", False)])
def test_a_launcher_head_serving_its_dashboard_on_every_interface(tmp_path, auth, warned):
    def wide(doc):
        doc["head_start_ray_commands"] = [
            auth + c.replace("--dashboard-host=127.0.0.1", "--dashboard-host=0.0.0.0")
            for c in doc["head_start_ray_commands"]
        ]

    problems = [p for p in validate_file(variant(tmp_path, AWS, wide), {"GPU": 1}) if p.warning]
    exposed = [p for p in problems if "dashboard" in p.message]
    assert bool(exposed) == warned
    if warned:
        assert exposed[0].path.startswith("head_start_ray_commands.")
        assert "0.0.0.0 without token authentication" in exposed[0].message


GCP = os.path.join(ROOT, "cluster_configs", "gcp-gpu.yaml")
RAYCLUSTER = os.path.join(ROOT, "cluster_configs", "kuberay", "raycluster.yaml")


def _strip_launcher(key):
    def change(doc):
        for node in doc["available_node_types"].values():
            node["node_config"].pop(key, None)

    return change


def _strip_pods(doc):
    spec = doc["spec"].get("rayClusterSpec", doc["spec"])
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        group["template"]["spec"].pop("serviceAccountName")


@pytest.mark.parametrize(
    "source,change,where,words",
    [
        (AWS, _strip_launcher("IamInstanceProfile"), "available_node_types.gpu_spot.node_config",
         "the worker pool gpu_spot has no instance profile (IamInstanceProfile)"),
        (GCP, _strip_launcher("serviceAccounts"), "available_node_types.gpu_t4.node_config",
         "the worker pool gpu_t4 has no service account (serviceAccounts)"),
        (RAYCLUSTER, _strip_pods, "spec.workerGroupSpecs.0.template.spec.serviceAccountName",
         "the namespace's default service account"),
        (RAYJOB, _strip_pods,
         "spec.rayClusterSpec.workerGroupSpecs.0.template.spec.serviceAccountName",
         "the namespace's default service account"),
    ],
)  # fmt: skip
def test_a_recipe_stripped_of_its_workers_role_is_flagged(tmp_path, source, change, where, words):
    """Ray's launchers give their instance profile or service account to the head only:
    a worker pool without its own passes the driver's storage check and fails its first
    upload. Each shipped recipe gives its workers one; stripped, validate names the pool."""
    found = [p for p in validate_file(variant(tmp_path, source, change)) if p.path == where]
    assert found and words in found[0].message, found


def test_a_worker_pool_without_a_role_is_an_error_where_the_config_names_the_bucket(tmp_path):
    def strip_and_name_storage(doc):
        _strip_launcher("IamInstanceProfile")(doc)
        doc["worker_setup_commands"].append("echo RAYTF_STORAGE_PATH=s3://$BUCKET/runs")

    found = errors(variant(tmp_path, AWS, strip_and_name_storage))
    assert {p.path for p in found} == {
        "available_node_types.gpu_on_demand.node_config",
        "available_node_types.gpu_spot.node_config",
    }
