import numpy as np
import ndtcu

map_cloud = ndtcu.read_point_cloud("data/sample/map.pcd")     # .points: (N, 3) float32
scan = ndtcu.voxel_downsample(ndtcu.read_point_cloud("data/sample/scans/000003.pcd"), 1.0)

aligner = ndtcu.Aligner(backend="auto")                        # the autoware preset; keywords override
aligner.set_target(map_cloud)                                  # or a float32 (N, 3) array, or a VoxelMap
guess = np.array([-24.06, 16.31, 1.41, -0.024, 0.036, -1.66])  # x y z roll pitch yaw, or a 4x4 matrix
r = aligner.align(scan, guess)
print(r.xyzrpy, r.converged, r.iterations, r.nvtl, r.backend)
