"""What of the driver's environment reaches a worker, and what a kept process keeps of
the run that started it: credentials stay on the driver unless the run asks, a claim
undoes every variable its starter set, and variables read at TF's import are matched."""

import os

import pytest

from raytf.config import RunConfig
from raytf.driver.launch import run_env
from raytf.errors import ConfigError
from raytf.group import kept
from raytf.group.actors import credential_env, is_credential, worker_env
from raytf.rundir.storage import cause
from raytf.worker.process import environment

DRIVER = {
    "AWS_ACCESS_KEY_ID": "AKIAPLANTED",
    "AWS_SECRET_ACCESS_KEY": "planted-secret",
    "AWS_SESSION_TOKEN": "planted-token",
    "AWS_PROFILE": "team-a",
    "AWS_DEFAULT_REGION": "eu-west-1",
    "FSSPEC_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
    "FSSPEC_S3_SECRET": "planted-fsspec-secret",
    "GOOGLE_APPLICATION_CREDENTIALS": "/home/a/key.json",
    "RAYTF_KEEP_IDLE_S": "60",
    "TF_USE_LEGACY_KERAS": "1",
    "HOME": "/home/a",
}
SECRETS = {
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "FSSPEC_S3_SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS",
}


def test_credentials_stay_on_the_driver_by_default():
    env = worker_env(DRIVER)
    assert not SECRETS & set(env), "a credential would reach the workers"
    # What the workers need to find the store, and the user's settings, still go.
    for name in ("AWS_DEFAULT_REGION", "FSSPEC_S3_ENDPOINT_URL", "RAYTF_KEEP_IDLE_S"):
        assert env[name] == DRIVER[name]
    assert "HOME" not in env
    assert set(credential_env(DRIVER)) == SECRETS
    assert set(worker_env(DRIVER, credentials=True)) >= SECRETS


@pytest.mark.parametrize(
    "name",
    ["AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ROLE_ARN",
     "AWS_WEB_IDENTITY_TOKEN_FILE", "FSSPEC_GCS_TOKEN", "FSSPEC_S3_KEY", "AWS_SECURITY_TOKEN"],
)  # fmt: skip
def test_names_that_say_credential_are_credentials(name):
    assert is_credential(name)


@pytest.mark.parametrize(
    "name", ["AWS_REGION", "AWS_ENDPOINT_URL", "AWS_CA_BUNDLE", "RAYTF_KEEP_PROCESSES"]
)
def test_settings_are_not_credentials(name):
    assert not is_credential(name)


def test_a_run_forwards_credentials_only_when_it_asks(monkeypatch):
    for key, value in DRIVER.items():
        monkeypatch.setenv(key, value)
    assert not SECRETS & set(run_env(RunConfig(name="r")))
    asked = run_env(RunConfig(name="r", forward_credentials=True))
    assert {k: asked[k] for k in SECRETS} == {k: DRIVER[k] for k in SECRETS}
    with pytest.raises(ConfigError, match="RunConfig.forward_credentials = 'yes': must be a bool"):
        RunConfig(name="r", forward_credentials="yes")
    # A job's flag, without a code change; a run's own word still wins.
    monkeypatch.setenv("RAYTF_FORWARD_CREDENTIALS", "1")
    assert set(run_env(RunConfig(name="r"))) >= SECRETS
    assert not SECRETS & set(run_env(RunConfig(name="r", forward_credentials=False)))
    monkeypatch.setenv("RAYTF_FORWARD_CREDENTIALS", "maybe")
    with pytest.raises(ConfigError, match="RAYTF_FORWARD_CREDENTIALS='maybe': must be 1 or 0"):
        RunConfig(name="r")


