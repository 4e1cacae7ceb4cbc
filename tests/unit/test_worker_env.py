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
from raytf.worker import environment

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
