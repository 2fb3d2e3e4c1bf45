"""Runs a fleet of localizations on Ray: one task per run, each calling `ndtcu localize`
in its worker process through the Python module (ndtcu.run_command, no subprocess), on
the GPU Ray allots to it (the CUDA backend on that device) or on the CPU backend.

Nothing lost, nothing twice: a run's outputs come back to the driver, which writes them
into DIR/runs/.tmp-NAME-* and renames that folder to DIR/runs/NAME once it is complete;
DIR/runs/NAME/run.json holds the run's key (manifest.run_key), and a later fleet over the
same manifest skips every run whose folder holds its key. A worker that dies (killed,
its node lost) or a CUDA error is retried by Ray up to --max-retries times; any other
error (bad input) is not, and the run is reported failed with the message.

One fleet at a time writes into DIR: it holds a lock on DIR/.ndtcu-fleet.lock (flock) for
its life, and only then clears what a killed fleet left half-written. SIGINT and SIGTERM
end a fleet alike: the runs under way are left, the finished ones kept, the report written.
"""
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid

from . import manifest as manifest_mod
from . import report

# The files `ndtcu localize` writes that a run keeps (the plots are the fleet report's job).
OUTPUTS = ("trajectory_tum.txt", "trajectory_kitti.txt", "frames.csv", "summary.json")

# Test hook (for the fleet's fault tests only; documented in docs/fleet.md): when the
# driver's environment holds NDTCU_FLEET_TEST_FAULT=kill:NAME:N, the worker running run
# NAME kills itself (SIGKILL) in the middle of each of its first N attempts: after the
# localization has started writing, or at its end if it finished first.
FAULT_ENV = "NDTCU_FLEET_TEST_FAULT"


# The lock file in DIR: it holds the pid and host of the fleet writing there, and is
# removed when that fleet ends (a fleet killed leaves it, unlocked: the next one takes it).
LOCK_NAME = ".ndtcu-fleet.lock"


class FleetError(ValueError):
    """A fleet that cannot start: its output folder cannot be written or is another
    fleet's, or the cluster has no node for a run. The message names the folder or option
    and the reason; no run has started."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM while the fleet runs (KeyboardInterrupt, as Python raises for
    SIGINT, so that both end the fleet alike); `signum` is the signal."""

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def parse_fault(text):
    """{'name': NAME, 'attempts': N} of a NDTCU_FLEET_TEST_FAULT value, or None."""
    if not text:
        return None
    parts = text.split(":")
    if len(parts) != 3 or parts[0] != "kill" or not parts[2].isdigit():
        raise ValueError(f"{FAULT_ENV}={text}: expected kill:RUN_NAME:ATTEMPTS")
    return {"name": parts[1], "attempts": int(parts[2])}


class _Captured:
    """File descriptors 1 and 2 redirected into `path` for a scope: what the command
    prints (its progress, warnings and summary) becomes the run's log."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(self.fd, 1)
        os.dup2(self.fd, 2)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in (*self.saved, self.fd):
            os.close(fd)
        return False


def _kill_when_started(out_dir, done):
    # Waits for the command's first output file (the run is under way), then kills the
    # process as a crash would.
    while not done.is_set():
        if os.path.isdir(out_dir) and any(not n.startswith(".ndtcu") for n in os.listdir(out_dir)):
            time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(0.01)


def node_id():
    """The Ray node running this process, or None outside Ray."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # noqa: BLE001
        return None


def gpu_device():
    """(CUDA device index in this process, Ray's GPU id) of the GPU Ray allotted to the
    running task, or (None, None). Ray sets CUDA_VISIBLE_DEVICES to the allotted GPUs, so
    the index is the GPU's place in that list (0 with one GPU per run)."""
    try:
        import ray

        ids = ray.get_gpu_ids() if ray.is_initialized() else []
    except Exception:  # noqa: BLE001 (outside a Ray worker)
        ids = []
    if not ids:
        return None, None
    gpu = str(ids[0])
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible:
        return (visible.index(gpu) if gpu in visible else 0), gpu
    return int(gpu), gpu


