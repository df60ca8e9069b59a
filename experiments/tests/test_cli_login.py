"""`specdash login` and where the client finds its credentials: owner-only files, XDG, the environment."""

from __future__ import annotations

import json
import stat

import httpx
import pytest

from experiments.cli import client, credentials
from experiments.cli.credentials import CredentialsError
from experiments.models import ApiToken

from .cli_support import IN_PROCESS_URL

pytestmark = pytest.mark.django_db


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_it_logs_in_with_a_valid_token_and_stores_it_owner_only(cli, cli_home, member):
    _, token = ApiToken.issue(member)

    result = cli("login", IN_PROCESS_URL + "/", "--token", token)

    assert result.code == 0, result.err
    assert "as member (member)" in result.out
    path = cli_home / "specdash" / "credentials"
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
    assert json.loads(path.read_text()) == {"url": IN_PROCESS_URL, "token": token}
    assert token not in result.out + result.err
    # The stored credentials are what the next command uses.
    assert credentials.load().token == token


def test_it_reads_the_token_from_stdin_and_prints_json(cli, member):
    _, token = ApiToken.issue(member)

    result = cli("login", IN_PROCESS_URL, "--json", stdin=token + "\n")

    assert result.code == 0, result.err
    assert json.loads(result.out)["username"] == "member" and json.loads(result.out)["role"] == "member"


def test_it_refuses_a_wrong_token_and_stores_nothing(cli, cli_home):
    result = cli("login", IN_PROCESS_URL, "--token", "sd_not-a-real-token")

    assert result.code == 2
    assert "token was refused (401)" in result.err
    assert not (cli_home / "specdash" / "credentials").exists()


def test_it_says_that_a_user_without_a_role_can_do_nothing(cli, outsider):
    _, token = ApiToken.issue(outsider)

    result = cli("login", IN_PROCESS_URL, "--token", token)

    assert result.code == 0 and "no role" in result.out and "403" in result.out


def test_it_tightens_a_config_directory_that_others_could_read(cli_home):
    (cli_home / "specdash").mkdir(parents=True, mode=0o755)

    path = credentials.save("https://specdash.example.com", "sd_abc")

    assert _mode(path.parent) == 0o700 and _mode(path) == 0o600


def test_it_refuses_a_credentials_file_that_others_can_read(cli_home):
    path = credentials.save("https://specdash.example.com", "sd_abc")
    path.chmod(0o644)

    with pytest.raises(CredentialsError, match="readable by others"):
        credentials.load()


def test_it_prefers_the_environment_and_needs_both_variables(cli_home, monkeypatch):
    credentials.save("https://file.example.com", "sd_file")
    monkeypatch.setenv("SPECDASH_URL", "https://env.example.com/")
    monkeypatch.setenv("SPECDASH_TOKEN", "sd_env")

    assert credentials.load() == credentials.Credentials("https://env.example.com", "sd_env", "environment")
    monkeypatch.delenv("SPECDASH_TOKEN")
    with pytest.raises(CredentialsError, match="SPECDASH_TOKEN is not set"):
        credentials.load()


def test_it_follows_xdg_config_home_and_ignores_a_relative_one(tmp_path, monkeypatch):
    assert credentials.credentials_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "specdash" / "credentials"
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = tmp_path / "home" / ".config" / "specdash" / "credentials"
    assert credentials.credentials_path({"XDG_CONFIG_HOME": "relative/dir"}) == expected


def test_it_says_how_to_log_in_when_there_are_no_credentials(cli_home):
    with pytest.raises(CredentialsError, match="run `specdash login URL`"):
        credentials.load()


@pytest.mark.parametrize(
    "url",
    ["ftp://x.example.com", "https://user:pw@x.example.com", "https://x.example.com/?a=1", "not a url", "https://"],
)
def test_it_refuses_urls_it_should_not_send_a_token_to(url):
    with pytest.raises(CredentialsError):
        credentials.normalize_url(url)


