"""The GPU host of the benches: this machine behind a real OpenSSH daemon on loopback, configured as the suite's,
as a GPU host is reached in production (its encryption in C, not in the benches' own Python processes)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from simhost.ports import free_port, wait_for_port

SSHD = "/usr/sbin/sshd"
KEY_NAME = "id_bench"


def start_sshd(work: Path) -> tuple[subprocess.Popen, int, Path, str]:
    """Start sshd for `work` (a fresh directory): (the process, its port, the client key's directory holding
    KEY_NAME, the host's public key line)."""
    if not Path(SSHD).exists():
        raise SystemExit(f"{SSHD} is not installed: `make test` (or apt-get install openssh-server) installs it")
    key_dir = work / "keys"
    key_dir.mkdir()
    for path in (work / "host_key", key_dir / KEY_NAME):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    (work / "authorized_keys").write_text((key_dir / f"{KEY_NAME}.pub").read_text())
    home = work / "home"  # no ~/.bashrc: a GPU host's service account sources none per command
    home.mkdir()
    port = free_port()
    (work / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {work / 'host_key'}\n"
        f"AuthorizedKeysFile {work / 'authorized_keys'}\nPidFile {work / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "UsePAM no\nStrictModes no\nAllowTcpForwarding yes\nMaxSessions 64\nMaxStartups 128\n"
        f"Subsystem sftp internal-sftp\nLogLevel ERROR\nSetEnv HOME={home}\n"
    )
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    with open(work / "sshd.log", "wb") as log:
        sshd = subprocess.Popen([SSHD, "-D", "-e", "-f", str(work / "sshd_config")], stderr=log)
    wait_for_port(port, process=sshd, what="sshd")
    return sshd, port, key_dir, (work / "host_key.pub").read_text().strip()
