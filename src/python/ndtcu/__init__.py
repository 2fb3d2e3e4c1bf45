"""NDT scan registration (ndtcu) from Python: numpy in, numpy out.

Point arguments are ndtcu.PointCloud objects (used without a copy) or C-contiguous float32
numpy arrays of shape (N, 3). Results carry the field names of the CLI's JSON output.
"""

from ._ndtcu import (  # noqa: F401
    AlignResult,
    AlignSettings,
    Aligner,
    CudaError,
    Error,
    InitialPoseResult,
    IoError,
    LocalizationResult,
    Localizer,
    LocalizerSettings,
    PointCloud,
    VoxelMap,
    __version__,
    find_initial_pose,
    matrix_to_pose,
    pose_to_matrix,
    read_point_cloud,
    write_point_cloud,
)


def tum_line(time, pose):
    """One TUM trajectory line (t x y z qx qy qz qw) of a 4x4 pose, as `ndtcu localize` writes."""
    import numpy as np

    r = np.asarray(pose, dtype=np.float64)[:3, :3]
    t = np.asarray(pose, dtype=np.float64)[:3, 3]
    # Rotation matrix to unit quaternion (Shepperd's method, the largest diagonal first).
    tr = r[0, 0] + r[1, 1] + r[2, 2]
    if tr > 0:
        s = 2.0 * np.sqrt(tr + 1.0)
        q = [(r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, 0.25 * s]
    elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
        s = 2.0 * np.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2])
        q = [0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s, (r[2, 1] - r[1, 2]) / s]
    elif r[1, 1] > r[2, 2]:
        s = 2.0 * np.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2])
        q = [(r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s, (r[0, 2] - r[2, 0]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1])
        q = [(r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s, (r[1, 0] - r[0, 1]) / s]
    return "%.9f %.9f %.9f %.9f %.9f %.9f %.9f %.9f" % (time, t[0], t[1], t[2], q[0], q[1], q[2], q[3])
