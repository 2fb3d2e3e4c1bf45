"""A fleet across two Ray nodes of one machine (ray.cluster_utils.Cluster)."""
import json

import pytest
import yaml

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from ndtcu.fleet import run_fleet  # noqa: E402


def test_fleet_over_two_nodes(sample, tmp_path):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False})
    cluster.add_node(num_cpus=1, num_gpus=0)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    try:
        # A worker started on each node first: a node whose first worker is still starting
        # when the fleet's runs are handed out (a second or two here) can be passed over by
        # the scheduler for a node with a worker ready, and the sample's runs are short.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        @ray.remote(num_cpus=1)
        def node():
            return ray.get_runtime_context().get_node_id()

        alive = [n["NodeID"] for n in ray.nodes() if n.get("Alive")]
        started = ray.get([node.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
                           for n in alive])
        assert sorted(started) == sorted(alive)
        ref = str(sample / "poses_tum.txt")
        m = tmp_path / "fleet.yaml"
        m.write_text(yaml.safe_dump({"runs": [
            {"name": "s", "map": str(sample / "map.pcd"), "scans": str(sample / "scans"), "reference": ref,
             "settings": {"init-from": ref}, "sweep": {"voxel": [0.5, 0.7, 1.0, 2.0]}}]}))
        assert run_fleet(m, tmp_path / "out", progress=False) == 0
        fleet = json.loads((tmp_path / "out" / "fleet.json").read_text())
        assert fleet["cluster"]["nodes"] == 2 and fleet["counts"]["done"] == 4
        nodes = {json.loads((tmp_path / "out" / "runs" / r["name"] / "run.json").read_text())["node"]
                 for r in fleet["runs"]}
        assert len(nodes) == 2
    finally:
        ray.shutdown()
        cluster.shutdown()
