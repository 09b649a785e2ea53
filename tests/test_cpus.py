"""rdmalab.proc.cpus.usable_cpus(): the CPUs this process may really use, from its affinity and its
cgroup's quota (v2 cpu.max in its cgroup or any ancestor, v1 cpu.cfs_quota_us), read here from a fake
cgroup tree."""
import os

from rdmalab.proc.cpus import usable_cpus

AFFINITY = float(len(os.sched_getaffinity(0)))


def fake(tmp_path, membership, files):
    """A /proc/self/cgroup saying `membership`, and a cgroup root holding `files` {path: text}."""
    for path, text in files.items():
        (tmp_path / "root" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "root" / path).write_text(text)
    (tmp_path / "cgroup").write_text(membership)
    return {"cgroup_root": str(tmp_path / "root"), "proc_cgroup": str(tmp_path / "cgroup")}


def test_a_cgroup_v2_quota_limits_it(tmp_path):
    where = fake(tmp_path, "0::/lab/kernel\n", {"lab/kernel/cpu.max": "50000 100000\n"})
    assert usable_cpus(**where) == 0.5


def test_a_quota_on_an_ancestor_cgroup_limits_it_too(tmp_path):
    where = fake(tmp_path, "0::/lab/kernel\n", {"lab/kernel/cpu.max": "max 100000\n",
                                                "lab/cpu.max": "25000 100000\n"})
    assert usable_cpus(**where) == 0.25


def test_a_cgroup_v1_quota_limits_it(tmp_path):
    where = fake(tmp_path, "4:cpu,cpuacct:/docker/abc\n2:memory:/docker/abc\n",
                 {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "75000\n",
                  "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert usable_cpus(**where) == 0.75


def test_without_a_quota_the_affinity_counts(tmp_path):
    where = fake(tmp_path, "0::/lab\n4:cpu,cpuacct:/\n", {"lab/cpu.max": "max 100000\n",
                                                          "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
                                                          "cpu,cpuacct/cpu.cfs_period_us": "100000\n"})
    assert usable_cpus(**where) == AFFINITY
    assert usable_cpus(cgroup_root=str(tmp_path / "none"), proc_cgroup=str(tmp_path / "none")) == AFFINITY


def test_a_quota_above_the_affinity_does_not_raise_it(tmp_path):
    where = fake(tmp_path, "0::/\n", {"cpu.max": f"{int(AFFINITY) * 4 * 100000} 100000\n"})
    assert usable_cpus(**where) == AFFINITY


def test_pinned_to_keeps_this_process_and_what_it_starts_on_its_first_cpus_until_it_ends():
    import subprocess
    import sys

    from rdmalab.proc.cpus import pinned_to
    mine = os.sched_getaffinity(0)
    with pinned_to(1) as cpus:
        assert cpus == [min(mine)] and os.sched_getaffinity(0) == {min(mine)}
        child = subprocess.run([sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)))"],
                               capture_output=True, text=True, check=True)
        assert child.stdout.strip() == "1"
    assert os.sched_getaffinity(0) == mine
    with pinned_to(len(mine) + 3) as cpus:   # more than it has: all of them
        assert set(cpus) == mine
