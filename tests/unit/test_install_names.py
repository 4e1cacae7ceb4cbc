"""An install that is really raytf: PyPI's project named ``raytf`` (0.0.1, 2021) is another
one, so no doc, config, job or message of ours asks for that distribution; the
installation page's table of extras is pyproject's; the KubeRay runtime environments bring
pyproject's dependencies (raytf itself travels in the working directory)."""

import glob
import os
import re

import pytest
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10
    from pip._vendor import tomli as tomllib

import raytf
from raytf.tools.validate.launcher import validate_file
from raytf.tools.validate.rules import pypi_raytf

pytestmark = pytest.mark.unit

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(ROOT, "pyproject.toml"), "rb") as _f:
    PYPROJECT = tomllib.load(_f)


def _files() -> list[str]:
    """What a user reads or runs: the docs, configs, jobs, Makefile and raytf's own
    messages (tests hold such strings as data, so they are not among them)."""
    patterns = ["README.md", "Makefile", "pyproject.toml", "docs/**/*.md",
                "cluster_configs/**/*", "jobs/**/*.py", "raytf/**/*.py"]  # fmt: skip
    found = set()
    for pattern in patterns:
        found |= {p for p in glob.glob(os.path.join(ROOT, pattern), recursive=True)}
    # The detector itself holds the forms it looks for; its own message is checked below.
    detector = os.path.join(ROOT, "raytf", "tools", "validate", "rules.py")
    return sorted(
        p for p in found if os.path.isfile(p) and not p.endswith(".png") and p != detector
    )


def test_the_detector_tells_pypis_raytf_from_this_one():
    for text in ["pip install raytf", "pip install 'raytf[s3]'", "`'raytf[gcs]'`",
                 """--runtime-env-json '{"pip": ["raytf[gpu]"]}'""",
                 'pip: ["raytf[gpu] @ git+https://github.com/your-org/raytf.git"]',
                 'pip: ["raytf"]', "pip:\n  - raytf\n", "pip3 install raytf==0.0.1"]:  # fmt: skip
        assert pypi_raytf(text), text
    for text in ['python -m pip install -q -e "$HOME/raytf[cpu,s3]"', "pip install -e '.[s3]'",
                 "raytf status ~/raytf_results/a", "pip install ./raytf", "import raytf",
                 "pip install 'raytf-mwms[gpu]'", 'LIBRARIES = {"raytf", "ray"}']:  # fmt: skip
        assert not pypi_raytf(text), text


def test_nothing_we_ship_installs_pypis_raytf():
    files = _files()
    assert any(p.endswith("rayjob.yaml") for p in files) and len(files) > 100
    found = {}
    for path in files:
        with open(path, errors="replace") as f:
            hits = pypi_raytf(f.read())
        if hits:
            found[os.path.relpath(path, ROOT)] = hits
    assert found == {}


def test_the_distribution_is_ours_and_the_import_name_raytf():
    assert PYPROJECT["project"]["name"] == raytf.DISTRIBUTION == "raytf-mwms"
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+(\[[^\]]*\])?", requirement).group(0)


def test_the_install_pages_table_of_extras_is_pyprojects():
    with open(os.path.join(ROOT, "docs", "getting-started", "install.md")) as f:
        section = f.read().split("## Extras", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = set(re.findall(r"`([^`]+)`", cells[1]))
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert set(rows) == set(extras)
    for extra, requirements in extras.items():
        assert rows[extra] == {_name(r) for r in requirements}, extra


@pytest.mark.parametrize(
    "path,field",
    [("cluster_configs/kuberay/runtime_env/gpu.yaml", None),
     ("cluster_configs/kuberay/rayjob.yaml", "runtimeEnvYAML")],
)  # fmt: skip
def test_kuberay_runtime_envs_bring_pyprojects_dependencies(path, field):
    """raytf comes in the working directory; pip brings the rest, as pyproject says (Ray
    is the image's own)."""
    with open(os.path.join(ROOT, path)) as f:
        doc = yaml.safe_load(f)
    env = yaml.safe_load(doc["spec"][field]) if field else doc
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"]
    want = [r for r in project["dependencies"] if not r.startswith("ray[")]
    assert sorted(env["pip"]) == sorted(want + extras["gpu"] + extras["s3"])
    # As Ray parses it (ray job submit --runtime-env, a RayJob's runtimeEnvYAML).
    from ray.runtime_env import RuntimeEnv

    parsed = RuntimeEnv(**{k: v.replace("${BUCKET}", "b") for k, v in env.items() if k != "pip"},
                        pip=env["pip"])  # fmt: skip
    assert parsed["pip"]["packages"] == env["pip"]
    if field:  # the RayJob: raytf comes in its working directory, from the user's bucket
        assert parsed["working_dir"] == "s3://b/raytf/raytf.zip"
        assert "--storage s3://${BUCKET}/" in doc["spec"]["entrypoint"]


def test_validate_flags_a_config_that_installs_pypis_raytf(tmp_path):
    aws = os.path.join(ROOT, "cluster_configs", "aws-gpu.yaml")
    with open(aws) as f:
        doc = yaml.safe_load(f)
    doc["worker_setup_commands"] = ["pip install 'raytf[gpu,s3]'"]
    path = tmp_path / "aws.yaml"
    path.write_text(yaml.safe_dump(doc))
    problems = [p for p in validate_file(str(path)) if not p.warning]
    assert sorted(p.message.split(":")[0] for p in problems) == [
        "node type gpu_on_demand",
        "node type gpu_spot",
    ]  # each GPU node type; the head still installs this raytf
    for problem in problems:
        assert problem.path == "worker_setup_commands"
        assert "raytf[gpu,s3] installs PyPI's project named raytf" in problem.message
        assert not pypi_raytf(problem.fix)  # the fix it gives installs this raytf

    rayjob = os.path.join(ROOT, "cluster_configs", "kuberay", "rayjob.yaml")
    with open(rayjob) as f:
        doc = yaml.safe_load(f)
    doc["spec"]["runtimeEnvYAML"] = 'pip: ["raytf[gpu]"]\n'
    path = tmp_path / "rayjob.yaml"
    path.write_text(yaml.safe_dump(doc))
    (problem,) = [p for p in validate_file(str(path)) if not p.warning]
    assert problem.path == "spec.runtimeEnvYAML"
