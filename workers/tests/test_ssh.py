"""Every value that reaches a remote command is passed literally, never executed (property tests against the
real sshd and the host's shell-setup wrapper)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.ssh import HostConnection, SSHError, env_assignments, quote_command

pytestmark = pytest.mark.integration

# NUL cannot be part of a command-line argument at all; everything else, shell metacharacters included, must
# arrive unchanged. Surrogates are not text that UTF-8 can carry.
ARGUMENT = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40)
DANGEROUS = st.sampled_from(["$(touch /tmp/pwned)", "`id`", "; rm -rf ~", "a'b\"c", "$HOME", "*", "\\", "\n", "&&"])


@pytest.fixture(scope="module")
def connection(sshd):
    loop = asyncio.new_event_loop()
    access = sshd.access(shell_setup="export SPECDASH_SETUP_RAN=1")
    conn = loop.run_until_complete(HostConnection.open(access))
    yield loop, conn
    loop.run_until_complete(conn.close())
    loop.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(ARGUMENT, DANGEROUS), min_size=1, max_size=5))
def test_it_passes_arguments_literally(connection, values):
    loop, conn = connection

    result = loop.run_until_complete(conn.run(quote_command(["printf", "%s\\0", *values])))

    assert result.ok, result.stderr
    assert result.stdout.split("\x00")[:-1] == values


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.one_of(ARGUMENT, DANGEROUS))
def test_it_passes_env_values_literally(connection, value):
    loop, conn = connection
    command = quote_command(["env", *env_assignments({"SPECDASH_VALUE": value}), "printenv", "SPECDASH_VALUE"])

    result = loop.run_until_complete(conn.run(command))

    assert result.ok, result.stderr
    assert result.stdout == value + "\n"


def test_it_runs_the_shell_setup_before_every_command(connection):
    loop, conn = connection

    result = loop.run_until_complete(conn.run("printenv SPECDASH_SETUP_RAN"))

    assert result.stdout.strip() == "1"


def test_it_hands_over_each_stderr_line_as_it_arrives_and_keeps_stdout_whole(connection):
    loop, conn = connection
    seen: list[tuple[str, float]] = []

    async def on_line(line: str) -> None:
        seen.append((line, loop.time()))

    command = "echo result; echo 'benchclient: 1/2 done' >&2; sleep 0.5; echo 'benchclient: 2/2 done' >&2; exit 3"
    started = loop.time()
    result = loop.run_until_complete(conn.run_reading_stderr(command, on_stderr_line=on_line, timeout=30))

    assert [line for line, _ in seen] == ["benchclient: 1/2 done\n", "benchclient: 2/2 done\n"]
    assert seen[0][1] - started < seen[1][1] - started - 0.3  # the first arrived before the command went on
    assert result.exit_status == 3 and result.stdout == "result\n" and "2/2 done" in result.stderr


def test_a_command_reading_stderr_that_outlives_its_timeout_is_an_error(connection):
    loop, conn = connection

    async def ignore(line: str) -> None:
        pass

    with pytest.raises(SSHError, match=r"timed out after 0\.5 s"):
        loop.run_until_complete(conn.run_reading_stderr("sleep 5", on_stderr_line=ignore, timeout=0.5))


def test_a_started_server_is_told_by_its_own_group_even_when_many_start_at_once(connection, tmp_path):
    from workers.run import server

    loop, conn = connection

    async def start_many() -> list[tuple[int, int] | str]:
        return await asyncio.gather(
            *(server.start(conn, str(tmp_path), "sleep 30", str(tmp_path / f"log{i}")) for i in range(12))
        )

    started = loop.run_until_complete(start_many())
    try:
        for result in started:
            assert isinstance(result, tuple), result
            pid, pgid = result
            # Its own group, led by itself (setsid done), never the launching shell's, which is gone by now.
            assert pgid == pid, started
    finally:
        pids = " ".join(str(r[0]) for r in started if isinstance(r, tuple))
        loop.run_until_complete(conn.run(f"kill {pids} 2>/dev/null; true"))


def test_it_encrypts_with_aes_gcm_where_the_host_offers_it(connection):
    _loop, conn = connection

    assert conn._conn.get_extra_info("send_cipher") == "aes256-gcm@openssh.com"
    assert conn._conn.get_extra_info("recv_cipher") == "aes256-gcm@openssh.com"


def test_it_falls_back_to_chacha20_for_a_host_without_aes_gcm(sshd):
    async def connect_and_run(access):
        conn = await HostConnection.open(access)
        try:
            return conn._conn.get_extra_info("recv_cipher"), await conn.run("echo ok")
        finally:
            await conn.close()

    with sshd.variant("chacha-only", Ciphers="chacha20-poly1305@openssh.com") as chacha_only:
        cipher, result = asyncio.run(connect_and_run(chacha_only.access()))

    assert cipher == "chacha20-poly1305@openssh.com"
    assert result.stdout == "ok\n"