def execute(spec, attempt=1, fault=None):
    """One run, in this process: `ndtcu localize` with the spec's arguments into a
    temporary folder, then its files read back. Returns a dict: 'files' (name -> bytes),
    'log', 'device', 'backend', 'host', 'wall_s', 'attempt'; or, for a run that failed on
    its input, 'error' (the message) and 'log'. A CUDA error is raised (Ray retries it)."""
    import ndtcu

    device, gpu = gpu_device()
    args = list(spec["args"])
    if device is not None:
        args += ["--backend", "cuda", "--device", str(device)]
        devices = ndtcu.cuda_devices()
        name = devices[device]["name"] if device < len(devices) else f"CUDA device {device}"
        device_text = f"GPU {gpu}: {name}"
    else:
        args += ["--backend", "cpu"]
        n = spec.get("threads", 0) or os.cpu_count()
        device_text = f"CPU ({n} thread{'' if n == 1 else 's'})"
    if "--threads" not in args and spec.get("threads"):
        args += ["--threads", str(spec["threads"])]
    tmp = tempfile.mkdtemp(prefix="ndtcu-fleet-")
    out = os.path.join(tmp, "out")
    log_path = os.path.join(tmp, "log.txt")
    result = {"attempt": attempt, "host": socket.gethostname(), "node": node_id(), "pid": os.getpid(),
              "device": device_text,
              "backend": "cuda" if device is not None else "cpu", "gpu": gpu}
    armed = bool(fault) and fault["name"] == spec["name"] and attempt <= fault["attempts"]
    done = threading.Event()
    try:
        if armed:
            threading.Thread(target=_kill_when_started, args=(out, done), daemon=True).start()
        t0 = time.perf_counter()
        error = None
        with _Captured(log_path):
            try:
                code = ndtcu.run_command(args + ["--out", out, "--no-plot"])
            except ndtcu.CudaError:
                raise
            except (ndtcu.Error, ValueError, OSError) as e:
                error, code = str(e), 1
        result["wall_s"] = time.perf_counter() - t0
        if armed:
            os.kill(os.getpid(), signal.SIGKILL)  # the run ended before the fault struck
        with open(log_path, "rb") as f:
            result["log"] = f.read().decode("utf-8", "backslashreplace")
        if error is None and code != 0:
            error = f"ndtcu localize exited with {code}" + (" (stopped by a signal)" if code > 128 else "")
        if error is not None:
            result["error"] = error
            result["log"] += f"ndtcu: error: {error}\n"  # as the tool prints it
            return result
        files = {}
        for name in OUTPUTS:
            with open(os.path.join(out, name), "rb") as f:
                files[name] = f.read()
        result["files"] = files
        return result
    finally:
        done.set()
        shutil.rmtree(tmp, ignore_errors=True)


_remote = {}


def _remote_parts():
    """The Ray tasks (for the CPU, and for a GPU: a fresh worker process per run, so that
    CUDA, initialized once per process, sees the GPU Ray allots to that run; Ray takes
    max_calls from the decorator only) and the attempt counter, made once."""
    if _remote:
        return _remote["cpu"], _remote["gpu"], _remote["attempts"]
    import ray

    @ray.remote(num_cpus=0)
    class Attempts:
        """Counts each run's attempts: a task asks for its number as it starts, so a
        retried run knows it is one, and the report says how many it took."""

        def __init__(self):
            self.counts = {}

        def begin(self, name):
            self.counts[name] = self.counts.get(name, 0) + 1
            return self.counts[name]

        def get(self):
            return dict(self.counts)

    def localize_task(spec, attempts, fault):
        attempt = ray.get(attempts.begin.remote(spec["name"]))
        return execute(spec, attempt, fault)

    _remote["cpu"] = ray.remote(localize_task)
    _remote["gpu"] = ray.remote(max_calls=1)(localize_task)
    _remote["attempts"] = Attempts
    return _remote["cpu"], _remote["gpu"], Attempts


