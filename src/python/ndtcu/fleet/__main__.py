"""`ndtcu-fleet` (also `python -m ndtcu.fleet`): localization over a fleet of logs on Ray.

    ndtcu-fleet run MANIFEST --out DIR [--address ADDR] [--gpus-per-run 1] [--cpus-per-run N]
                    [--max-retries 3] [--num-cpus N] [--num-gpus N] [--quiet]
    ndtcu-fleet check MANIFEST

Exit codes: 0 every run done (or present from an earlier fleet), 1 some run failed,
2 a manifest or usage error, an output folder that cannot be written or is another
fleet's, a cluster with no node for a run (nothing started), 130 interrupted by SIGINT
(Ctrl-C) and 143 by SIGTERM (128 + the signal; finished runs kept, the report written: run
again to finish).
"""
import argparse
import signal
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ndtcu-fleet", description="Localization over fleets of logs on Ray "
                                 "(one `ndtcu localize` run per Ray task; see docs/fleet.md).")
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a manifest's fleet into DIR (resumes: runs already in DIR are skipped)")
    run.add_argument("manifest", help="the fleet's manifest (YAML)")
    run.add_argument("--out", required=True, help="output folder: runs/NAME/, fleet.json, runs.csv, report.html")
    run.add_argument("--address", help="a Ray cluster to join (e.g. auto, or HEAD:6379 of `ray start --head`); "
                                       "default: a local cluster of this machine")
    run.add_argument("--gpus-per-run", type=float, default=1.0,
                     help="GPUs per run (fractions share a GPU; 0: the CPU backend); with no GPU in the "
                          "cluster every run uses the CPU (default 1)")
    run.add_argument("--cpus-per-run", type=float, default=1.0,
                     help="CPUs Ray reserves per run, also the CPU backend's threads (default 1)")
    run.add_argument("--max-retries", type=int, default=3,
                     help="retries of a run whose worker died or hit a CUDA error (default 3)")
    run.add_argument("--num-cpus", type=int, help="local cluster only: CPUs it offers (default: all)")
    run.add_argument("--num-gpus", type=int, help="local cluster only: GPUs it offers (default: all)")
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")
    check = sub.add_parser("check", help="check a manifest and list its runs (nothing runs)")
    check.add_argument("manifest")
    args = ap.parse_args(argv)

    from . import manifest
    from .runner import run_fleet

    try:
        if args.command == "check":
            m = manifest.load(args.manifest)
            for r in m.runs:
                print(f"{r.name}\t{r.key[:12]}\tndtcu {' '.join(r.args)}")
            print(f"{len(m.runs)} runs", file=sys.stderr)
            return 0
        return run_fleet(args.manifest, args.out, address=args.address, gpus_per_run=args.gpus_per_run,
                         cpus_per_run=args.cpus_per_run, max_retries=args.max_retries, num_cpus=args.num_cpus,
                         num_gpus=args.num_gpus, progress=not args.quiet)
    except manifest.ManifestError as e:
        print(f"ndtcu-fleet: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"ndtcu-fleet: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        # Before the fleet's own handling took over (reading the manifest).
        signum = getattr(e, "signum", signal.SIGINT)
        print(f"ndtcu-fleet: interrupted ({signal.Signals(signum).name}) before any run started", file=sys.stderr)
        return 128 + signum
    except ImportError as e:
        if e.name not in ("ray", "yaml"):
            raise
        print(f"ndtcu-fleet: error: the Python package {e.name} is missing: pip install 'ndtcu[fleet]' (or "
              f"pip install ray pyyaml)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
