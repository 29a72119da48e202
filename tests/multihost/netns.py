"""Simulated hosts for multi-host tests: Linux network namespaces joined by veth pairs to a bridge.

Every host is its own network namespace (its own address, loopback and
firewall) and runs its processes in its own UTS namespace (its own hostname).
Only addresses created here are used: a private /24 picked per run, on a bridge
that lives in a namespace of its own. Needs root, ``ip`` (iproute2), and for
the firewall and capture tests ``iptables`` and ``tcpdump``.
"""

from __future__ import annotations

import datetime
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")
    return out


@dataclass
class Host:
    name: str  # hostname inside the namespace
    ns: str
    ip: str

    def cmd(self, *argv: str, private: str | None = None) -> list[str]:
        """``argv`` run in this host's network namespace with its own hostname.

        ``private``: a folder this host sees as its own empty disk (a tmpfs in a
        mount namespace of its own): no filesystem shared with the other hosts there.
        """
        if private is None:
            return ["ip", "netns", "exec", self.ns, "unshare", "--uts", "sh", "-c",
                    f'hostname {self.name} && exec "$@"', "sh", *argv]
        return ["ip", "netns", "exec", self.ns, "unshare", "--uts", "--mount", "--propagation", "private", "sh", "-c",
                f'hostname {self.name} && mount -t tmpfs tmpfs {private} && exec "$@"', "sh", *argv]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return sh("ip", "netns", "exec", self.ns, *argv, check=check)


@dataclass
class Net:
    """The simulated hosts and the processes started on them (all stopped by :meth:`close`)."""

    tag: str
    subnet: str
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: list[subprocess.Popen[Any]] = field(default_factory=list)
    bridge_ns: str = ""

    @classmethod
    def create(cls, names: list[str]) -> Net:
        tag = f"tp{os.getpid() % 10000}{random.randrange(100, 999)}"
        net = cls(tag, f"10.{random.randrange(100, 250)}.{random.randrange(1, 250)}")
        net.bridge_ns = f"{tag}-sw"
        try:
            sh("ip", "netns", "add", net.bridge_ns)
            sh("ip", "netns", "exec", net.bridge_ns, "ip", "link", "add", "br0", "type", "bridge")
            sh("ip", "netns", "exec", net.bridge_ns, "ip", "link", "set", "br0", "up")
            for i, name in enumerate(names, start=1):
                ns = f"{tag}-{name}"
                host = Host(name, ns, f"{net.subnet}.{i}")
                sh("ip", "netns", "add", ns)
                # a veth pair: one end in the host, the other on the bridge
                sh("ip", "link", "add", f"{tag}h{i}", "type", "veth", "peer", "name", f"{tag}b{i}")
                sh("ip", "link", "set", f"{tag}h{i}", "netns", ns)
                sh("ip", "link", "set", f"{tag}b{i}", "netns", net.bridge_ns)
                sh("ip", "netns", "exec", net.bridge_ns, "ip", "link", "set", f"{tag}b{i}", "master", "br0")
                sh("ip", "netns", "exec", net.bridge_ns, "ip", "link", "set", f"{tag}b{i}", "up")
                host.run("ip", "link", "set", f"{tag}h{i}", "name", "eth0")
                host.run("ip", "addr", "add", f"{host.ip}/24", "dev", "eth0")
                host.run("ip", "link", "set", "eth0", "up")
                host.run("ip", "link", "set", "lo", "up")
                net.hosts[name] = host
        except BaseException:
            net.close()
            raise
        return net

    def start(self, host: str, *argv: str, env: dict[str, str] | None = None, log: str | None = None,
              private: str | None = None) -> subprocess.Popen[Any]:
        out = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(self.hosts[host].cmd(*argv, private=private), env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in reversed(self.procs):
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(15)
        for host in self.hosts.values():
            sh("ip", "netns", "del", host.ns, check=False)
        if self.bridge_ns:
            sh("ip", "netns", "del", self.bridge_ns, check=False)


def worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT, os.path.join(ROOT, "tests", "multihost")])
    env["DASK_DISTRIBUTED__WORKER__DAEMON"] = "False"
    env.pop("TUNEPLAT_TUNER_HOST", None)
    return env


def write_certs(folder: str) -> dict[str, str]:
    """A self-signed CA/certificate for every role of the cluster; the key file is 0600."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tuneplat-test-cluster")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    paths = {"ca": os.path.join(folder, "ca.pem"), "cert": os.path.join(folder, "cert.pem"),
             "key": os.path.join(folder, "key.pem")}
    pem = cert.public_bytes(serialization.Encoding.PEM)
    for p in (paths["ca"], paths["cert"]):
        with open(p, "wb") as f:
            f.write(pem)
    fd = os.open(paths["key"], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return paths


def start_cluster(net: Net, tmp: str, tls: bool, workers: tuple[str, ...] = ("w1", "w2"), port: int = 8786,
                  private: str | None = None) -> tuple[str, dict[str, str] | None]:
    """A ``dask scheduler`` on host "sched" and one ``dask worker`` per worker host; returns the address.

    ``private``: a folder each worker host has on a disk of its own (see :meth:`Host.cmd`).
    """
    certs = write_certs(tmp) if tls else None
    tls_args = ["--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"], "--tls-key", certs["key"]] if certs else []
    sched = net.hosts["sched"]
    proto = "tls" if tls else "tcp"
    env = worker_env()
    net.start("sched", sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", sched.ip, "--port",
              str(port), "--protocol", proto, "--dashboard-address", "127.0.0.1:0", *tls_args, env=env,
              log=os.path.join(tmp, "scheduler.log"))
    address = f"{proto}://{sched.ip}:{port}"
    for w in workers:
        start_worker(net, w, address, tmp, certs, private)
    return address, certs


def start_worker(net: Net, host: str, address: str, tmp: str, certs: dict[str, str] | None,
                 private: str | None = None) -> None:
    """One ``dask worker`` (one process, one thread, CPU=1) on ``host``, joining the scheduler at ``address``."""
    tls_args = ["--tls-ca-file", certs["ca"], "--tls-cert", certs["cert"], "--tls-key", certs["key"]] if certs else []
    net.start(host, sys.executable, "-m", "distributed.cli.dask_worker", address, "--host", net.hosts[host].ip,
              "--nthreads", "1", "--nworkers", "1", "--dashboard-address", "127.0.0.1:0", "--resources", "CPU=1",
              *tls_args, env=worker_env(), log=os.path.join(tmp, f"worker-{host}.log"), private=private)


def run_tuner(net: Net, script: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Run ``script`` (in tests/multihost) as the tuner, on host "tuner"."""
    env = worker_env()
    out = subprocess.run(net.hosts["tuner"].cmd(sys.executable, os.path.join(ROOT, "tests", "multihost", script),
                                                *args),
                         env=env, capture_output=True, text=True, timeout=timeout)
    return out


def available() -> str | None:
    """Why these tests cannot run here (None when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "iptables", "tcpdump"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install iproute2 iptables tcpdump util-linux)"
    return None


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling another namespace's process (a port, a file): nothing to block on
