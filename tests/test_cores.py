"""The default thread count (csrc/cores.c): the CPU affinity set, lowered to a cgroup CPU
quota.  bpe_cgroup_cpu_limit reads /proc and the cgroup files under a prefix, so each case
here is a made-up file tree laid out as the kernel lays out the real ones (see proc(5),
cgroups(7) and the kernel's cgroup-v2 / cgroup-v1 cfs-bandwidth documents); the expected
counts are ceil(quota / period) worked out by hand."""
import os

import pytest

from bpe_cffi._native import ffi, lib


def tree(tmp_path, files):
    """Writes {path: text} under tmp_path (paths absolute, as on the real system) and returns
    the prefix to give C."""
    for path, text in files.items():
        full = tmp_path / path.lstrip("/")
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    return os.fsencode(str(tmp_path))


def mountinfo(*lines):
    return "".join(line + "\n" for line in lines)


# a host's ordinary mounts around the cgroup one, so that the right line has to be picked
ROOT_MOUNT = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw"
PROC_MOUNT = "23 22 0:21 / /proc rw,nosuid - proc proc rw"
V2_MOUNT = "30 22 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate"


def v2_tree(tmp_path, path, limits, mount=V2_MOUNT):
    """A cgroup v2 system: the process in cgroup `path`, {cgroup: cpu.max text}."""
    files = {"/proc/self/cgroup": f"0::{path}\n",
             "/proc/self/mountinfo": mountinfo(ROOT_MOUNT, PROC_MOUNT, mount)}
    for cgroup, text in limits.items():
        files[f"/sys/fs/cgroup{cgroup.rstrip('/')}/cpu.max"] = text + "\n"
    return tree(tmp_path, files)


@pytest.mark.parametrize("cpu_max, cores", [
    ("max 100000", 0),           # no quota
    ("200000 100000", 2),        # docker --cpus=2
    ("150000 100000", 2),        # --cpus=1.5: rounded up
    ("50000 100000", 1),         # half a core still runs one thread
    ("100000 100000", 1),
    ("1000000 50000", 20),
    ("400000000 1000", 256),     # 400000 cores' worth: capped at BPE_MAX_THREADS
    ("garbage", 0),
    ("", 0),
])
def test_v2_quota_in_cores(tmp_path, cpu_max, cores):
    """A container with its own cgroup namespace sees its cgroup as "/", its cpu.max at the
    mount point."""
    assert lib.BPE_MAX_THREADS == 256
    prefix = v2_tree(tmp_path, "/", {"/": cpu_max})
    assert lib.bpe_cgroup_cpu_limit(prefix) == cores


def test_v2_smallest_quota_on_the_way_up(tmp_path):
    """A parent's quota binds its children: the smallest of the chain applies, wherever it
    is."""
    prefix = v2_tree(tmp_path, "/work.slice/job-7.scope", {
        "/work.slice/job-7.scope": "max 100000",
        "/work.slice": "300000 100000",
    })
    assert lib.bpe_cgroup_cpu_limit(prefix) == 3
    prefix = v2_tree(tmp_path / "b", "/work.slice/job-7.scope", {
        "/work.slice/job-7.scope": "100000 100000",
        "/work.slice": "300000 100000",
    })
    assert lib.bpe_cgroup_cpu_limit(prefix) == 1
    prefix = v2_tree(tmp_path / "c", "/work.slice/job-7.scope", {})   # no cpu.max anywhere
    assert lib.bpe_cgroup_cpu_limit(prefix) == 0


def test_v2_cgroup_outside_the_mount_has_no_quota(tmp_path):
    """A mount whose root is another cgroup does not show the process's: nothing is read
    (a sibling's or parent's files must not be taken for its own)."""
    mount = "30 22 0:26 /other /sys/fs/cgroup rw - cgroup2 cgroup2 rw"
    prefix = v2_tree(tmp_path, "/otherwise/job", {"/": "100000 100000",
                                                  "/job": "100000 100000"}, mount=mount)
    assert lib.bpe_cgroup_cpu_limit(prefix) == 0


def test_v2_mount_root_is_stripped(tmp_path):
    """Without its own cgroup namespace a container sees its full cgroup path, and the mount
    root is that same path: its directory is the mount point itself."""
    mount = "30 22 0:26 /system.slice/docker-ab12.scope /sys/fs/cgroup ro - cgroup2 cgroup2 rw"
    prefix = v2_tree(tmp_path, "/system.slice/docker-ab12.scope", {"/": "200000 100000"},
                     mount=mount)
    assert lib.bpe_cgroup_cpu_limit(prefix) == 2


def test_v2_escaped_mount_point(tmp_path):
    """mountinfo writes a space in a path as \\040."""
    files = {"/proc/self/cgroup": "0::/\n",
             "/proc/self/mountinfo": mountinfo(
                 ROOT_MOUNT, "30 22 0:26 / /my\\040cgroups rw - cgroup2 cgroup2 rw"),
             "/my cgroups/cpu.max": "300000 100000\n"}
    assert lib.bpe_cgroup_cpu_limit(tree(tmp_path, files)) == 3


V1_MOUNTS = mountinfo(
    ROOT_MOUNT, PROC_MOUNT,
    "31 22 0:28 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755",
    "34 31 0:31 / /sys/fs/cgroup/cpuset ro - cgroup cgroup rw,cpuset",
    "35 31 0:32 /docker/ab12 /sys/fs/cgroup/cpu,cpuacct ro master:7 - cgroup cgroup "
    "rw,cpu,cpuacct",
    "36 31 0:33 / /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory")


