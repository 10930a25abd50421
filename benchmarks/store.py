"""Benchmark: shipping to a store, listing it, and paging a large shipped session.

Three checks, each against a baseline measured in the same run:

* **ship**: 4 processes ship 1,000 sessions at once (``Shipper.ship_once``
  in each, 250 sessions apiece) against 4 processes that copy the same files
  plainly into a folder (``shutil.copyfile``). Then 10% of the sessions grow
  by one turn and a second pass runs: bytes uploaded against bytes added.
* **list**: ``Workspace(URL).list()`` over 10,000 shipped sessions, on a new
  Workspace (cold: every manifest is read) and again on the same one (warm:
  one listing), against ``Workspace(folder).list()`` on the local files.
* **messages**: ``Workspace(URL).messages(id, last=50)`` on a large shipped
  session (256 MiB by default; ``--size-mib 1024`` for 1 GiB) against the same
  call on the local file, interleaved: bytes fetched from the store per page
  against the bytes the page spans (target at most 2x), and time.
* **mirror**: the copy ``loopscribe serve URL`` keeps, of a store of 100,000
  shipped sessions (``--mirror-sessions``): the first sync (time, CPU, peak
  memory of the process) against a plain copy of the same segment files, a
  restart over the same copy, and ``loopscribe ls`` of that store with one
  200 MB manifest in it (peak memory).

* **side by side** (``--baseline REV``): ``ship`` now against the code of
  an earlier commit (extracted with ``git archive``), each pass in its own
  process, passes taking turns, each into a fresh store: 250 small sessions
  (one segment each), and 40 larger ones shipped in 16 KiB segments with
  an artifact each. Prints wall time, fsyncs and renames (manifests, artifacts) per pass.
  A pass now writes one manifest per session, after every object it names.

The store is a local folder by default; ``--s3`` uses an S3 API server
(moto) on 127.0.0.1 instead, which adds HTTP but no real network.

Run: ``.venv/bin/python benchmarks/store.py [--s3] [--sessions N] [--size-mib N] [--reps N]
[--mirror-sessions N] [--only ship,list,messages,mirror] [--baseline REV]``
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

if not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._workload import build_events, median, scratch_dir
from benchmarks.workspace import PAGE, _scan_last, generate
from loopscribe import Session, Workspace
from loopscribe.store import Shipper, Store, StoreWorkspace

PROCESSES = 4
SHIP_SESSIONS = 1_000
TARGET_FETCH_RATIO = 2.0

SHIP_CHILD = """
import sys, orjson
from loopscribe.store import Shipper
result = Shipper(sys.argv[1], sys.argv[2], workers=8).ship_once()
sys.stdout.buffer.write(orjson.dumps(result.to_json()))
"""
MIRROR_CHILD = """
import sys, time, orjson
from loopscribe.store._mirror import Mirror
PEAK
start, cpu = time.perf_counter(), time.process_time()
mirror = Mirror(sys.argv[1], sys.argv[2])
synced = mirror.sync()
out = {"synced": synced, "wall_s": time.perf_counter() - start,
       "cpu_s": time.process_time() - cpu, "problems": len(mirror.problems)}
start = time.perf_counter()
out["restart_synced"] = Mirror(sys.argv[1], sys.argv[2]).sync()
out["restart_s"] = time.perf_counter() - start
out["max_rss_mib"] = peak_mib()
sys.stdout.buffer.write(orjson.dumps(out))
"""
LS_CHILD = """
import sys, time, orjson
from loopscribe.cli import main
PEAK
start = time.perf_counter()
status = main(["--json", "ls", sys.argv[1]])
took = time.perf_counter() - start
rss = peak_mib()
sys.stderr.write(orjson.dumps({"status": status, "s": took, "max_rss_mib": rss}).decode())
"""
_PEAK = """
def peak_mib():
    # VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would
    # report the benchmark's own peak.
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0
"""
MIRROR_CHILD = MIRROR_CHILD.replace("PEAK", _PEAK)
LS_CHILD = LS_CHILD.replace("PEAK", _PEAK)
COPY_CHILD = """
import shutil, sys
from pathlib import Path
out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
for p in sorted(Path(sys.argv[1]).glob("*.jsonl")):
    shutil.copyfile(p, out / p.name)
