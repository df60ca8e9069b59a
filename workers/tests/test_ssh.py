"""Every value that reaches a remote command is passed literally, never executed (property tests against the
real sshd and the host's shell-setup wrapper)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.ssh import HostConnection, env_assignments, quote_command

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