@pytest.mark.parametrize("token", ["", "two words", "x" * 201, "tok\x1ben"])
def test_it_refuses_what_cannot_be_a_token(token):
    with pytest.raises(CredentialsError):
        credentials.check_token(token)


def test_the_me_endpoint_names_the_user_role_and_token(client, maintainer):
    _, token = ApiToken.issue(maintainer, name="ci")

    body = client.get("/api/me", headers={"Authorization": f"Bearer {token}"}).json()

    assert body["username"] == "maintainer" and body["role"] == "maintainer" and body["token"]["name"] == "ci"
    assert client.get("/api/me").status_code == 401


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000", "http://localhost:8000/", "http://[::1]:8000", "http://127.0.0.2", "HTTP://LocalHost",
     "https://specdash.example.com"],
)  # fmt: skip
def test_it_takes_https_anywhere_and_plain_http_to_this_machine(url):
    assert credentials.normalize_url(url, environ={}) == url.strip().rstrip("/")


@pytest.mark.parametrize(
    "url",
    ["http://specdash.example.com", "http://10.0.0.5:8000", "http://192.168.1.20", "http://localhost.example.com",
     "http://127.1", "http://0.0.0.0:8000", "http://[fe80::1]:8000"],
)  # fmt: skip
def test_it_refuses_plain_http_to_another_machine(url):
    with pytest.raises(CredentialsError, match=r"refusing to send the API token over plain http.*ALLOW_HTTP=1"):
        credentials.normalize_url(url, environ={})
    # A network the user trusts: said so, it is taken.
    assert credentials.normalize_url(url, environ={"SPECDASH_ALLOW_HTTP": "1"}) == url
    with pytest.raises(CredentialsError):
        credentials.normalize_url(url, environ={"SPECDASH_ALLOW_HTTP": "yes please"})


class _Counting(httpx.WSGITransport):
    """The app itself, counting what reaches it."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.requests: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return super().handle_request(request)


@pytest.fixture
def counted(cli, monkeypatch) -> _Counting:
    from django.core.wsgi import get_wsgi_application

    transport = _Counting(app=get_wsgi_application())
    monkeypatch.setattr(client, "DEFAULT_TRANSPORT", transport)
    return transport


def test_login_refuses_a_plain_http_url_before_sending_the_token(cli, cli_home, counted, member, settings):
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "specdash.example.com"]
    _, token = ApiToken.issue(member)

    result = cli("login", "http://specdash.example.com", "--token", token)

    assert result.code == 2 and "refusing to send the API token over plain http to 'specdash.example.com'" in result.err
    assert counted.requests == [] and not (cli_home / "specdash" / "credentials").exists()
    assert ApiToken.objects.get(user=member).last_used_at is None


def test_every_command_refuses_a_plain_http_url_from_the_environment(cli, counted, member, monkeypatch):
    _, token = ApiToken.issue(member)
    monkeypatch.setenv("SPECDASH_URL", "http://10.0.0.5:8000")
    monkeypatch.setenv("SPECDASH_TOKEN", token)

    result = cli("status")

    assert result.code == 2 and "refusing to send the API token over plain http to '10.0.0.5'" in result.err
    assert counted.requests == []
    # Nor can the client be handed such credentials another way: it refuses them before any request.
    with pytest.raises(CredentialsError):
        client.Api(credentials.Credentials("http://10.0.0.5:8000", token, "test"))


def test_the_opt_out_lets_a_trusted_network_use_plain_http(cli, cli_home, counted, member, monkeypatch, settings):
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "specdash.lab"]
    _, token = ApiToken.issue(member)
    monkeypatch.setenv("SPECDASH_ALLOW_HTTP", "1")

    result = cli("login", "http://specdash.lab", "--token", token)

    assert result.code == 0, result.err
    assert "Warning: the URL is plain http" in result.err and len(counted.requests) == 1
    assert credentials.load().url == "http://specdash.lab"