"""


@contextlib.contextmanager
def s3_store() -> Iterator[tuple[str, dict[str, str]]]:
    """A bucket on moto's S3 server on 127.0.0.1, and the environment that reaches it."""
    import fsspec.config
    import s3fs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    env = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "FSSPEC_S3_ENDPOINT_URL": endpoint,
    }
    os.environ.update(env)
    fsspec.config.conf["s3"] = {"endpoint_url": endpoint}
    bucket = f"bench-{secrets.token_hex(4)}"
    s3fs.S3FileSystem(endpoint_url=endpoint).mkdir(bucket)
    try:
        yield f"s3://{bucket}/agents", env
    finally:
        server.stop()


def make_sessions(root: Path, count: int, start: int = 0) -> list[Path]:
    """``count`` small sessions (one recorded template, copied under new IDs) in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    template_dir = root.parent / "template"
    ws = Workspace(template_dir)
    with ws.create(title="template", model="model-x") as session, session.begin_run() as run:
        for event in build_events(2, seed=1):
            run.record(event)
        tid = session.id
    template = ws.path(tid).read_bytes()
    paths = []
    for n in range(start, start + count):
        sid = f"{n:032x}"
        path = root / f"{sid}.jsonl"
        path.write_bytes(template.replace(tid.encode(), sid.encode()))
        paths.append(path)
    shutil.rmtree(template_dir)
    return paths


def split(paths: list[Path], parent: Path) -> list[Path]:
    """Move ``paths`` into PROCESSES folders under ``parent``, one per shipping process."""
    folders = [parent / f"p{i}" for i in range(PROCESSES)]
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    for i, path in enumerate(paths):
        path.rename(folders[i % PROCESSES] / path.name)
    return folders


def run_parallel(code: str, pairs: list[tuple[str, str]]) -> tuple[float, list[dict[str, int]]]:
    """Run ``code`` in one process per (arg1, arg2) pair at once; wall time and JSON outputs."""
    start = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-c", code, a, b], stdout=subprocess.PIPE)
        for a, b in pairs
    ]
    outs = [p.communicate()[0] for p in procs]
    took = time.perf_counter() - start
    if any(p.returncode for p in procs):
        raise SystemExit("a child process failed")
    return took, [orjson.loads(o) for o in outs if o.strip()]


def bench_ship(root: Path, url: str) -> None:
    """4 processes ship 1,000 sessions; then a pass after 10% of them grew."""
    folders = split(make_sessions(root / "src", SHIP_SESSIONS), root / "src")
    total = sum(p.stat().st_size for f in folders for p in f.glob("*.jsonl"))
    copy_s, _ = run_parallel(COPY_CHILD, [(str(f), str(root / "copy" / f.name)) for f in folders])
    ship_s, results = run_parallel(SHIP_CHILD, [(str(f), url) for f in folders])
    shipped = sum(r["shipped"] for r in results)
    uploaded = sum(r["bytes_uploaded"] for r in results)
    print(
        f"ship: {shipped} sessions ({total / 2**20:.1f} MiB) by {PROCESSES} processes in "
        f"{ship_s:.2f} s ({shipped / ship_s:.0f} sessions/s); plain copy by {PROCESSES} "
        f"processes {copy_s:.2f} s; ratio {ship_s / copy_s:.1f}x; uploaded "
        f"{uploaded / total:.2f}x the bytes (segments + manifests)"
    )
    grown = [p for f in folders for p in sorted(f.glob("*.jsonl"))][::10]
    before = sum(p.stat().st_size for p in grown)
    for path in grown:
        with Session.open(path) as session, session.begin_run() as run:
            for event in build_events(1, seed=2):
                run.record(event)
    added = sum(p.stat().st_size for p in grown) - before
    again_s, results = run_parallel(SHIP_CHILD, [(str(f), url) for f in folders])
    uploaded = sum(r["bytes_uploaded"] for r in results)
    print(
        f"  second pass: {len(grown)} sessions grew by {added / 2**10:.0f} KiB; uploaded "
        f"{uploaded / 2**10:.0f} KiB ({uploaded / added:.2f}x the bytes added) in {again_s:.2f} s"
    )


def bench_list(root: Path, url: str, sessions: int, reps: int) -> None:
    """list() of ``sessions`` shipped sessions: cold and warm, against the local folder."""
    have = SHIP_SESSIONS
    extra = max(0, sessions - have)
    if extra:
        folders = split(make_sessions(root / "more", extra, start=have), root / "more")
        took, _ = run_parallel(SHIP_CHILD, [(str(f), url) for f in folders])
        print(f"list: shipped {extra} more sessions in {took:.1f} s ({extra / took:.0f}/s)")
    local_dirs = [root / "src" / f"p{i}" for i in range(PROCESSES)]
    local_dirs += [root / "more" / f"p{i}" for i in range(PROCESSES) if extra]
    flat = root / "flat"
    flat.mkdir()
    for folder in local_dirs:
        for path in folder.glob("*.jsonl"):
            os.link(path, flat / path.name)
    cold, warm, local = [], [], []
    count = 0
    for _ in range(reps):
        store = Workspace(url)
        start = time.perf_counter()
        count = len(store.list(include_children=True))
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        store.list(include_children=True)
        warm.append(time.perf_counter() - start)
        start = time.perf_counter()
        Workspace(flat).list(include_children=True)
        local.append(time.perf_counter() - start)
    c, w, lo = median(cold), median(warm), median(local)
    print(
        f"  list() of {count} shipped sessions: cold {c:.2f} s, warm {w:.2f} s; local "
        f"folder cold {lo:.2f} s; store/local {c / lo:.1f}x cold, {w / lo:.2f}x warm"
    )


def bench_messages(root: Path, url: str, size_mib: int, reps: int) -> bool:
    """messages(last=50) on a large shipped session: bytes fetched and time vs local."""
    ws = Workspace(root / "large")
    start = time.perf_counter()
    sid = generate(ws, size_mib << 20)
    path = ws.path(sid)
    size = path.stat().st_size
    print(
        f"messages: {size / 2**20:.0f} MiB session written in {time.perf_counter() - start:.1f} s"
    )
    start = time.perf_counter()
    result = Shipper(ws.root, url).ship_once()
    took = time.perf_counter() - start
    print(
        f"  shipped in {result.segments} segments, {took:.1f} s "
        f"({result.bytes_uploaded / took / 2**20:.0f} MiB/s)"
    )
    window, count = _scan_last(path)
    span = size - window[0][0] if count > PAGE else size
    local_s, store_s, fetched, requests = [], [], [], []
    for _ in range(reps):  # interleaved: the machine's load hits both alike
        t0 = time.perf_counter()
        local_page = Workspace(ws.root).messages(sid, last=PAGE)
        local_s.append(time.perf_counter() - t0)
        store = Workspace(url)
        assert isinstance(store, StoreWorkspace)
        t0 = time.perf_counter()
        page = store.messages(sid, last=PAGE)
        store_s.append(time.perf_counter() - t0)
        view = store.view(sid)
        fetched.append(view.fetched_bytes)
        requests.append(view.requests)
        if page.messages != local_page.messages:
            print("  ERROR: the store's page differs from the local file's")
            return False
    ratio = median([float(f) for f in fetched]) / span
    print(
        f"  messages(last={PAGE}): the page spans {span / 2**10:.0f} KiB of {size / 2**20:.0f} "
        f"MiB; fetched {median([float(f) for f in fetched]) / 2**10:.0f} KiB in "
        f"{median([float(r) for r in requests]):.0f} requests = {ratio:.2f}x the page "
        f"(target <= {TARGET_FETCH_RATIO:.0f}x)"
    )
    ls, ss = median(local_s), median(store_s)
    print(
        f"  time: store {ss * 1000:.1f} ms, local file {ls * 1000:.1f} ms "
        f"({ss / ls:.1f}x), median of {reps} interleaved"
    )
    return ratio <= TARGET_FETCH_RATIO


def clone_store(root: Path, url: str, count: int) -> str:
    """A store of ``count`` shipped sessions: one session shipped, its objects copied under new IDs.

    Returns:
        The ID of the session that was shipped (the others are ``f"{n:032x}"``).
    """
    ws = Workspace(root / "one")
    with ws.create(title="template", model="model-x") as session, session.begin_run() as run:
        for event in build_events(2, seed=1):
            run.record(event)
        tid = session.id
    Shipper(ws.root, url).ship_once()
    store = Store(url)
    manifest = store.backend.read(f"sessions/{tid}.json")
    [segment] = store.backend.listdir(f"sessions/{tid}")
    data = store.backend.read(f"sessions/{tid}/{segment.name}")
    batch: dict[str, bytes] = {}
    for n in range(count):
        sid = f"{n:032x}".encode()
        batch[f"sessions/{sid.decode()}.json"] = manifest.replace(tid.encode(), sid)
        batch[f"sessions/{sid.decode()}/{segment.name}"] = data.replace(tid.encode(), sid)
        if len(batch) >= 2000 or n == count - 1:
            if url.startswith("file:"):
                for key, value in batch.items():
                    path = Path(store.root) / key
                    path.parent.mkdir(exist_ok=True)
                    path.write_bytes(value)
            else:
                store.fs.pipe({store.backend.path(k): v for k, v in batch.items()})
            batch = {}
    return tid


def bench_mirror(root: Path, url: str, sessions: int) -> None:
    """The viewer's copy of a store of ``sessions`` sessions: first sync, restart, ls memory."""
    url = f"{url}-mirror"
    start = time.perf_counter()
    tid = clone_store(root / "mirror", url, sessions)
    print(f"mirror: a store of {sessions + 1} sessions made in {time.perf_counter() - start:.0f} s")
    cache = root / "mirror" / "cache"
    _took, [out] = run_parallel(MIRROR_CHILD, [(url, str(cache))])
    segment = next(p for p in (cache.glob("*.jsonl")))
    plain = root / "mirror" / "plain"
    plain.mkdir()
    start = time.perf_counter()
    for n in range(sessions):
        shutil.copyfile(segment, plain / f"{n:032x}.jsonl")
    copy_s = time.perf_counter() - start
    print(
        f"  first sync: {out['synced']} sessions in {out['wall_s']:.1f} s ({out['cpu_s']:.1f} s "
        f"CPU), peak {out['max_rss_mib']:.0f} MiB for the process; a plain copy of as many "
        f"files {copy_s:.1f} s ({out['wall_s'] / copy_s:.1f}x); problems {out['problems']}"
    )
    print(
        f"  restart over the same copy: {out['restart_synced']} sessions fetched in "
        f"{out['restart_s']:.1f} s (one listing, no manifest read)"
    )
    proc = subprocess.run([sys.executable, "-c", LS_CHILD, url], capture_output=True, check=False)
    ls = orjson.loads(proc.stderr.splitlines()[-1])
    print(
        f"  ls of the {sessions + 1} sessions: exit {ls['status']}, {ls['s']:.1f} s, peak "
        f"{ls['max_rss_mib']:.0f} MiB for the process"
    )
    small = f"{url}-small"
    tid = clone_store(root / "small", small, 9)
    store = Store(small)
    huge = f"sessions/{tid}.json"
    if small.startswith("file:"):
        with open(Path(store.root) / huge, "r+b") as f:
            f.truncate(200 << 20)  # sparse
    else:
        store.backend.put(huge, b" " * (200 << 20))
    base = subprocess.run(
        [sys.executable, "-c", LS_CHILD, f"{url}-small"], capture_output=True, check=False
    )
    ls = orjson.loads(base.stderr.splitlines()[-1])
    print(
        f"  ls of 10 sessions, one of them a 200 MB manifest: exit {ls['status']} (one line "
        f"names it), {ls['s']:.1f} s, peak {ls['max_rss_mib']:.0f} MiB for the process"
    )


