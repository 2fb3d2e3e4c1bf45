// The Python module `ndtcu` (its compiled part, `ndtcu._ndtcu`): numpy in, numpy out.
//
// Point arrays. A point argument is either an ndtcu.PointCloud or a C-contiguous float32
// numpy array of shape (N, 3) (read-only arrays too). Neither is copied by the calls that
// align, score a scan or build a map (Aligner.align, evaluate, align_batch,
// find_initial_pose, VoxelMap.build, Aligner.set_target, Localizer.set_map): they take a
// PointCloudView of the cloud's or the array's own memory (Eigen::Vector3f is three packed
// floats, so an (N, 3) float32 array is N of them as it lies), and the argument holds a
// reference to the array until the call returns, GIL released or not. The filters
// (voxel_downsample, crop_range), Localizer.localize and write_point_cloud read an array
// where it lies too. One call copies an array: PointCloud(...) (CloudArg::take()), whose
// cloud owns its points. A PointCloud's `points` is a numpy view of the C++ memory, so a
// cloud read or built once is handed to every later call without a copy. Anything else is
// a TypeError (not an array, wrong dtype) or a ValueError (wrong shape, not contiguous)
// naming the argument and what was given: a silent conversion would hide a float64 map
// losing precision or a transposed (3, N) array.
//
// The GIL is released around every call that aligns, builds a map or reads a file, so
// other Python threads run meanwhile; an array being aligned must not be written by one of
// them until the call returns (its points are read during the call, not before).
#include "common.hpp"

#include <ndtcu/version.hpp>

NB_MODULE(_ndtcu, m) {
  using namespace ndtcu::python;
  m.doc() = "NDT scan registration (ndtcu): numpy in and out.";
  m.attr("__version__") = NDTCU_VERSION_STRING;
  define_errors(m);
  define_devices(m);
  define_cloud(m);
  define_settings(m);
  define_align_result(m);
  define_map(m);
  define_aligner(m);
  define_initial_pose(m);
  define_localizer_settings(m);
  define_localizer(m);
  define_rosbag(m);
  define_pose(m);
  define_command(m);
  define_scan_matcher(m);
}
