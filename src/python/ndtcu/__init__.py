"""NDT scan registration (ndtcu) from Python: numpy in, numpy out.

Point arguments are ndtcu.PointCloud objects or C-contiguous float32 numpy arrays of shape
(N, 3). The calls that align or score a scan or build a map (Aligner.align, evaluate,
align_batch, find_initial_pose, VoxelMap.build, Aligner.set_target, Localizer.set_map) read
either where it lies, without a copy; those that filter, write or preprocess take a
PointCloud and copy an array into one first. Results carry the
field names of the CLI's JSON output.
"""

from ._ndtcu import (  # noqa: F401
    AlignResult,
    AlignSettings,
    BagReader,
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
    crop_range,
    find_initial_pose,
    matrix_to_pose,
    pose_to_matrix,
    read_point_cloud,
    tum_line,
    voxel_downsample,
    write_point_cloud,
)

