"""NDT scan registration (ndtcu) from Python: numpy in, numpy out.

Point arguments are ndtcu.PointCloud objects or C-contiguous float32 numpy arrays of shape
(N, 3). Every call that takes points (aligning, scoring, building a map, filtering,
Localizer.localize, write_point_cloud) reads either where it lies, without a copy; only
PointCloud(array) copies the array into a cloud of its own. Results carry the field names of
the CLI's JSON output.
"""

from ._ndtcu import (  # noqa: F401
    AlignResult,
    AlignSettings,
    BagReader,
    Aligner,
    CudaError,
    Error,
    ExecutionOptions,
    GlobalSearchStats,
    InitialPoseResult,
    InitialPoseSearch,
    IoError,
    LocalizationResult,
    Localizer,
    LocalizerSettings,
    PointCloud,
    PoseCandidate,
    VoxelMap,
    __version__,
    check_autoware_config,
    check_command,
    crop_range,
    cuda_compiled,
    cuda_devices,
    cuda_unavailable_reason,
    find_initial_pose,
    matrix_to_pose,
    pose_to_matrix,
    read_point_cloud,
    run_command,
    settings_fields,
    tum_line,
    voxel_downsample,
    write_point_cloud,
)

