"""A Docker engine of the tests' own, for tests/compose: dockerd started by hand (no systemd)
on a socket of its own (never /var/run/docker.sock, which other tests take as a user's
engine), its images and layers kept in ~/.cache/zapomni/docker between runs.

A started dockerd changes the machine: it turns on IP forwarding, sets the FORWARD policy to
DROP, adds iptables chains and rules, the docker0 bridge and one bridge per network, mounts
and processes (containerd, shims), none of which its own exit takes away. ``stop`` puts each
back as ``start`` found it; what ``start`` found is written down first, so a session that died
before its cleanup is cleaned by the next ``start``. One engine at a time (a lock)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

from zapomni.services.stack.falkordb import default_dir

EXEC_ROOT = Path("/run/zapomni-test-docker")  # short: containerd's socket path lives under it
LOCK = Path("/run/zapomni-test-docker.lock")
STATE = EXEC_ROOT / "before.json"
PIDFILE = EXEC_ROOT / "dockerd.pid"
SOCKET = EXEC_ROOT / "docker.sock"
CGROUP_PARENT = "zapomni-test-docker"  # containers' cgroups, to find what a dead run left
# The CPU weight of all the containers together, as 8 processes of the host: the stack's busy
# ones (4 workers, the front, the query service, FalkorDB, Redis) as `zapomni up` runs them.
# Under cgroup v1 every process outside a cgroup weighs one share of 1024 against the parent's
# whole 1024: at load 45, 10 containers got ~1/45 of the host together and a 1 MB document's
# parts, a few seconds each on a quiet host, ran over their job limit and stalled at 34 of 63
# for 10 minutes; at 8192 the other 29 were written in ~90 s (2026-12-02).
CPU_SHARES = 8 * 1024
PLUGINS = Path("/run/docker")  # dockerd makes /run/docker/plugins whatever its exec root
TABLES = ("filter", "nat")
NEEDS = ("dockerd", "iptables", "ip", "debootstrap")
INSTALL = ("the compose tests start a Docker engine of their own and need root and {missing} "
           "(Debian: apt-get install docker.io docker-compose debootstrap); ./dev test "
           "installs them as root")


ANOTHER = ("another Docker engine runs on this machine (docker0 is up): the compose tests start "
           "one of their own, which would share its bridge and iptables chains; stop it first")


def data_root() -> Path:
    return default_dir("XDG_CACHE_HOME", ".cache") / "docker"


def missing_tools() -> list[str]:
    return [tool for tool in NEEDS if shutil.which(tool) is None]


def run(*command: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=check, capture_output=True, text=True)


class Engine:
    """dockerd for the tests; ``host`` is its DOCKER_HOST. Start once, stop always."""

    host = f"unix://{SOCKET}"

    def __init__(self, log: Path) -> None:
        self.log = log
        self.process: subprocess.Popen | None = None
        self._lock: int | None = None

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}

    def start(self) -> None:
        problems = missing_tools()
        if os.geteuid() != 0 or problems:
            raise RuntimeError(INSTALL.format(missing=", ".join(problems) or "nothing else"))
        self._lock = os.open(LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another test session owns the test Docker engine ({LOCK})"
                               ) from None
        if STATE.exists():  # a session that died before cleaning up
            restore(json.loads(STATE.read_text()))
        if "docker0" in links():
            raise RuntimeError(ANOTHER)
        before = snapshot()
        EXEC_ROOT.mkdir(mode=0o700)
        STATE.write_text(json.dumps(before))
        data_root().mkdir(parents=True, exist_ok=True)
        weigh_containers()
        command = ["dockerd", "--storage-driver=overlay2", f"--data-root={data_root()}",
                   f"--exec-root={EXEC_ROOT}", f"--pidfile={PIDFILE}", f"-H={self.host}",
                   f"--cgroup-parent={CGROUP_PARENT}", f"--mtu={uplink_mtu()}"]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"dockerd exited ({self.process.returncode}):\n"
                                   f"{self.log.read_text()[-3000:]}")
            answered = subprocess.run(["docker", "version"], env=self.env(),
                                      capture_output=True)
            if answered.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not answer in {timeout:.0f} s; {self.log}")
            time.sleep(0.2)

    def stop(self) -> None:
        """dockerd stopped (it stops its containers and containerd), then the machine as it
        was. Safe to call after a failed start."""
        try:
            if self.process is not None and self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(60)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            if STATE.exists():
                restore(json.loads(STATE.read_text()))
        finally:
            if self._lock is not None:
                os.close(self._lock)
                self._lock = None


def weigh_containers() -> None:
    """The containers' parent cgroup made before dockerd puts them in it, weighing
    CPU_SHARES (cgroup v1's cpu.shares, or v2's cpu.weight on its scale of 100)."""
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.shares").exists() or (v1 / "cgroup.procs").exists():
        (v1 / CGROUP_PARENT).mkdir(exist_ok=True)
        (v1 / CGROUP_PARENT / "cpu.shares").write_text(f"{CPU_SHARES}\n")
    elif Path("/sys/fs/cgroup/cgroup.controllers").exists():
        group = Path("/sys/fs/cgroup") / CGROUP_PARENT
        group.mkdir(exist_ok=True)
        if (group / "cpu.weight").exists():
            (group / "cpu.weight").write_text(f"{CPU_SHARES * 100 // 1024}\n")


def uplink_mtu() -> int:
    """The MTU of the default route's interface: the default bridge's packets must fit it
    (1400 on the test machines; Docker's 1500 stalls TLS through such a link)."""
    route = run("ip", "-o", "route", "show", "default", check=False).stdout.split()
    if "dev" in route:
        mtu = Path(f"/sys/class/net/{route[route.index('dev') + 1]}/mtu")
        if mtu.exists():
            return int(mtu.read_text())
    return 1500


def snapshot() -> dict:
    return {
        "ip_forward": Path("/proc/sys/net/ipv4/ip_forward").read_text().strip(),
        "rules": {table: run("iptables", "-t", table, "-S").stdout.splitlines()
                  for table in TABLES},
        "links": links(),
        "plugins_dir": PLUGINS.exists(),
    }


def links() -> list[str]:
    lines = run("ip", "-o", "link", "show").stdout.splitlines()
    return [line.split(": ")[1].split("@")[0] for line in lines]


def restore(before: dict) -> None:
    """Everything the engine added since ``before``, taken away; the machine as it was."""
    stop_leftovers()
    unmount_under(EXEC_ROOT, data_root())
    for table in TABLES:
        restore_rules(table, before["rules"][table])
    for name in set(links()) - set(before["links"]):
        if name == "docker0" or name.startswith(("br-", "veth")):
            run("ip", "link", "delete", name, check=False)
    Path("/proc/sys/net/ipv4/ip_forward").write_text(before["ip_forward"] + "\n")
    if not before["plugins_dir"]:
        shutil.rmtree(PLUGINS, ignore_errors=True)
    shutil.rmtree(EXEC_ROOT, ignore_errors=True)


def stop_leftovers() -> None:
    """What a dead session's engine left running, by PID: its dockerd (from its pidfile), the
    containerd and shims that name its exec root, the processes in its containers' cgroups."""
    pids = leftover_pids() - {0, os.getpid()}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{pid}").exists() and not zombie(pid) for pid in pids):
        if time.monotonic() > deadline:
            raise RuntimeError(f"engine processes did not end: {sorted(pids)}")
        time.sleep(0.1)
    groups = [*Path("/sys/fs/cgroup").glob(f"*/{CGROUP_PARENT}/*/"),  # v1's, then v2's
              *Path("/sys/fs/cgroup").glob(f"{CGROUP_PARENT}/*/"),
              *Path("/sys/fs/cgroup").glob(f"*/{CGROUP_PARENT}/"),
              *Path("/sys/fs/cgroup").glob(f"{CGROUP_PARENT}/")]
    for group in groups:  # containers' first, then their parent
        remove_cgroup(group, deadline)


def remove_cgroup(group: Path, deadline: float) -> None:
    """A cgroup whose processes just died stays busy for a moment while the kernel lets go."""
    while True:
        try:
            group.rmdir()
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def leftover_pids() -> set[int]:
    pids = {int(PIDFILE.read_text().strip() or 0)} if PIDFILE.exists() else set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if str(EXEC_ROOT).encode() in (proc / "cmdline").read_bytes():
                    pids.add(int(proc.name))
    for procs in [*Path("/sys/fs/cgroup").glob(f"*/{CGROUP_PARENT}/*/cgroup.procs"),
                  *Path("/sys/fs/cgroup").glob(f"{CGROUP_PARENT}/*/cgroup.procs")]:
        pids.update(int(pid) for pid in procs.read_text().split())
    return pids


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def unmount_under(*roots: Path) -> None:
    """Unmount every mount at or below ``roots`` (overlays, network namespaces, dockerd's bind
    of its data root on itself), deepest first."""
    roots_ = tuple(str(root) for root in roots)
    below = tuple(f"{root}/" for root in roots_)
    for _ in range(3):  # a mount hidden under another shows once that one is gone
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        points = [line.split()[4] for line in mounts]
        ours = [p for p in points if p in roots_ or p.startswith(below)]
        if not ours:
            return
        for point in sorted(set(ours), key=len, reverse=True):
            run("umount", "-l", point, check=False)


def dockers(rule: str) -> bool:
    """A rule dockerd writes: to or in its chains, on its bridges, or its source NAT."""
    return any(mark in rule for mark in ("DOCKER", "docker0", "br-", "MASQUERADE"))


def restore_rules(table: str, before: list[str]) -> None:
    """Rules and chains in ``table`` that the engine added, removed; its policies put back."""
    now = run("iptables", "-t", table, "-S").stdout.splitlines()
    added = [r for r in now if r.startswith("-A ") and r not in before and dockers(r)]
    for rule in reversed(added):
        run("iptables", "-t", table, "-D", *shlex.split(rule)[1:], check=False)
    for chain in [r.split()[1] for r in now if r.startswith("-N ") and r not in before]:
        run("iptables", "-t", table, "-F", chain, check=False)
    for chain in [r.split()[1] for r in now if r.startswith("-N ") and r not in before]:
        run("iptables", "-t", table, "-X", chain, check=False)
    for policy in [r for r in before if r.startswith("-P ")]:
        run("iptables", "-t", table, *shlex.split(policy), check=False)
