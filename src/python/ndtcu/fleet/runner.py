"""Runs a fleet of localizations on Ray: one task per run, each calling `ndtcu localize`
in its worker process through the Python module (ndtcu.run_command, no subprocess), on
the GPU Ray allots to it (the CUDA backend on that device) or on the CPU backend.

Nothing lost, nothing twice: a run's outputs come back to the driver, which writes them
into DIR/runs/.tmp-NAME-* and renames that folder to DIR/runs/NAME once it is complete;
DIR/runs/NAME/run.json holds the run's key (manifest.run_key), and a later fleet over the
same manifest skips every run whose folder holds its key. A worker that dies (killed,
its node lost) or a CUDA error is retried by Ray up to --max-retries times; any other
error (bad input) is not, and the run is reported failed with the message.
"""
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
    or done, 1: some run failed, 130: interrupted). Raises ManifestError before anything
    starts for a manifest that cannot run."""
    import ndtcu

    started = time.time()
    m = manifest_mod.load(manifest_path)
    fault = parse_fault(os.environ.get(FAULT_ENV, ""))
    if cpus_per_run <= 0 or gpus_per_run < 0 or max_retries < 0:
        raise ValueError("--cpus-per-run must be > 0, --gpus-per-run and --max-retries >= 0")
    runs_dir = os.path.join(out, "runs")
    os.makedirs(runs_dir, exist_ok=True)
    for n in os.listdir(runs_dir):  # what a killed driver left half-written
        if n.startswith((".tmp-", ".old-")):
            shutil.rmtree(os.path.join(runs_dir, n), ignore_errors=True)

    records = {}
    for run in m.runs:
        info = _present(out, run)
        if info is not None:
            records[run.name] = dict(info, status="present")
    todo = [r for r in m.runs if r.name not in records]
    bar = Progress(len(m.runs), len(records), progress)
    cluster = {}
    interrupted = False
    if todo:
        import ray

        init_ray = not ray.is_initialized()
        if init_ray:
            kwargs = {"include_dashboard": False, "log_to_driver": False, "configure_logging": True,
                      "logging_level": "WARNING"}
            if address:
                kwargs["address"] = address
            else:
                if num_cpus is not None:
                    kwargs["num_cpus"] = num_cpus
                if num_gpus is not None:
                    kwargs["num_gpus"] = num_gpus
            ray.init(**kwargs)
        try:
            resources = ray.cluster_resources()
            gpus = resources.get("GPU", 0)
            cluster = {"nodes": len([n for n in ray.nodes() if n.get("Alive")]), "cpus": resources.get("CPU", 0),
                       "gpus": gpus, "address": address or "local"}
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
            try:
                while pending:
                    ready, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                    for ref in ready:
                        run = refs[ref]
                        records[run.name] = _finish(out, run, ref, attempts, bar)
                    if not ready and bar.tty:
                        bar.update()  # the ETA and the rate move while runs are under way
            except KeyboardInterrupt:
                # The runs under way are not cancelled: a task whose owner disconnects is ended by
                # Ray itself, and a forced cancel racing a task's reply can abort this driver in
                # Ray's task manager before the report is written. Nothing a task does reaches DIR:
                # its files come back to this driver, which writes them.
                interrupted = True
                bar.finish()
                sys.stderr.write(f"fleet: interrupted; {len(pending)} run(s) not finished. Run the same command "
                                 f"again to finish them (finished runs are kept).\n")
        finally:
            if init_ray:
                ray.shutdown()
    bar.finish()
    doc = report.write(out, m, records, cluster, started, time.time(), interrupted,
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
    return 130 if interrupted else 1 if failed else 0


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