SIDE_CHILD = """
import json, os, sys, time
spec = json.loads(sys.argv[1])
counts = {"fsync": 0, "replace": 0}
real_fsync, real_replace = os.fsync, os.replace
def fsync(fd):
    counts["fsync"] += 1
    real_fsync(fd)
def replace(*args, **kwargs):
    counts["replace"] += 1  # a folder store replaces only manifests (segments are linked)
    real_replace(*args, **kwargs)
os.fsync, os.replace = fsync, replace
from loopscribe.store import Shipper
shipper = Shipper(spec["src"], spec["url"], workers=8, segment_bytes=spec["segment_bytes"])
start = time.perf_counter_ns()
result = shipper.ship_once()
took = time.perf_counter_ns() - start
assert not result.errors, result.errors
print(took, counts["fsync"], counts["replace"], result.segments)
"""


def bench_side_by_side(root: Path, url: str, reps: int, rev: str) -> None:
    """``ship`` now against ``rev``'s, in turns, on two workloads, each pass to a fresh store."""
    from benchmarks.importers import _baseline_src

    srcs = {"baseline": _baseline_src(rev, root / "baseline"), "now": ROOT / "src"}
    small = root / "side-small"
    make_sessions(small, 250)
    large = root / "side-large"
    make_large(large, 40)
    workloads = [
        ("250 small sessions", small, 64 << 20),
        ("40 sessions, 16 KiB segments", large, 16 << 10),
    ]
    print(
        f"side by side with {rev}: best of {reps} interleaved passes; load average "
        f"{os.getloadavg()[0]:.2f} before"
    )
    for label, src, segment_bytes in workloads:
        runs: dict[str, list[list[int]]] = {name: [] for name in srcs}
        for rep in range(reps):
            for name, code in srcs.items():
                target = f"{url}/side-{name}-{segment_bytes}-{rep}"
                spec = {"src": str(src), "url": target, "segment_bytes": segment_bytes}
                done = subprocess.run(
                    [sys.executable, "-c", SIDE_CHILD, orjson.dumps(spec).decode()],
                    check=True,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONPATH": str(code)},
                )
                runs[name].append([int(x) for x in done.stdout.split()[-4:]])
        best = {name: min(r[0] for r in rs) for name, rs in runs.items()}
        parts = []
        for name, rs in runs.items():
            _, syncs, manifests, segments = rs[0]
            parts.append(
                f"{name} {best[name] / 1e6:.0f} ms, {syncs} fsyncs, {manifests} renames "
                f"(manifests, artifacts), {segments} segments"
            )
        print(f"  {label}: " + "; ".join(parts))
        print(
            f"    now / baseline (wall): {best['now'] / best['baseline']:.3f}x; load average "
            f"{os.getloadavg()[0]:.2f}"
        )