def _write_whole(final, files, texts):
    """Writes the files into a temporary sibling of `final` and renames it into place (a
    folder named `final` is always complete; an earlier one is replaced whole)."""
    parent = os.path.dirname(final)
    tmp = os.path.join(parent, f".tmp-{os.path.basename(final)}-{uuid.uuid4().hex[:8]}")
    os.makedirs(tmp)
    for name, data in files.items():
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    for name, text in texts.items():  # run.json last: it marks the folder complete
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    old = None
    if os.path.exists(final):
        old = os.path.join(parent, f".old-{os.path.basename(final)}-{uuid.uuid4().hex[:8]}")
        os.rename(final, old)
    os.rename(tmp, final)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def _present(out, run):
    """run.json of a complete earlier run with the same key, or None."""
    try:
        with open(os.path.join(out, "runs", run.name, "run.json"), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    if info.get("key") != run.key or info.get("status") != "done":
        return None
    if not all(os.path.isfile(os.path.join(out, "runs", run.name, n)) for n in OUTPUTS):
        return None
    return info


def _failure_reason(exc):
    """A one-paragraph reason from what ray.get raised after the last attempt."""
    import ray.exceptions as rx

    if isinstance(exc, rx.RayTaskError):
        cause = getattr(exc, "cause", None)
        if cause is not None:
            return f"{type(cause).__name__}: {' '.join(str(cause).split())}"
    text = " ".join(str(exc).split())
    if isinstance(exc, (rx.WorkerCrashedError, rx.NodeDiedError)) or "worker died" in text.lower():
        return f"the worker died on every attempt ({type(exc).__name__}: {text[:300]})"
    return f"{type(exc).__name__}: {text[:500]}"


class OutFolder:
    """The fleet's output folder, made if need be and locked for the fleet's life (a second
    fleet into it is a FleetError naming the holder), then cleared of what a killed fleet
    left half-written. A context manager: the lock file is removed at the end."""

    def __init__(self, out):
        self.out = os.fspath(out)
        self.path = os.path.join(self.out, LOCK_NAME)
        self.fd = None

    def _fail(self, path, what, e):
        return FleetError(f"{path}: {what}: {e.strerror or e}")

    def __enter__(self):
        out = self.out
        if os.path.exists(out) and not os.path.isdir(out):
            raise FleetError(f"{out}: not a folder (--out names the folder the fleet writes its runs and report into)")
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as e:
            raise self._fail(out, "cannot make the output folder", e) from None
        self._lock()
        try:
            runs_dir = os.path.join(out, "runs")
            try:
                os.makedirs(runs_dir, exist_ok=True)
                # Written as each run's folder will be (as root, a folder's mode alone says
                # nothing of it: a read-only file system refuses root too).
                probe = os.path.join(runs_dir, f".tmp-probe-{uuid.uuid4().hex[:8]}")
                os.mkdir(probe)
                os.rmdir(probe)
            except OSError as e:
                raise self._fail(runs_dir, "cannot write the fleet's runs there", e) from None
            for n in os.listdir(runs_dir):  # what a killed fleet left half-written
                if n.startswith((".tmp-", ".old-")):
                    shutil.rmtree(os.path.join(runs_dir, n), ignore_errors=True)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _lock(self):
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as e:
                raise self._fail(self.out, "cannot write the output folder", e) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                try:
                    holder = os.read(fd, 200).decode("utf-8", "replace").split()
                except OSError:
                    holder = []
                os.close(fd)
                who = "pid " + " on ".join(holder[:2]) if holder else "pid unknown"
                raise FleetError(f"{self.out}: another fleet ({who}) is writing into this folder: wait for it to end, "
                                 f"or give another --out") from None
            # The file locked must be the one at the path: a fleet that ends removes it,
            # and one that opened it just before holds a lock on a file no longer there.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except OSError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        self.fd = fd

    def __exit__(self, *exc):
        if self.fd is not None:
            try:
                os.unlink(self.path)  # before the lock goes: see _lock
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None
        return False


class Signals:
    """SIGINT and SIGTERM while the fleet runs: `arm()` makes each raise Interrupted (Ray's
    init sets its own SIGTERM handler, which exits: arm again after it), `hold()` ignores
    them while the fleet winds up (Ray's shutdown, the report), so that a second signal does
    not cut the report short. The handlers found are restored at the end. Only the main
    thread can set handlers: elsewhere this does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.active = threading.current_thread() is threading.main_thread()
        self.saved = {}
        # The last signal caught: Interrupted raised inside Ray's calls can come back out of
        # them as a plain KeyboardInterrupt, without its signum.
        self.caught = None

    def __enter__(self):
        if self.active:
            self.saved = {s: signal.getsignal(s) for s in self.SIGNALS}
            self.arm()
        return self

    def _set(self, handler):
        if self.active:
            for s in self.SIGNALS:
                signal.signal(s, handler)

    def arm(self):
        def interrupt(signum, frame):
            self.caught = signum
            raise Interrupted(signum)

        self._set(interrupt)

    def hold(self):
        self._set(signal.SIG_IGN)

    @contextlib.contextmanager
    def deferred(self):
        """A run's record and its folder are written whole: a signal that comes meanwhile is
        noted, and raised as Interrupted once both are written (a run whose folder is in
        place is then counted as done, never as not run)."""
        if not self.active:
            yield
            return
        pending = []

        def note(signum, frame):
            self.caught = signum
            pending.append(signum)

        self._set(note)
        try:
            yield
        finally:
            self.arm()
        if pending:
            raise Interrupted(pending[0])

    def __exit__(self, *exc):
        for s, handler in self.saved.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
        return False


def placement_problem(nodes, cpus_per_run, gpus_per_run):
    """Why no run of the fleet could start on a cluster of `nodes` (the Resources of each
    live node: {'CPU': n, 'GPU': n}), or None: a run's CPUs and GPUs must be on one node.
    Ray would keep such a run waiting for a node that never comes."""
    cpus = [n.get("CPU", 0) for n in nodes]
    gpus = [n.get("GPU", 0) for n in nodes]
    where = f"{len(nodes)} node{'' if len(nodes) == 1 else 's'}, {sum(cpus):g} CPUs and {sum(gpus):g} GPUs in all"
    if not any(c >= cpus_per_run for c in cpus):
        return (f"--cpus-per-run {cpus_per_run:g}: no node of the cluster has {cpus_per_run:g} CPUs (the most on one "
                f"node is {max(cpus, default=0):g}; {where}): no run could start")
    if gpus_per_run > 0 and any(gpus):  # without any GPU every run takes the CPU backend
        if not any(g >= gpus_per_run for g in gpus):
            return (f"--gpus-per-run {gpus_per_run:g}: no node of the cluster has {gpus_per_run:g} GPUs (the most on "
                    f"one node is {max(gpus):g}; {where}): no run could start")
        if not any(c >= cpus_per_run and g >= gpus_per_run for c, g in zip(cpus, gpus)):
            return (f"--cpus-per-run {cpus_per_run:g} with --gpus-per-run {gpus_per_run:g}: no node of the cluster "
                    f"has both ({where}): no run could start")
    return None


class Progress:
    """The fleet's progress on stderr: runs done, frames per second over the fleet, ETA;
    redrawn in place on a terminal, a line per finished run otherwise."""

    def __init__(self, total, present, enabled=True):
        self.total, self.present = total, present
        self.done = self.failed = self.frames = 0
        self.start = time.monotonic()
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()

    def line(self):
        s = max(time.monotonic() - self.start, 1e-9)
        finished = self.present + self.done + self.failed
        ran = self.done + self.failed
        left = self.total - finished
        eta = f"{s / ran * left:.0f} s" if ran else "-"
        width = 24
        filled = int(width * finished / self.total) if self.total else width
        return (f"fleet [{'#' * filled}{'.' * (width - filled)}] {finished}/{self.total} runs "
                f"({self.present} present, {self.failed} failed)  {self.frames / s:.1f} frames/s  ETA {eta}")

    def update(self, message=None):
        if not self.enabled:
            return
        if self.tty:
            if message:
                sys.stderr.write("\r\033[K" + message + "\n")
            sys.stderr.write("\r\033[K" + self.line())
        else:
            if message:
                sys.stderr.write(message + "\n")
            sys.stderr.write(self.line() + "\n")
        sys.stderr.flush()

    def finish(self):
        if self.enabled and self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def run_fleet(manifest_path, out, address=None, gpus_per_run=1.0, cpus_per_run=1, max_retries=3,
              num_cpus=None, num_gpus=None, progress=True):
    """Runs the manifest's fleet into `out`; returns the exit code (0: every run present
    or done, 1: some run failed, 130 or 143: interrupted by SIGINT or SIGTERM, 128 + the
    signal). Raises ManifestError or FleetError before any run starts for a manifest or an
    output folder or cluster the fleet cannot run with."""
    started = time.time()
    m = manifest_mod.load(manifest_path)
    fault = parse_fault(os.environ.get(FAULT_ENV, ""))
    if cpus_per_run <= 0 or gpus_per_run < 0 or max_retries < 0:
        raise ValueError("--cpus-per-run must be > 0, --gpus-per-run and --max-retries >= 0")
    with OutFolder(out), Signals() as signals:
        return _run(m, out, signals, started, fault, address, gpus_per_run, cpus_per_run, max_retries, num_cpus,
                    num_gpus, progress)


def _run(m, out, signals, started, fault, address, gpus_per_run, cpus_per_run, max_retries, num_cpus, num_gpus,
         progress):
    import ndtcu

    records = {}
    bar = Progress(len(m.runs), 0, progress)
    cluster = {}
    interrupted = None  # the signal that stopped the fleet
    init_ray = False
    try:
        for run in m.runs:
            info = _present(out, run)
            if info is not None:
                records[run.name] = dict(info, status="present")
        bar.present = len(records)
        todo = [r for r in m.runs if r.name not in records]
        if todo:
            import ray

            if not ray.is_initialized():
                kwargs = {"include_dashboard": False, "log_to_driver": False, "configure_logging": True,
                          "logging_level": "WARNING"}
                if address:
                    kwargs["address"] = address
                else:
                    if num_cpus is not None:
                        kwargs["num_cpus"] = num_cpus
                    if num_gpus is not None:
                        kwargs["num_gpus"] = num_gpus
                init_ray = True
                try:
                    ray.init(**kwargs)
                except SystemExit as e:
                    # The SIGTERM handler ray.init sets while it starts the cluster exits with
                    # the signal's number: ended as any SIGTERM.
                    if e.code == signal.SIGTERM:
                        raise Interrupted(signal.SIGTERM) from None
                    raise
                signals.arm()  # in place of ray.init's SIGTERM handler
            resources = ray.cluster_resources()
            gpus = resources.get("GPU", 0)
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            cluster = {"nodes": len(nodes), "cpus": resources.get("CPU", 0), "gpus": gpus,
                       "address": address or "local"}
            problem = placement_problem([n.get("Resources", {}) for n in nodes], cpus_per_run, gpus_per_run)
            if problem:
                raise FleetError(problem)
            per_gpu = gpus_per_run if gpus > 0 else 0
            if gpus_per_run > 0 and gpus == 0 and progress:
                sys.stderr.write("fleet: no GPU in the cluster: every run on the CPU backend\n")
            cpu_task, gpu_task, Attempts = _remote_parts()
            task = gpu_task if per_gpu else cpu_task
            attempts = Attempts.remote()
            import ray.exceptions

            options = {"num_cpus": cpus_per_run, "num_gpus": per_gpu, "max_retries": max_retries,
                       "retry_exceptions": [ndtcu.CudaError]}
            refs = {}
            for run in todo:
                spec = {"name": run.name, "args": run.args, "threads": max(1, int(cpus_per_run))}
                refs[task.options(**options).remote(spec, attempts, fault)] = run
            pending = list(refs)
            bar.update()
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                for ref in ready:
                    run = refs[ref]
                    with signals.deferred():
                        records[run.name] = _finish(out, run, ref, attempts, bar)
                if not ready and bar.tty:
                    bar.update()  # the ETA and the rate move while runs are under way
    except KeyboardInterrupt as e:
        # SIGINT or SIGTERM (Interrupted; a KeyboardInterrupt raised elsewhere is a SIGINT).
        # The runs under way are not cancelled: a task whose owner disconnects is ended by
        # Ray itself, and a forced cancel racing a task's reply can abort this driver in
        # Ray's task manager before the report is written. Nothing a task does reaches DIR:
        # its files come back to this driver, which writes them.
        signals.hold()
        interrupted = getattr(e, "signum", None) or signals.caught or signal.SIGINT
        bar.finish()
        left = len(m.runs) - len(records)
        sys.stderr.write(f"fleet: interrupted ({signal.Signals(interrupted).name}); {left} run(s) not finished. "
                         f"Run the same command again to finish them (finished runs are kept).\n")
    finally:
        signals.hold()
        if init_ray:
            import ray

            ray.shutdown()
    bar.finish()
    doc = report.write(out, m, records, cluster, started, time.time(), interrupted is not None,
                       {"gpus_per_run": gpus_per_run, "cpus_per_run": cpus_per_run, "max_retries": max_retries})
    failed = [r for r in doc["runs"] if r["status"] == "failed"]
    if progress:
        c = doc["counts"]
        sys.stderr.write(f"fleet: {c['done']} done, {c['present']} present, {c['failed']} failed, "
                         f"{c['not_run']} not run of {c['runs']}"
                         + (f"; {c['accepted_wrong']} frame(s) accepted as valid but wrong" if c["accepted_wrong"] else "")
                         + f"; report {os.path.join(out, 'report.html')}\n")
        for r in failed:
            sys.stderr.write(f"fleet: {r['name']} failed after {r['attempts']} attempt(s): {r['reason']}\n")
    return 128 + interrupted if interrupted is not None else 1 if failed else 0


def _finish(out, run, ref, attempts, bar):
    """The record of a run whose task ended, with its outputs written in place."""
    import ray

    final = os.path.join(out, "runs", run.name)
    count = None
    try:
        result = ray.get(ref)
    except (ray.exceptions.RayError, Exception) as e:  # noqa: BLE001 (the reason is recorded)
        count = ray.get(attempts.get.remote()).get(run.name, 0)
        reason = _failure_reason(e)
        rec = {"name": run.name, "status": "failed", "reason": reason, "attempts": count, "key": run.key}
        bar.failed += 1
        bar.update(f"fleet: {run.name} failed: {reason}")
        return rec
    count = ray.get(attempts.get.remote()).get(run.name, result.get("attempt", 1))
    rec = {"name": run.name, "key": run.key, "attempts": count, "device": result["device"],
           "backend": result["backend"], "host": result["host"], "node": result["node"], "wall_s": result["wall_s"],
           "args": run.args, "params": run.params, "base": run.base, "entry": run.entry}
    if "error" in result:
        rec.update(status="failed", reason=result["error"])
        os.makedirs(os.path.join(out, "failed"), exist_ok=True)
        with open(os.path.join(out, "failed", run.name + ".log"), "w", encoding="utf-8") as f:
            f.write(result.get("log", ""))
        bar.failed += 1
        bar.update(f"fleet: {run.name} failed: {result['error']}")
        return rec
    rec["status"] = "done"
    rec["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    _write_whole(final, result["files"],
                 {"log.txt": result.get("log", ""), "run.json": json.dumps(rec, indent=1) + "\n"})
    try:
        bar.frames += json.loads(result["files"]["summary.json"]).get("frames", 0)
    except ValueError:
        pass
    bar.done += 1
    bar.update()
    return rec