def test_a_claim_undoes_every_variable_the_starter_set(monkeypatch):
    """A kept process started by run A's driver, claimed by run B: nothing of A's stays,
    the node's own values come back, and B's apply."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "node-region")  # the node's own
    monkeypatch.delenv("FSSPEC_S3_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("RAYTF_PLANTED_A", raising=False)
    monkeypatch.delenv("RAYTF_B", raising=False)
    a = {
        "AWS_DEFAULT_REGION": "a-region",
        "FSSPEC_S3_ENDPOINT_URL": "http://a",
        "RAYTF_PLANTED_A": "1",
    }
    set_by_a = environment.apply(a)
    assert os.environ["FSSPEC_S3_ENDPOINT_URL"] == "http://a"
    set_by_b = environment.replace(set_by_a, {"RAYTF_B": "2"})
    assert "FSSPEC_S3_ENDPOINT_URL" not in os.environ and "RAYTF_PLANTED_A" not in os.environ
    assert os.environ["AWS_DEFAULT_REGION"] == "node-region" and os.environ["RAYTF_B"] == "2"
    environment.replace(set_by_b, {})
    assert "RAYTF_B" not in os.environ


def test_raytfs_defaults_yield_to_the_nodes(monkeypatch):
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")
    set_ = environment.apply({"TF_CPP_MIN_LOG_LEVEL": "1"})  # raytf's default
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"
    environment.replace(set_, {})
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"


def test_variables_read_at_tfs_import_are_part_of_the_match(monkeypatch):
    base = worker_env({})
    legacy = {**base, "TF_USE_LEGACY_KERAS": "1"}
    assert kept.env_key(base) != kept.env_key(legacy)
    assert kept.env_key(base) != kept.env_key({**base, "TF_CPP_MIN_LOG_LEVEL": "3"})
    # Read when used: the claim applies them, so they need not match.
    assert kept.env_key(base) == kept.env_key({**base, "FSSPEC_S3_ENDPOINT_URL": "http://b"})
    assert kept.env_key(base) == kept.env_key({**base, "TF_CONFIG": "{}"})


def test_kept_processes_are_scoped_to_their_owner(monkeypatch):
    monkeypatch.delenv("RAYTF_KEEP_SCOPE", raising=False)
    monkeypatch.setenv("USER", "alice")
    monkeypatch.setenv("LOGNAME", "alice")
    alice = kept.namespace()
    monkeypatch.setenv("USER", "bob")
    monkeypatch.setenv("LOGNAME", "bob")
    assert kept.namespace() != alice and kept.namespace().endswith("bob")
    monkeypatch.setenv("RAYTF_KEEP_SCOPE", "team a/../x")
    assert kept.namespace() == "raytf_kept-team_a_.._x"


def test_a_worker_without_credentials_is_told_where_it_looked():
    from botocore.exceptions import NoCredentialsError

    text = cause(NoCredentialsError())
    assert text.startswith("NoCredentialsError: Unable to locate credentials")
    assert "node's own credentials" in text and "forward_credentials=True" in text
    assert cause(OSError("No space left on device")) == "OSError: No space left on device"


def test_fsspecs_json_form_and_any_case_are_read_for_credentials():
    assert is_credential("FSSPEC_S3", '{"key": "AKIA", "secret": "s"}')
    assert is_credential("FSSPEC_S3", "not json")
    assert not is_credential("FSSPEC_S3", '{"endpoint_url": "http://store:9000"}')
    assert is_credential("FSSPEC_S3_secret")
    env = worker_env({"FSSPEC_S3": '{"secret": "planted"}', "FSSPEC_GCS_token": "planted"})
    assert "FSSPEC_S3" not in env and "FSSPEC_GCS_token" not in env


def test_a_claim_keeps_a_variable_both_runs_set_and_restores_the_nodes(monkeypatch):
    """TF may still be importing on the kept process's other thread: a variable both
    runs set is overwritten, never removed in between; the node's own value of a
    variable the earlier run overrode comes back when the new run sets none."""
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "0")  # the node's own
    monkeypatch.delenv("RAYTF_PLANTED_A", raising=False)
    removed = []
    real_pop = os.environ.pop

    def pop(key, *default):
        removed.append(key)
        return real_pop(key, *default)

    set_by_a = environment.apply({"TF_USE_LEGACY_KERAS": "1", "RAYTF_PLANTED_A": "a"})
    monkeypatch.setattr(os.environ, "pop", pop)
    set_by_b = environment.replace(set_by_a, {"TF_USE_LEGACY_KERAS": "1"})
    assert removed == ["RAYTF_PLANTED_A"] and os.environ["TF_USE_LEGACY_KERAS"] == "1"
    environment.replace(set_by_b, {})
    assert os.environ["TF_USE_LEGACY_KERAS"] == "0"


def test_a_jobs_own_variables_are_part_of_the_match(monkeypatch):
    """Ray sets a job's runtime_env variables in the process itself, where a claim cannot
    take them back: a process started in a job with other variables is not claimed."""
    import ray

    class Context:
        def __init__(self, env_vars):
            self.runtime_env = {"working_dir": "gcs://x.zip", "env_vars": env_vars}

    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # a job's driver, connected
    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context({"AWS_SECRET_ACCESS_KEY": "a"}))
    job_a = kept.env_key({})
    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context({"AWS_SECRET_ACCESS_KEY": "b"}))
    assert kept.env_key({}) != job_a
    monkeypatch.setattr(ray, "get_runtime_context", lambda: Context({"AWS_SECRET_ACCESS_KEY": "a"}))
    assert kept.env_key({}) == job_a


@pytest.mark.parametrize(
    "name,value",
    [
        # client_kwargs' secrets, one level down
        ("FSSPEC_S3", '{"client_kwargs": {"aws_secret_access_key": "planted"}}'),
        ("FSSPEC_S3", '{"client_kwargs": {"aws_session_token": "planted"}}'),
        # an HTTP header, two levels down, and one named with dashes
        ("FSSPEC_HTTP", '{"client_kwargs": {"headers": {"Authorization": "Bearer planted"}}}'),
        ("FSSPEC_HTTPS", '{"headers": {"X-Api-Key": "planted"}}'),
        ("FSSPEC_HTTP", '{"headers": {"Cookie": "session=planted"}}'),
        # URL userinfo, in fsspec's JSON, in a per-argument variable, in any forwarded one
        ("FSSPEC_S3", '{"client_kwargs": {"endpoint_url": "https://user:planted@store:9000"}}'),
        ("FSSPEC_S3", '{"endpoints": ["s3://AKIA:planted@bucket"]}'),
        ("FSSPEC_S3_ENDPOINT_URL", "https://user:planted@store:9000"),
        ("AWS_ENDPOINT_URL", "http://planted-token@127.0.0.1:9000"),
        # Azure connection strings, by name and by value, and in fsspec's JSON
        ("FSSPEC_ABFS_CONNECTION_STRING", "DefaultEndpointsProtocol=https;AccountName=a"),
        ("FSSPEC_ABFS_ACCOUNT_NAME_AND_MORE", "AccountName=a;AccountKey=planted=="),
        ("FSSPEC_ABFS", '{"connection_string": "AccountName=a;AccountKey=planted"}'),
        ("FSSPEC_ABFS", '{"account_name": "a", "conn": "SharedAccessSignature=sv=planted"}'),
        ("FSSPEC_ABFS_ACCOUNT_KEY", "planted"),
        ("FSSPEC_ABFS_SAS_TOKEN", "sv=2022&sig=planted"),
        # API keys in a header or a variable written as one word
        ("FSSPEC_HTTP", '{"headers": {"apikey": "planted"}}'),
        ("FSSPEC_HTTP", '{"headers": {"X-APIKEY": "planted"}}'),
        ("FSSPEC_WEBDAV_APIKEY", "planted"),
        # signed URLs in any forwarded value: Azure SAS, S3 and GCS presigned
        ("FSSPEC_HTTP_URL", "https://acct.blob.core.windows.net/c/f?sv=2022&sig=planted"),
        ("RAYTF_DATA_URL", "https://b.s3.amazonaws.com/k?X-Amz-Signature=planted&X-Amz-Date=1"),
        ("FSSPEC_GCS", '{"url": "https://storage.googleapis.com/b/o?X-Goog-Signature=planted"}'),
        # a database connection string's password
        ("RAYTF_DB", "Server=db;Database=runs;User Id=u;Password=planted;"),
    ],
)
def test_credentials_nested_in_fsspec_values_stay_on_the_driver(name, value):
    assert is_credential(name, value)
    assert name not in worker_env({name: value})
    assert credential_env({name: value}) == {name: value}  # forwarded only when asked
    assert worker_env({name: value}, credentials=True)[name] == value


@pytest.mark.parametrize(
    "name,value",
    [
        ("FSSPEC_S3", '{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}'),
        ("FSSPEC_S3", '{"client_kwargs": {"region_name": "eu-west-1"}, "anon": false}'),
        ("FSSPEC_S3", '{"config_kwargs": {"s3": {"addressing_style": "path"}}}'),
        ("FSSPEC_S3_ENDPOINT_URL", "http://127.0.0.1:9000/path@v2"),
        ("FSSPEC_ABFS_ACCOUNT_NAME", "myaccount"),
        ("FSSPEC_HTTP_URL", "https://example.com/data?signed=false&page=2"),
        ("RAYTF_NOTE", "keys; passwords are set on the nodes"),
    ],
)
def test_fsspec_settings_without_a_credential_still_reach_workers(name, value):
    assert not is_credential(name, value)
    assert worker_env({name: value})[name] == value