def make_large(root: Path, count: int) -> None:
    """``count`` sessions of about 120 KiB, each with one artifact beside it."""
    for path in make_sessions(root, count):
        with Session.open(path) as session, session.begin_run() as run:
            for event in build_events(6, seed=3):
                run.record(event)
        folder = path.with_name(path.stem + ".artifacts")
        folder.mkdir()
        (folder / "notes.txt").write_bytes(b"notes\n" * 100)


ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--s3", action="store_true", help="ship to moto's S3 server on 127.0.0.1")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions to list")
    parser.add_argument("--size-mib", type=int, default=256, help="size of the large session")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--mirror-sessions", type=int, default=100_000, help="sessions in the mirror's store"
    )
    parser.add_argument("--only", default="ship,list,messages,mirror", help="checks to run")
    parser.add_argument("--baseline", help="commit to compare ship with, side by side")
    args = parser.parse_args()
    only = set(args.only.split(","))
    with contextlib.ExitStack() as stack:
        root = stack.enter_context(scratch_dir())
        if args.s3:
            url, _env = stack.enter_context(s3_store())
            print(f"store: moto S3 server on 127.0.0.1 ({url})")
        else:
            url = (root / "store").as_uri()
            print(f"store: local folder ({url})")
        print(f"machine: {os.cpu_count()} cores, shared and loaded; figures are noisy")
        ok = True
        if args.baseline:
            bench_side_by_side(root, url, args.reps, args.baseline)
        if "ship" in only or "list" in only:
            bench_ship(root, url)
        if "list" in only:
            bench_list(root, url, args.sessions, args.reps)
        if "messages" in only:
            ok = bench_messages(root, url, args.size_mib, args.reps)
        if "mirror" in only:
            bench_mirror(root, url, args.mirror_sessions)
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
