"""A class on this machine: lessons 00-03 and 06 for one learner alone, then for four learners at once, through a real
JupyterHub (workshop/jupyterhub_config.py) and real Unix users, as tests/workshop runs them (root).

    sudo .venv/bin/python benchmarks/workshop.py [--learners 4] [--rounds 1] [--out results.json]

Targets (issue 17): with four learners at once every lesson completes in at most 3x one learner's time
(the slowest of the four against the one alone, lesson by lesson), and each learner's lesson 06 still
shows RDMA faster than TCP (its dashboard's last write_lat size against tcp_lat's, t_typical). Each learner's
server gets RDMALAB_CLASS_CPUS of CPU (default 1) and a 256 MiB soft0 room, as the test gives them.
"""
import argparse
import asyncio
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from report import emit

from workshop import classhub

from rdmalab.lessons.series import notebook


def run(hub, users):
    started = time.monotonic()
    results = asyncio.run(classhub.run_lessons(hub, users))
    return results, time.monotonic() - started


def dashboard_latency(result):
    figures = (result or {}).get("figures") or {}
    lat, tcp = figures.get("write_lat", {}), figures.get("tcp_lat", {})
    if "t_typical" not in lat or "t_typical" not in tcp:
        return {"error": figures.get("error", "no figures")}
    return {"size": lat.get("size"), "rdma_write_lat_us": lat["t_typical"], "tcp_lat_us": tcp["t_typical"],
            "tcp_over_rdma": round(tcp["t_typical"] / lat["t_typical"], 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--learners", type=int, default=4)
    parser.add_argument("--cpus", default="1", help="CPUs' worth of time per learner (RDMALAB_CLASS_CPUS)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("benchmarks/workshop.py needs root: it creates Unix users and runs a hub", file=sys.stderr)
        return 2
    started = time.time()
    room = classhub.Class(args.learners, cpus=args.cpus)
    try:
        room.hub.start_servers(room.names)
        alone, alone_s = run(room.hub, room.names[:1])
        together, together_s = run(room.hub, room.names)
        for name in room.names:
            room.hub.stop_server(name)
        leftovers = room.leftovers()
    finally:
        room.close()
    one = {r["lesson"]: r for r in alone[room.names[0]]}
    lessons = {}
    for name in classhub.LESSONS:
        times = [next(r for r in together[u] if r["lesson"] == name) for u in room.names]
        slowest = max(r["seconds"] for r in times)
        lessons[name] = {"one_learner_s": round(one[name]["seconds"], 2),
                         f"{args.learners}_learners_s": [round(r["seconds"], 2) for r in times],
                         "slowest_over_one": round(slowest / one[name]["seconds"], 2),
                         "completed": all(r["status"] == "ok" for r in times) and one[name]["status"] == "ok"}
    with_dashboard = notebook("target-cpu")   # by slug: whatever its number
    l06 = {"alone": dashboard_latency(one[with_dashboard]),
           "together": {u: dashboard_latency(next(r for r in together[u] if r["lesson"] == with_dashboard))
                        for u in room.names}}
    failures = [f"{r['user']} {r['lesson']}: {r.get('error', '')[:300]}" for rs in (*alone.values(), *together.values())
                for r in rs if r["status"] != "ok"]
    for line in failures:
        print(line, file=sys.stderr)
    faster = [v.get("tcp_over_rdma", 0) > 1 for v in l06["together"].values()]
    targets = {
        f"every lesson of 00-03 and 06 completes for {args.learners} learners at once": all(x["completed"] for x in lessons.values()),
        f"each lesson takes at most 3x one learner's time with {args.learners} at once":
            all(x["slowest_over_one"] <= 3 for x in lessons.values()),
        "each learner's lesson 06 shows RDMA WRITE latency below TCP's": bool(faster) and all(faster),
        "nothing left after the servers stop": leftovers == {},
    }
    return emit({"benchmark": "workshop", "learners": args.learners, "cpus_per_learner": float(args.cpus),
                 "usable_cpus": len(os.sched_getaffinity(0)), "seconds": round(time.time() - started, 1),
                 "figures": {"lessons": lessons, "all_lessons_one_learner_s": round(alone_s, 1),
                             f"all_lessons_{args.learners}_learners_s": round(together_s, 1),
                             "lesson_06_latency": l06, "leftovers": leftovers, "failures": failures},
                 "targets": targets}, args.out)


if __name__ == "__main__":
    sys.exit(main())