def test_v1_quota(tmp_path):
    """cgroup v1 (docker on an older host): the cpu controller's line and mount, the quota in
    cpu.cfs_quota_us over cpu.cfs_period_us; -1 is no quota."""
    base = {"/proc/self/cgroup": "5:memory:/docker/ab12\n4:cpu,cpuacct:/docker/ab12\n"
                                 "3:cpuset:/docker/ab12\n1:name=systemd:/docker/ab12\n",
            "/proc/self/mountinfo": V1_MOUNTS,
            "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            # a cpuset hierarchy's file that must not be read as the quota
            "/sys/fs/cgroup/cpuset/cpu.cfs_quota_us": "100000\n"}
    for quota, cores in [("250000", 3), ("-1", 0), ("100000", 1)]:
        files = dict(base)
        files["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"] = quota + "\n"
        assert lib.bpe_cgroup_cpu_limit(tree(tmp_path / quota, files)) == cores, quota


def test_v1_cpuset_is_not_cpu(tmp_path):
    """A process whose only v1 line with "cpu" in it is cpuset's has no cpu controller."""
    files = {"/proc/self/cgroup": "3:cpuset:/\n",
             "/proc/self/mountinfo": V1_MOUNTS,
             "/sys/fs/cgroup/cpuset/cpu.cfs_quota_us": "100000\n",
             "/sys/fs/cgroup/cpuset/cpu.cfs_period_us": "100000\n"}
    assert lib.bpe_cgroup_cpu_limit(tree(tmp_path, files)) == 0


def test_hybrid_takes_the_v1_cpu_controller(tmp_path):
    """On a hybrid system (v1 controllers and an empty v2 hierarchy) the cpu controller is
    v1's, whatever order the lines come in."""
    files = {"/proc/self/cgroup": "0::/user.slice\n4:cpu,cpuacct:/docker/ab12\n",
             "/proc/self/mountinfo": V1_MOUNTS + mountinfo(
                 "40 31 0:40 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw"),
             "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "200000\n",
             "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
             "/sys/fs/cgroup/unified/user.slice/cpu.max": "100000 100000\n"}
    assert lib.bpe_cgroup_cpu_limit(tree(tmp_path, files)) == 2


@pytest.mark.parametrize("files", [
    {},                                                        # no /proc at all
    {"/proc/self/cgroup": "0::/\n"},                           # no mountinfo
    {"/proc/self/cgroup": "0::/\n", "/proc/self/mountinfo": ""},
    {"/proc/self/cgroup": "nonsense\n", "/proc/self/mountinfo": mountinfo(V2_MOUNT)},
    {"/proc/self/cgroup": "0::/\n",                            # mountinfo lines cut short
     "/proc/self/mountinfo": "30 22 0:26 / /sys/fs/cgroup\n30 22 0:26 / /x rw - cgroup2\n"},
    {"/proc/self/cgroup": "0::/" + "a" * 20000 + "\n",         # a line longer than C reads
     "/proc/self/mountinfo": mountinfo(V2_MOUNT)},
])
def test_unreadable_means_no_quota(tmp_path, files):
    """Missing, empty or malformed files give 0 (the affinity count stands), never a crash."""
    assert lib.bpe_cgroup_cpu_limit(tree(tmp_path, files)) == 0


def test_cores_available_is_affinity_lowered_to_quota():
    """bpe_cores_available (n_threads 0) is the affinity count, lowered to this process's
    quota when it has one."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this system")
    affinity = len(os.sched_getaffinity(0))
    quota = lib.bpe_cgroup_cpu_limit(b"")
    expected = min(affinity, quota) if quota else affinity
    assert lib.bpe_cores_available() == min(expected, lib.BPE_MAX_THREADS)
    assert lib.bpe_cgroup_cpu_limit(ffi.NULL) == quota


def _writable_cpu_cgroup_root():
    """(the directory of this process's cpu cgroup, 1 for v2 / 0 for v1) when it is the root
    of a hierarchy mounted at the usual place and this process may make cgroups in it (root
    in a VM or a privileged container), else None."""
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if "cpu" in controllers.split(",") and path == "/":
            for d in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
                if os.path.exists(os.path.join(d, "cpu.cfs_quota_us")):
                    return (d, 0) if os.access(d, os.W_OK) else None
        if number == "0" and controllers == "" and path == "/":
            d = "/sys/fs/cgroup"
            if os.path.exists(os.path.join(d, "cgroup.subtree_control")) and \
                    os.access(d, os.W_OK):
                return d, 1
    return None


def test_a_real_quota_limits_the_threads(tmp_path):
    """End to end, where this process may make cgroups: a child process put in a new cgroup
    with a quota of one core (on this 2-core machine) gets 1 from bpe_cores_available."""
    import subprocess
    import sys
    found = _writable_cpu_cgroup_root()
    if found is None:
        pytest.skip("no writable cpu cgroup here (needs root outside an unprivileged "
                    "container); the made-up trees above cover the lookup")
    root, v2 = found
    group = os.path.join(root, f"bpe_cffi_test_{os.getpid()}")
    try:
        os.mkdir(group)
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup in {root}: {exc}")
    try:
        try:
            if v2:
                with open(os.path.join(group, "cpu.max"), "w") as f:
                    f.write("100000 100000")
            else:
                with open(os.path.join(group, "cpu.cfs_period_us"), "w") as f:
                    f.write("100000")
                with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
                    f.write("100000")
        except OSError as exc:
            pytest.skip(f"cannot set a CPU quota in {group}: {exc}")
        code = ("import os, sys\n"
                "with open(sys.argv[1], 'w') as f: f.write(str(os.getpid()))\n"
                "from bpe_cffi._native import lib\n"
                "print(lib.bpe_cores_available(), lib.bpe_cgroup_cpu_limit(b''))\n")
        out = subprocess.run([sys.executable, "-c", code, os.path.join(group, "cgroup.procs")],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["1", "1"]
    finally:
        os.rmdir(group)
