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
#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/filters.hpp>
#include <ndtcu/initial_pose.hpp>
#include <ndtcu/io.hpp>
#include <ndtcu/localizer.hpp>
#include <ndtcu/point_cloud.hpp>
#include <ndtcu/result.hpp>
#include <ndtcu/rosbag.hpp>
#include <ndtcu/settings.hpp>
#include <ndtcu/trajectory.hpp>
#include <ndtcu/version.hpp>
#include <ndtcu/voxel_map.hpp>

#include <nanobind/eigen/dense.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace ndtcu::python {
namespace {

// A dtype as numpy spells it, for messages.
std::string dtype_name(const nb::dlpack::dtype& d) {
  const char* kind = d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)  ? "float"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int)  ? "int"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt) ? "uint"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool) ? "bool"
                                                                                         : "complex";
  return std::string(kind) + std::to_string(d.bits);
}

template <typename... Config>
std::string shape_text(const nb::ndarray<Config...>& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// A number as Python writes it (nan, inf, 1e-09), for messages.
std::string repr_text(double v) { return nb::cast<std::string>(nb::repr(nb::float_(v))); }

// A time or another scalar that must be finite: a ValueError naming the argument
// otherwise (a NaN time was taken, and predicted from, without a word).
double finite_arg(double v, const char* name) {
  if (!std::isfinite(v)) {
    throw nb::value_error((std::string(name) + ": expected a finite number, got " + repr_text(v)).c_str());
  }
  return v;
}

// A path argument: str, bytes or os.PathLike (pathlib.Path), as os.fsencode spells it in
// bytes: a str through the file-system encoding (a name that is not UTF-8, as os.listdir
// gives it, comes back to its own bytes), bytes as they are.
std::string path_arg(nb::handle obj, const char* name) {
  PyObject* fs = PyOS_FSPath(obj.ptr());
  if (!fs) {
    PyErr_Clear();
    throw nb::type_error((std::string(name) + ": expected a path (str, bytes or os.PathLike), got " +
                          nb::type_name(obj.type()).c_str())
                             .c_str());
  }
  nb::object path = nb::steal(fs);
  nb::object bytes = path;
  if (!PyBytes_Check(fs)) {
    PyObject* encoded = PyUnicode_EncodeFSDefault(fs);
    if (!encoded) throw nb::python_error();
    bytes = nb::steal(encoded);
  }
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(bytes.ptr(), &data, &size) != 0) throw nb::python_error();
  std::string out(data, static_cast<std::size_t>(size));
  if (out.find('\0') != std::string::npos) {
    throw nb::value_error((std::string(name) + ": the path holds a null byte").c_str());
  }
  return out;
}

// A path for Python: a str as os.fsdecode makes it (a name that is not UTF-8 keeps its
// bytes as surrogates, and path_arg gives them back).
nb::object path_out(const std::string& path) {
  PyObject* s = PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size()));
  if (!s) throw nb::python_error();
  return nb::steal(s);
}

// A name from a bag (topic, message type, encoding): a str when it is UTF-8, as ROS
// requires, else its bytes as the bag holds them (decoded as text, such a topic raised
// UnicodeDecodeError and could be neither listed nor read). Given back as bytes, it
// reaches the topic.
nb::object name_out(const std::string& name) {
  PyObject* s = PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "strict");
  if (s) return nb::steal(s);
  PyErr_Clear();
  return nb::steal(PyBytes_FromStringAndSize(name.data(), static_cast<Py_ssize_t>(name.size())));
}

// A topic argument: a str (UTF-8) or the bytes of a name (as name_out gives a name that
// is not UTF-8).
std::string name_arg(nb::handle obj, const char* name) {
  if (PyBytes_Check(obj.ptr())) {
    return std::string(PyBytes_AS_STRING(obj.ptr()), static_cast<std::size_t>(PyBytes_GET_SIZE(obj.ptr())));
  }
  if (PyUnicode_Check(obj.ptr())) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(obj.ptr(), &size);
    if (!data) throw nb::python_error();
    return std::string(data, static_cast<std::size_t>(size));
  }
  throw nb::type_error(
      (std::string(name) + ": expected str or bytes, got " + nb::type_name(obj.type()).c_str()).c_str());
}

// A cloud argument: an ndtcu.PointCloud, or a checked float32 (N, 3) C-contiguous array
// held (a reference to it) for as long as the argument lives. Destroy it with the GIL held
// (declare it before a Working or gil_scoped_release): dropping the array's reference
// needs the GIL.
class CloudArg {
 public:
  CloudArg(nb::handle obj, const char* name) {
    if (nb::isinstance<PointCloud>(obj)) {
      given_ = nb::inst_ptr<PointCloud>(obj);
      view_ = *given_;
      return;
    }
    nb::ndarray<nb::ro> a;  // read-only arrays too: the points are only read
    if (!nb::try_cast(obj, a, false)) {
      throw nb::type_error((std::string(name) + ": expected a float32 numpy array of shape (N, 3) or an ndtcu.PointCloud, got " +
                            nb::type_name(obj.type()).c_str())
                               .c_str());
    }
    if (a.dtype() != nb::dtype<float>()) {
      throw nb::type_error((std::string(name) + ": expected dtype float32, got " + dtype_name(a.dtype()) +
                            " (convert with .astype(numpy.float32))")
                               .c_str());
    }
    if (a.device_type() != nb::device::cpu::value) {
      throw nb::type_error((std::string(name) + ": expected an array in host memory").c_str());
    }
    if (a.ndim() != 2 || a.shape(1) != 3) {
      throw nb::value_error((std::string(name) + ": expected shape (N, 3), got " + shape_text(a)).c_str());
    }
    // Row stride 3 matters from two rows on, element stride 1 from one: a (1, 3) row of a
    // transposed array is not three floats in a row.
    if ((a.shape(0) > 0 && a.stride(1) != 1) || (a.shape(0) > 1 && a.stride(0) != 3)) {
      throw nb::value_error((std::string(name) + ": the array is not C-contiguous (strides " + std::to_string(a.stride(0)) +
                             ", " + std::to_string(a.stride(1)) + " elements; use numpy.ascontiguousarray)")
                                .c_str());
    }
    array_ = a;
    view_ = PointCloudView(static_cast<const Eigen::Vector3f*>(array_.data()), array_.shape(0));
  }

  // The points where they lie (the cloud's or the array's), origin included: what the
  // calls that only read a scan take.
  PointCloudView view() const { return view_; }

  // The PointCloud given (with its intensities), or null for an array.
  const PointCloud* given() const { return given_; }

  // A PointCloud of its own, for PointCloud(...): a copy of the cloud given (intensities
  // included), or of the array's points.
  PointCloud take() const {
    if (given_) return *given_;
    PointCloud own;
    own.points.assign(view_.begin(), view_.end());
    return own;
  }

 private:
  nb::ndarray<nb::ro> array_;  // keeps the array alive; empty for a PointCloud
  PointCloudView view_;
  const PointCloud* given_ = nullptr;
};

// A 4x4 float64 transform argument (any float64 layout; Eigen's caster copies it).
Eigen::Matrix4d matrix_arg(nb::handle obj, const char* name) {
  nb::ndarray<> a;
  if (!nb::try_cast(obj, a, false)) {
    throw nb::type_error((std::string(name) + ": expected a 4x4 numpy array, got " + nb::type_name(obj.type()).c_str()).c_str());
  }
  if (a.ndim() != 2 || a.shape(0) != 4 || a.shape(1) != 4) {
    throw nb::value_error((std::string(name) + ": expected shape (4, 4), got " + shape_text(a)).c_str());
  }
  if (a.dtype() != nb::dtype<double>()) {
    throw nb::type_error((std::string(name) + ": expected dtype float64, got " + dtype_name(a.dtype())).c_str());
  }
  Eigen::Matrix4d m;
  const double* d = static_cast<const double*>(a.data());
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 4; ++c) {
      m(r, c) = d[r * a.stride(0) + c * a.stride(1)];
      if (!std::isfinite(m(r, c))) {
        throw nb::value_error((std::string(name) + ": non-finite value " + repr_text(m(r, c)) + " at [" +
                               std::to_string(r) + ", " + std::to_string(c) + "]")
                                  .c_str());
      }
    }
  }
  return m;
}

// Guesses: a (K, 4, 4) float64 array of transforms, or a (K, 6) one of poses
// [x y z roll pitch yaw].
std::vector<Pose6> guesses_arg(nb::handle obj, const char* name) {
  nb::ndarray<> a;
  if (!nb::try_cast(obj, a, false)) {
    throw nb::type_error((std::string(name) + ": expected a (K, 4, 4) or (K, 6) float64 numpy array, got " +
                          nb::type_name(obj.type()).c_str())
                             .c_str());
  }
  if (a.dtype() != nb::dtype<double>()) {
    throw nb::type_error((std::string(name) + ": expected dtype float64, got " + dtype_name(a.dtype())).c_str());
  }
  const double* d = static_cast<const double*>(a.data());
  // Each value as given (a 4x4's own, before a pose is made of it), named by its index.
  const auto value = [&](std::size_t k, std::size_t i, std::size_t j, bool matrix) {
    const double v = matrix ? d[k * a.stride(0) + i * a.stride(1) + j * a.stride(2)] : d[k * a.stride(0) + i * a.stride(1)];
    if (!std::isfinite(v)) {
      throw nb::value_error((std::string(name) + ": non-finite value " + repr_text(v) + " at [" + std::to_string(k) +
                             ", " + std::to_string(i) + (matrix ? ", " + std::to_string(j) : std::string()) + "]")
                                .c_str());
    }
    return v;
  };
  std::vector<Pose6> out;
  if (a.ndim() == 3 && a.shape(1) == 4 && a.shape(2) == 4) {
    for (std::size_t k = 0; k < a.shape(0); ++k) {
      Eigen::Matrix4d m;
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c) m(r, c) = value(k, r, c, true);
      out.push_back(matrix_to_pose(m));
    }
  } else if (a.ndim() == 2 && a.shape(1) == 6) {
    for (std::size_t k = 0; k < a.shape(0); ++k) {
      Pose6 p;
      for (int i = 0; i < 6; ++i) p(i) = value(k, i, 0, false);
      out.push_back(p);
    }
  } else {
    throw nb::value_error((std::string(name) + ": expected shape (K, 4, 4) or (K, 6), got " + shape_text(a)).c_str());
  }
  return out;
}

// Settings given as keyword arguments: each key must be an attribute of the settings
// object (a TypeError naming it otherwise, as a misspelt keyword argument would be).
template <typename Settings>
Settings apply_kwargs(const Settings& base, const nb::kwargs& kwargs, const char* what) {
  nb::object o = nb::cast(base, nb::rv_policy::copy);
  for (auto [key, value] : kwargs) {
    if (!nb::hasattr(o, key)) {
      throw nb::type_error((std::string(what) + ": unknown setting '" + nb::cast<std::string>(key) + "'").c_str());
    }
    nb::setattr(o, key, value);
  }
  return nb::cast<Settings>(o);
}

// The alignment's trace as a list of dicts, as the CLI's JSON "trace".
nb::list trace_list(const AlignResult& r) {
  nb::list out;
  for (const auto& it : r.trace) {
    nb::dict d;
    d["xyzrpy"] = Eigen::VectorXd(it.pose);
    d["score"] = it.score;
    d["step"] = it.step_length;
    out.append(d);
  }
  return out;
}

// Localizability as a dict with the CLI's JSON names (condition None when infinite).
nb::dict localizability_dict(const Localizability& l) {
  nb::dict d;
  d["valid"] = l.valid;
  d["eigenvalues"] = Eigen::VectorXd(l.eigenvalues);
  d["directions"] = Eigen::Matrix<double, 6, 6>(l.directions.transpose());
  d["condition"] = std::isfinite(l.condition) ? nb::cast(l.condition) : nb::none();
  d["weakest_ratio"] = l.weakest_ratio;
  d["weak"] = l.weak;
  d["degenerate"] = l.degenerate;
  return d;
}

// AlignResult as a dict with the CLI's JSON names.
nb::dict result_dict(const AlignResult& r) {
  nb::dict d;
  d["transform"] = Eigen::Matrix4d(r.transform);
  d["xyzrpy"] = Eigen::VectorXd(r.pose);
  d["converged"] = r.converged;
  d["reason"] = to_string(r.reason);
  d["iterations"] = r.iterations;
  d["score"] = r.score;
  d["tp"] = r.tp;
  d["nvtl"] = r.nvtl;
  d["correspondences"] = r.correspondences;
  d["matched_points"] = r.matched_points;
  d["source_points"] = r.source_points;
  d["target_voxels"] = r.target_voxels;
  d["oscillation_count"] = r.oscillation_count;
  d["localizability"] = localizability_dict(r.localizability);
  d["backend"] = r.backend;
  d["time_ms"] = r.timings.total_ms;
  d["per_iteration_ms"] = r.timings.per_iteration_ms;
  d["evaluations"] = r.timings.evaluations;
  d["trace"] = trace_list(r);
  d["covariance_mode"] = to_string(r.covariance_mode);
  d["covariance_valid"] = r.covariance_valid;
  d["covariance"] = Eigen::Matrix<double, 6, 6>(r.covariance);
  d["covariance_xy"] = Eigen::Matrix2d(r.covariance_xy);
  d["covariance_ms"] = r.timings.covariance_ms;
  return d;
}

// An enum setting exposed as its name (the CLI's spelling), set from a name.
template <typename S, typename E>
void enum_setting(nb::class_<S>& cls, const char* name, E S::*member, E (*parse)(const std::string&), const char* doc) {
  cls.def_prop_rw(
      name, [member](const S& s) { return std::string(to_string(s.*member)); },
      [member, parse](S& s, const std::string& v) { s.*member = parse(v); }, doc);
}

// An Aligner and a Localizer as Python holds them: with a lock. The GIL is released while
// they work, and each takes one call at a time (aligner.hpp, localizer.hpp), so two Python
// threads sharing one would otherwise race; with the lock the second waits.
struct PyAligner : Aligner {
  using Aligner::Aligner;
  std::mutex mutex;
};
struct PyLocalizer : Localizer {
  using Localizer::Localizer;
  std::mutex mutex;
};

// While a PyAligner or PyLocalizer works: the GIL released, then its lock taken (in this
// order: a thread holding the lock and waiting for the GIL would otherwise deadlock with
// one holding the GIL and waiting for the lock); on exit the lock goes first.
class Working {
 public:
  explicit Working(std::mutex& m) : lock_(m) {}

 private:
  nb::gil_scoped_release release_;
  std::lock_guard<std::mutex> lock_;
};

}  // namespace
}  // namespace ndtcu::python

NB_MODULE(_ndtcu, m) {
  using namespace ndtcu;
  using namespace ndtcu::python;
  m.doc() = "NDT scan registration (ndtcu): numpy in and out.";
  m.attr("__version__") = NDTCU_VERSION_STRING;

  // Python exceptions: ndtcu.Error (a RuntimeError), ndtcu.IoError (also an OSError? no:
  // kept under Error only, so one except clause catches every ndtcu failure).
  static nb::object error = nb::steal(PyErr_NewExceptionWithDoc(
      "ndtcu.Error", "Raised for misuse and bad input; the message says what to fix.", PyExc_RuntimeError, nullptr));
  static nb::object io_error = nb::steal(
      PyErr_NewExceptionWithDoc("ndtcu.IoError", "A file that cannot be read or written.", error.ptr(), nullptr));
  static nb::object cuda_error = nb::steal(PyErr_NewExceptionWithDoc(
      "ndtcu.CudaError", "A CUDA failure, or CUDA asked of a build or machine without it.", error.ptr(), nullptr));
  m.attr("Error") = error;
  m.attr("IoError") = io_error;
  m.attr("CudaError") = cuda_error;
  // The message decoded as UTF-8 with bytes that are not shown as \xNN: a file or topic
  // name that is not UTF-8 would otherwise turn the error into a UnicodeDecodeError.
  static const auto raise = [](PyObject* type, const char* what) {
    PyObject* message = PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "backslashreplace");
    if (!message) return;  // the decoding's own error stays set
    PyErr_SetObject(type, message);
    Py_DECREF(message);
  };
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const IoError& e) {
      raise(io_error.ptr(), e.what());
    } catch (const CudaError& e) {
      raise(cuda_error.ptr(), e.what());
    } catch (const Error& e) {
      raise(error.ptr(), e.what());
    }
  });

  // --- CUDA devices -----------------------------------------------------------------------
  m.def("cuda_compiled", &cuda_compiled, "True when this build includes the CUDA backend.");
  m.def(
      "cuda_devices",
      [] {
        nb::list out;
        for (const CudaDeviceInfo& d : cuda_devices()) {
          nb::dict e;
          e["index"] = d.index;
          e["name"] = d.name;
          e["compute_capability"] = std::to_string(d.compute_major) + "." + std::to_string(d.compute_minor);
          e["multiprocessors"] = d.multiprocessors;
          e["total_memory_bytes"] = d.total_memory_bytes;
          e["free_memory_bytes"] = d.free_memory_bytes;
          out.append(e);
        }
        return out;
      },
      "The CUDA devices backend='cuda' can use, as dicts (the fields of `ndtcu --json devices`); empty without "
      "a CUDA build, driver or device.");
  m.def("cuda_unavailable_reason", &cuda_unavailable_reason,
        "Why no CUDA device is usable (the build or the runtime's error), or '' when one is.");

  // --- PointCloud -------------------------------------------------------------------------
  nb::class_<PointCloud>(m, "PointCloud",
                         "float32 points relative to a float64 origin (world = origin + points), as ndtcu "
                         "processes them. `points` is a view of the cloud's own memory.")
      .def(
          "__init__",
          [](PointCloud* self, nb::handle points, std::optional<Eigen::Vector3d> origin) {
            CloudArg arg(points, "points");
            new (self) PointCloud(arg.take());
            if (origin) self->origin = *origin;
          },
          "points"_a, "origin"_a = nb::none(),
          "Copies `points` (float32 (N, 3), or a PointCloud) into a cloud of its own; `origin` (3,) float64 "
          "defaults to 0.")
      .def_prop_ro(
          "points",
          [](PointCloud& c) {
            return nb::ndarray<nb::numpy, float, nb::shape<-1, 3>, nb::c_contig>(c.points.data(), {c.points.size(), 3},
                                                                                 nb::handle());
          },
          nb::rv_policy::reference_internal, "(N, 3) float32 view of the points (no copy; writes go to the cloud)")
      .def_prop_rw(
          "origin", [](const PointCloud& c) { return Eigen::Vector3d(c.origin); },
          [](PointCloud& c, const Eigen::Vector3d& o) { c.origin = o; }, "(3,) float64 offset of the points")
      .def_prop_ro(
          "intensity",
          [](PointCloud& c) -> nb::object {
            if (!c.has_intensity()) return nb::none();
            return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<1>>(c.intensity.data(), {c.intensity.size()}, nb::handle()),
                            nb::rv_policy::reference_internal, nb::cast(&c, nb::rv_policy::reference));
          },
          "(N,) float32 intensities, or None when the file had none")
      .def("world_points", [](const PointCloud& c) {
        Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor> w(static_cast<Eigen::Index>(c.size()), 3);
        for (std::size_t i = 0; i < c.size(); ++i) w.row(static_cast<Eigen::Index>(i)) = c.world(i).transpose();
        return w;
      }, "(N, 3) float64 world coordinates (origin + points), a new array")
      .def("__len__", &PointCloud::size);

  m.def(
      "read_point_cloud",
      [](nb::handle path_obj, const std::string& origin) {
        const std::string path = path_arg(path_obj, "path");
        ReadOptions o;
        if (origin == "auto") o.origin_policy = OriginPolicy::Auto;
        else if (origin == "zero") o.origin_policy = OriginPolicy::Zero;
        else throw nb::value_error(("origin: expected 'auto' or 'zero', got '" + origin + "'").c_str());
        nb::gil_scoped_release release;
        return read_point_cloud(path, o);
      },
      "path"_a, "origin"_a = "auto",
      "Reads a PCD, PLY or KITTI .bin file (`path`: str, bytes or os.PathLike) into a PointCloud (non-finite "
      "points dropped). origin 'auto' moves a far cloud's origin to the median of its points (whole metres, "
      "whatever their order), as the CLI does; 'zero' keeps it at 0.");
  m.def(
      "write_point_cloud",
      [](nb::handle path_obj, nb::handle cloud) {
        const std::string path = path_arg(path_obj, "path");
        CloudArg c(cloud, "cloud");
        nb::gil_scoped_release release;
        if (c.given()) write_point_cloud(path, *c.given());  // with its intensities
        else write_point_cloud(path, c.view());
      },
      "path"_a, "cloud"_a,
      "Writes a PCD (binary) or KITTI .bin file, by extension (`path`: str, bytes or os.PathLike); an array is "
      "read where it lies (no intensities).");

  m.def(
      "voxel_downsample",
      [](nb::handle cloud, double leaf) {
        CloudArg c(cloud, "cloud");
        nb::gil_scoped_release release;
        return c.given() ? voxel_downsample(*c.given(), leaf) : voxel_downsample(c.view(), leaf);
      },
      "cloud"_a, "leaf"_a,
      "The centroid of each occupied leaf x leaf x leaf cell (PCL's VoxelGrid), as a new PointCloud (an array is "
      "read where it lies).");
  m.def(
      "crop_range",
      [](nb::handle cloud, double min_range, double max_range) {
        CloudArg c(cloud, "cloud");
        nb::gil_scoped_release release;
        return c.given() ? crop_range(*c.given(), min_range, max_range) : crop_range(c.view(), min_range, max_range);
      },
      "cloud"_a, "min_range"_a, "max_range"_a,
      "The points whose distance from the sensor lies in [min_range, max_range], as a new PointCloud (an array is "
      "read where it lies).");

  // --- Settings ---------------------------------------------------------------------------
  auto settings = nb::class_<AlignSettings>(m, "AlignSettings", "NDT settings (ndtcu's AlignSettings); enums by name.");
  settings.def(nb::init<>())
      .def_static("preset", &preset, "name"_a, "'autoware' (the default) or 'pcl'")
      .def_rw("resolution", &AlignSettings::resolution)
      .def_rw("step_size", &AlignSettings::step_size)
      .def_rw("epsilon", &AlignSettings::epsilon)
      .def_rw("max_iterations", &AlignSettings::max_iterations)
      .def_rw("outlier_ratio", &AlignSettings::outlier_ratio)
      .def_rw("min_points_per_voxel", &AlignSettings::min_points_per_voxel)
      .def_rw("eigenvalue_ratio", &AlignSettings::eigenvalue_ratio)
      .def_rw("threads", &AlignSettings::threads)
      .def_prop_rw(
          "prior_pose", [](const AlignSettings& s) { return Eigen::VectorXd(s.prior.pose); },
          [](AlignSettings& s, const Eigen::VectorXd& v) {
            if (v.size() != 6) throw nb::value_error("prior_pose: expected 6 values [x y z roll pitch yaw]");
            for (Eigen::Index i = 0; i < 6; ++i) {
              if (!std::isfinite(v(i))) {
                throw nb::value_error(("prior_pose: non-finite value " + repr_text(v(i)) + " at [" +
                                       std::to_string(i) + "]")
                                          .c_str());
              }
            }
            s.prior.pose = v;
          },
          "the pose prior's centre [x y z roll pitch yaw] (m, rad)")
      .def_prop_rw(
          "prior_information", [](const AlignSettings& s) { return Eigen::MatrixXd(s.prior.information); },
          [](AlignSettings& s, const Eigen::MatrixXd& v) {
            if (v.rows() != 6 || v.cols() != 6) throw nb::value_error("prior_information: expected a 6x6 matrix");
            for (Eigen::Index r = 0; r < 6; ++r) {
              for (Eigen::Index q = 0; q < 6; ++q) {
                if (!std::isfinite(v(r, q))) {
                  throw nb::value_error(("prior_information: non-finite value " + repr_text(v(r, q)) + " at [" +
                                         std::to_string(r) + ", " + std::to_string(q) + "]")
                                            .c_str());
                }
              }
            }
            s.prior.information = v;
          },
          "the pose prior's 6x6 information matrix (zero: no prior)")
      .def_prop_rw(
          "regularization_scale_factor", [](const AlignSettings& s) { return s.prior.regularization_scale_factor; },
          [](AlignSettings& s, double v) { s.prior.regularization_scale_factor = v; },
          "Autoware's GNSS regularization about prior_pose (0: off)")
      .def("__copy__", [](const AlignSettings& s) { return s; })
      .def("__repr__", [](nb::handle self) {
        // Every property by name, as keywords Aligner(...) takes.
        std::string out = "AlignSettings(";
        const char* names[] = {"resolution", "step_size", "epsilon", "max_iterations", "outlier_ratio",
                               "search", "line_search", "convergence", "newton_direction", "covariance",
                               "min_points_per_voxel", "eigenvalue_ratio", "threads", "backend", "gpu_loop",
                               "pose_covariance", "prior_pose", "prior_information", "regularization_scale_factor"};
        bool first = true;
        for (const char* n : names) {
          out += (first ? "" : ", ") + std::string(n) + "=" + nb::cast<std::string>(nb::repr(self.attr(n)));
          first = false;
        }
        return out + ")";
      });
  enum_setting(settings, "search", &AlignSettings::search, &search_method_from_string, "radius|direct27|direct7|direct1");
  enum_setting(settings, "line_search", &AlignSettings::line_search, &line_search_from_string, "fixed|more-thuente");
  enum_setting(settings, "convergence", &AlignSettings::convergence, &convergence_rule_from_string, "autoware|pcl");
  enum_setting(settings, "newton_direction", &AlignSettings::newton_direction, &newton_direction_from_string,
               "pcl|saddle-free");
  enum_setting(settings, "covariance", &AlignSettings::covariance, &covariance_mode_from_string, "autoware|pcl");
  enum_setting(settings, "backend", &AlignSettings::backend, &backend_from_string, "cpu|cuda|auto");
  enum_setting(settings, "gpu_loop", &AlignSettings::gpu_loop, &gpu_loop_from_string, "device|host");
  enum_setting(settings, "pose_covariance", &AlignSettings::pose_covariance, &pose_covariance_from_string,
               "none|laplace|multi-ndt|multi-ndt-score");

  // --- Results ----------------------------------------------------------------------------
  nb::class_<AlignResult>(m, "AlignResult", "One alignment; field names as `ndtcu align --json`.")
      .def_prop_ro("transform", [](const AlignResult& r) { return Eigen::Matrix4d(r.transform); })
      .def_prop_ro("xyzrpy", [](const AlignResult& r) { return Eigen::VectorXd(r.pose); })
      .def_ro("converged", &AlignResult::converged)
      .def_prop_ro("reason", [](const AlignResult& r) { return std::string(to_string(r.reason)); })
      .def_ro("iterations", &AlignResult::iterations)
      .def_ro("score", &AlignResult::score)
      .def_ro("tp", &AlignResult::tp)
      .def_ro("nvtl", &AlignResult::nvtl)
      .def_prop_ro("hessian", [](const AlignResult& r) { return Eigen::Matrix<double, 6, 6>(r.hessian); })
      .def_ro("correspondences", &AlignResult::correspondences)
      .def_ro("matched_points", &AlignResult::matched_points)
      .def_ro("source_points", &AlignResult::source_points)
      .def_ro("target_voxels", &AlignResult::target_voxels)
      .def_ro("oscillation_count", &AlignResult::oscillation_count)
      .def_prop_ro("localizability", [](const AlignResult& r) { return localizability_dict(r.localizability); },
                   "How well the scan constrains each direction (ndtcu/localizability.hpp): eigenvalues "
                   "ascending, directions one row per eigenvalue (the pose change [x y z roll pitch yaw] moving the points 1 m RMS), degenerate")
      .def_prop_ro("degenerate", [](const AlignResult& r) { return r.localizability.degenerate; })
      .def_ro("backend", &AlignResult::backend)
      .def_prop_ro("time_ms", [](const AlignResult& r) { return r.timings.total_ms; })
      .def_prop_ro("per_iteration_ms", [](const AlignResult& r) { return r.timings.per_iteration_ms; })
      .def_prop_ro("evaluations", [](const AlignResult& r) { return r.timings.evaluations; })
      .def_prop_ro("trace", &trace_list)
      .def_prop_ro("covariance_mode", [](const AlignResult& r) { return std::string(to_string(r.covariance_mode)); })
      .def_ro("covariance_valid", &AlignResult::covariance_valid)
      .def_prop_ro("covariance", [](const AlignResult& r) { return Eigen::Matrix<double, 6, 6>(r.covariance); })
      .def_prop_ro("covariance_xy", [](const AlignResult& r) { return Eigen::Matrix2d(r.covariance_xy); })
      .def_prop_ro("covariance_ms", [](const AlignResult& r) { return r.timings.covariance_ms; })
      .def("to_dict", &result_dict, "The fields as a dict (the JSON object's names)")
      .def("__repr__", [](const AlignResult& r) {
        return "AlignResult(xyzrpy=[" + std::to_string(r.pose(0)) + ", " + std::to_string(r.pose(1)) + ", " +
               std::to_string(r.pose(2)) + ", " + std::to_string(r.pose(3)) + ", " + std::to_string(r.pose(4)) + ", " +
               std::to_string(r.pose(5)) + "], converged=" + (r.converged ? "True" : "False") +
               ", iterations=" + std::to_string(r.iterations) + ", nvtl=" + std::to_string(r.nvtl) + ")";
      });

  // --- VoxelMap ---------------------------------------------------------------------------
  nb::class_<VoxelMap>(m, "VoxelMap", "The NDT target: one normal distribution per usable voxel.")
      .def_static(
          "build",
          [](nb::handle points, double resolution, const std::string& covariance, int min_points, double eigenvalue_ratio,
             int threads, const std::string& backend) {
            CloudArg c(points, "points");
            VoxelMapOptions o;
            o.backend = backend_from_string(backend);
            o.resolution = resolution;
            o.covariance = covariance_mode_from_string(covariance);
            o.min_points = min_points;
            o.eigenvalue_ratio = eigenvalue_ratio;
            o.threads = threads;
            nb::gil_scoped_release release;
            return std::make_shared<VoxelMap>(VoxelMap::build(c.view(), o));
          },
          "points"_a, "resolution"_a = 2.0, "covariance"_a = "autoware", "min_points"_a = 6, "eigenvalue_ratio"_a = 0.01,
          "threads"_a = 0, "backend"_a = "cpu",
          "Builds the map of a PointCloud or float32 (N, 3) array (read where it lies, not copied). backend 'cpu' "
          "(the reference), 'cuda' (built on the GPU, the same voxels with the same bits; CudaError without a "
          "device) or 'auto'.")
      .def_prop_ro("size", &VoxelMap::size)
      .def("__len__", &VoxelMap::size)
      .def_prop_ro("resolution", &VoxelMap::resolution)
      .def_prop_ro("origin", [](const VoxelMap& v) { return Eigen::Vector3d(v.origin()); })
      .def_prop_ro(
          "means",
          [](const VoxelMap& v) {
            Eigen::Matrix<double, Eigen::Dynamic, 3, Eigen::RowMajor> a(static_cast<Eigen::Index>(v.size()), 3);
            for (int k = 0; k < 3; ++k)
              for (std::size_t i = 0; i < v.size(); ++i) a(static_cast<Eigen::Index>(i), k) = v.mean(k)[i];
            return a;
          },
          "(V, 3) float64 voxel means, map-relative (add `origin` for world coordinates)")
      .def_prop_ro(
          "covariances",
          [](const VoxelMap& v) {
            auto* buf = new double[v.size() * 9];
            for (std::size_t i = 0; i < v.size(); ++i) {
              const Eigen::Matrix3d c = v.covariance_matrix(i);
              for (int r = 0; r < 3; ++r)
                for (int q = 0; q < 3; ++q) buf[i * 9 + r * 3 + q] = c(r, q);
            }
            nb::capsule owner(buf, [](void* p) noexcept { delete[] static_cast<double*>(p); });
            return nb::ndarray<nb::numpy, double, nb::shape<-1, 3, 3>>(buf, {v.size(), 3, 3}, owner);
          },
          nb::rv_policy::move, "(V, 3, 3) float64 covariances (after eigenvalue inflation)")
      .def_prop_ro(
          "inverse_covariances",
          [](const VoxelMap& v) {
            auto* buf = new double[v.size() * 9];
            for (std::size_t i = 0; i < v.size(); ++i) {
              const Eigen::Matrix3d c = v.inverse_covariance_matrix(i);
              for (int r = 0; r < 3; ++r)
                for (int q = 0; q < 3; ++q) buf[i * 9 + r * 3 + q] = c(r, q);
            }
            nb::capsule owner(buf, [](void* p) noexcept { delete[] static_cast<double*>(p); });
            return nb::ndarray<nb::numpy, double, nb::shape<-1, 3, 3>>(buf, {v.size(), 3, 3}, owner);
          },
          nb::rv_policy::move, "(V, 3, 3) float64 inverse covariances")
      .def_prop_ro(
          "point_counts",
          [](const VoxelMap& v) {
            return nb::ndarray<nb::numpy, const std::uint32_t, nb::ndim<1>>(v.point_counts().data(), {v.size()},
                                                                           nb::handle());
          },
          nb::rv_policy::reference_internal, "(V,) uint32 points per voxel (a view)")
      .def_prop_ro(
          "cells",
          [](const VoxelMap& v) {
            return nb::ndarray<nb::numpy, const std::int32_t, nb::shape<-1, 3>>(v.cells().data()->data(), {v.size(), 3},
                                                                               nb::handle());
          },
          nb::rv_policy::reference_internal, "(V, 3) int32 lattice cells (a view)");

  // --- Aligner ----------------------------------------------------------------------------
  nb::class_<PyAligner>(m, "Aligner", "Aligns scans to one target; holds the map and the worker threads.")
      .def(
          "__init__",
          [](PyAligner* self, std::optional<AlignSettings> settings, const nb::kwargs& kwargs) {
            const AlignSettings s = apply_kwargs(settings.value_or(autoware_preset()), kwargs, "Aligner");
            new (self) PyAligner(s);
          },
          "settings"_a = nb::none(), "kwargs"_a,
          "Settings from `settings` (default: the autoware preset) with keyword overrides, e.g. "
          "Aligner(resolution=1.0, backend='cpu').")
      .def_prop_ro("settings", [](const PyAligner& a) { return a.settings(); }, "the settings in use (a copy)")
      .def_prop_ro("backend", [](const PyAligner& a) { return std::string(a.backend()); })
      .def(
          "set_target",
          [](PyAligner& a, nb::handle target) {
            if (nb::isinstance<VoxelMap>(target)) {
              auto map = nb::cast<std::shared_ptr<VoxelMap>>(target);
              Working working(a.mutex);
              a.set_target(std::shared_ptr<const VoxelMap>(map));
              return;
            }
            CloudArg c(target, "target");
            Working working(a.mutex);
            a.set_target(c.view());
          },
          "target"_a,
          "Builds the target map from a PointCloud or float32 (N, 3) array (read where it lies, not copied), or uses a "
          "VoxelMap.")
      .def_prop_ro("target",
                   [](PyAligner& a) {
                     std::shared_ptr<const VoxelMap> t;
                     {
                       Working working(a.mutex);
                       t = a.target();
                     }
                     return std::const_pointer_cast<VoxelMap>(t);
                   })
      .def(
          "align",
          [](PyAligner& a, nb::handle source, nb::handle guess) {
            CloudArg c(source, "source");
            nb::ndarray<> g;
            if (!guess.is_none() && nb::try_cast(guess, g, false) && g.ndim() == 1) {
              // A pose [x y z roll pitch yaw], used as given (Aligner::align_from_pose), as
              // `ndtcu align --init` does.
              const std::vector<Pose6> p = guesses_arg(guess.attr("reshape")(1, -1), "guess");
              Working working(a.mutex);
              return a.align_from_pose(c.view(), p.front());
            }
            const Eigen::Matrix4d m = guess.is_none() ? Eigen::Matrix4d::Identity() : matrix_arg(guess, "guess");
            Working working(a.mutex);
            return a.align(c.view(), m);
          },
          "source"_a, "guess"_a = nb::none(),
          "Aligns `source` from `guess`: a 4x4 float64 transform (identity by default) or a (6,) float64 pose "
          "[x y z roll pitch yaw] used as given. A float32 (N, 3) array is read where it lies, not copied.")
      .def(
          "evaluate",
          [](PyAligner& a, nb::handle source, nb::handle transform) {
            CloudArg c(source, "source");
            const Eigen::Matrix4d t = matrix_arg(transform, "transform");
            Working working(a.mutex);
            return a.evaluate(c.view(), t);
          },
          "source"_a, "transform"_a, "Scores `source` at a fixed 4x4 pose, without iterating (an array is not copied).")
      .def(
          "align_batch",
          [](PyAligner& a, nb::handle source, nb::handle guesses, bool trace, int max_iterations) {
            CloudArg c(source, "source");
            const std::vector<Pose6> g = guesses_arg(guesses, "guesses");
            BatchOptions o;
            o.trace = trace;
            o.max_iterations = max_iterations;
            Working working(a.mutex);
            return a.align_batch(c.view(), g, o);
          },
          "source"_a, "guesses"_a, "trace"_a = false, "max_iterations"_a = 0,
          "Aligns K hypotheses of one scan as one batch; guesses (K, 4, 4) transforms or (K, 6) poses. Each result "
          "has the bits of align() from that guess. An array is not copied.");

  // --- Initial pose search ----------------------------------------------------------------
  nb::class_<InitialPoseResult>(m, "InitialPoseResult", "What find_initial_pose found; names as `ndtcu initpose --json`.")
      .def_ro("best", &InitialPoseResult::best, "the winning AlignResult")
      .def_prop_ro("xyzrpy", [](const InitialPoseResult& r) { return Eigen::VectorXd(r.best.pose); })
      .def_prop_ro("transform", [](const InitialPoseResult& r) { return Eigen::Matrix4d(r.best.transform); })
      .def_prop_ro("nvtl", [](const InitialPoseResult& r) { return r.best.nvtl; })
      .def_prop_ro("tp", [](const InitialPoseResult& r) { return r.best.tp; })
      .def_prop_ro("score", [](const InitialPoseResult& r) { return r.best.score; })
      .def_prop_ro("converged", [](const InitialPoseResult& r) { return r.best.converged; })
      .def_prop_ro("iterations", [](const InitialPoseResult& r) { return r.best.iterations; })
      .def_ro("hypotheses_aligned", &InitialPoseResult::hypotheses_aligned)
      .def_ro("screened_hypotheses", &InitialPoseResult::screened_hypotheses)
      .def_ro("coarse_hypotheses", &InitialPoseResult::coarse_hypotheses)
      .def_ro("refined_hypotheses", &InitialPoseResult::refined_hypotheses)
      .def_ro("time_ms", &InitialPoseResult::time_ms)
      .def_ro("screen_ms", &InitialPoseResult::screen_ms)
      .def_ro("coarse_ms", &InitialPoseResult::coarse_ms)
      .def_ro("refine_ms", &InitialPoseResult::refine_ms)
      .def_ro("has_rival", &InitialPoseResult::has_rival)
      .def_prop_ro("ambiguity_nvtl",
                   [](const InitialPoseResult& r) -> std::optional<double> {
                     if (!r.has_rival) return std::nullopt;
                     return r.ambiguity_nvtl;
                   })
      .def_prop_ro("rival_xyzrpy",
                   [](const InitialPoseResult& r) -> std::optional<Eigen::VectorXd> {
                     if (!r.has_rival) return std::nullopt;
                     return Eigen::VectorXd(r.rival_pose);
                   })
      .def_ro("ambiguous", &InitialPoseResult::ambiguous)
      .def_ro("leveled_from_ground", &InitialPoseResult::leveled)
      .def(
          "verdict",
          [](const InitialPoseResult& r, double nvtl_threshold) { return std::string(to_string(verdict(r, nvtl_threshold))); },
          "nvtl_threshold"_a = 2.3,
          "'found', 'ambiguous', 'below_threshold', 'not_converged', 'no_overlap' or 'low_overlap'");

  m.def(
      "find_initial_pose",
      [](PyAligner& aligner, nb::handle scan, nb::handle around, double radius, double position_step,
         double yaw_range_deg, double yaw_step_deg, int coarse_iterations, int refine_count, bool level_from_ground) {
        CloudArg c(scan, "scan");
        nb::ndarray<> g;
        // A (6,) pose is used as given (as `ndtcu initpose --around` does); a 4x4 is converted.
        const Pose6 a = nb::try_cast(around, g, false) && g.ndim() == 1
                            ? guesses_arg(around.attr("reshape")(1, -1), "around").front()
                            : matrix_to_pose(matrix_arg(around, "around"));
        InitialPoseOptions o;
        o.radius = radius;
        o.position_step = position_step;
        o.yaw_range_deg = yaw_range_deg;
        o.yaw_step_deg = yaw_step_deg;
        o.coarse_iterations = coarse_iterations;
        o.refine_count = refine_count;
        o.level_from_ground = level_from_ground;
        Working working(aligner.mutex);
        return find_initial_pose(aligner, c.view(), a, o);
      },
      "aligner"_a, "scan"_a, "around"_a, "radius"_a = 2.0, "position_step"_a = 1.0, "yaw_range_deg"_a = 360.0,
      "yaw_step_deg"_a = 15.0, "coarse_iterations"_a = 5, "refine_count"_a = 32, "level_from_ground"_a = false,
      "Sweeps positions within `radius` of `around` (a 4x4 transform or a (6,) pose) and yaws, coarse to fine (see "
      "ndtcu/initial_pose.hpp); the aligner must have a target. A sweep of more than 100,000 hypotheses is refused "
      "(ndtcu.Error naming the count, the values and the limit) before anything is built. An array is not copied "
      "(the coarse pass thins it into a few hundred points of its own).");

  // --- Localizer --------------------------------------------------------------------------
  nb::class_<LocalizerSettings>(m, "LocalizerSettings", "Localizer settings (ndtcu's LocalizerSettings).")
      .def(nb::init<>())
      .def_rw("align", &LocalizerSettings::align, "the NDT settings (AlignSettings)")
      .def_rw("min_range", &LocalizerSettings::min_range)
      .def_rw("max_range", &LocalizerSettings::max_range)
      .def_rw("voxel_leaf", &LocalizerSettings::voxel_leaf)
      .def_rw("min_scan_points", &LocalizerSettings::min_scan_points)
      .def_rw("min_frame_points", &LocalizerSettings::min_frame_points)
      .def_rw("gpu_preprocess", &LocalizerSettings::gpu_preprocess)
      .def_rw("nvtl_threshold", &LocalizerSettings::nvtl_threshold)
      .def_rw("min_matched_ratio", &LocalizerSettings::min_matched_ratio)
      .def_rw("reject_max_iterations", &LocalizerSettings::reject_max_iterations)
      .def_prop_rw(
          "recovery", [](const LocalizerSettings& s) { return std::string(to_string(s.recovery)); },
          [](LocalizerSettings& s, const std::string& v) { s.recovery = recovery_from_string(v); },
          "none|last-good|hypotheses")
      .def_rw("recovery_attempts", &LocalizerSettings::recovery_attempts)
      .def_rw("rotation_search_range_deg", &LocalizerSettings::rotation_search_range_deg)
      .def_rw("rotation_search_step_deg", &LocalizerSettings::rotation_search_step_deg)
      .def_rw("search_radius", &LocalizerSettings::search_radius)
      .def_rw("max_speed", &LocalizerSettings::max_speed)
      .def_rw("max_turn_rate_deg", &LocalizerSettings::max_turn_rate_deg)
      .def_rw("max_search_radius", &LocalizerSettings::max_search_radius)
      .def_rw("search_nvtl_ratio", &LocalizerSettings::search_nvtl_ratio)
      .def_rw("max_prediction_scale", &LocalizerSettings::max_prediction_scale)
      .def_rw("degeneracy_probe_m", &LocalizerSettings::degeneracy_probe_m)
      .def_rw("degeneracy_margin", &LocalizerSettings::degeneracy_margin)
      .def_rw("motion_translation_sigma", &LocalizerSettings::motion_translation_sigma)
      .def_rw("motion_rotation_sigma", &LocalizerSettings::motion_rotation_sigma)
      .def_rw("gate_chi2", &LocalizerSettings::gate_chi2)
      .def_rw("prediction_prior", &LocalizerSettings::prediction_prior)
      .def_rw("regularization_scale_factor", &LocalizerSettings::regularization_scale_factor);

  nb::class_<LocalizationResult>(m, "LocalizationResult", "One frame of Localizer.localize.")
      .def_prop_ro("pose", [](const LocalizationResult& r) { return Eigen::Matrix4d(r.pose); }, "4x4 T_map_sensor")
      .def_prop_ro("xyzrpy", [](const LocalizationResult& r) { return Eigen::VectorXd(matrix_to_pose(r.pose)); })
      .def_ro("valid", &LocalizationResult::valid)
      .def_prop_ro("status", [](const LocalizationResult& r) { return std::string(to_string(r.status)); },
                   "'tracked', 'recovered', 'lost' or 'degenerate'")
      .def_ro("degenerate_directions", &LocalizationResult::degenerate_directions)
      .def_ro("probe_nvtl_drop", &LocalizationResult::probe_nvtl_drop)
      .def_prop_ro("weakest_direction",
                   [](const LocalizationResult& r) { return Eigen::VectorXd(r.weakest_direction); })
      .def_prop_ro("prediction", [](const LocalizationResult& r) { return Eigen::Matrix4d(r.prediction); })
      .def_prop_ro("prediction_covariance",
                   [](const LocalizationResult& r) { return Eigen::Matrix<double, 6, 6>(r.prediction_covariance); })
      .def_ro("mahalanobis2", &LocalizationResult::mahalanobis2)
      .def_prop_ro("decided_by", [](const LocalizationResult& r) { return std::string(r.decided_by); },
                   "which check decided the frame")
      .def_ro("alignment", &LocalizationResult::alignment)
      .def_ro("attempts", &LocalizationResult::attempts)
      .def_ro("hypotheses", &LocalizationResult::hypotheses)
      .def_ro("screened", &LocalizationResult::screened)
      .def_prop_ro("stage", [](const LocalizationResult& r) { return std::string(r.stage); })
      .def_ro("ambiguous", &LocalizationResult::ambiguous)
      .def_ro("ambiguity_nvtl", &LocalizationResult::ambiguity_nvtl)
      .def_ro("iterations_total", &LocalizationResult::iterations_total)
      .def_ro("evaluations", &LocalizationResult::evaluations)
      .def_ro("points_in", &LocalizationResult::points_in)
      .def_ro("points_used", &LocalizationResult::points_used)
      .def_ro("preprocess_ms", &LocalizationResult::preprocess_ms)
      .def_ro("align_ms", &LocalizationResult::align_ms)
      .def_prop_ro("covariance", [](const LocalizationResult& r) { return Eigen::Matrix<double, 6, 6>(r.covariance); });

  nb::class_<PyLocalizer>(m, "Localizer", "Tracks a sensor in a fixed map, one scan at a time.")
      .def(
          "__init__",
          [](PyLocalizer* self, std::optional<LocalizerSettings> settings, const nb::kwargs& kwargs) {
            const LocalizerSettings s = apply_kwargs(settings.value_or(LocalizerSettings{}), kwargs, "Localizer");
            new (self) PyLocalizer(s);
          },
          "settings"_a = nb::none(), "kwargs"_a,
          "Settings from `settings` (default: LocalizerSettings()) with keyword overrides.")
      .def_prop_ro("settings", [](const PyLocalizer& l) { return l.settings(); }, "the settings in use (a copy)")
      .def_prop_ro("backend", [](const PyLocalizer& l) { return std::string(l.backend()); })
      .def(
          "set_map",
          [](PyLocalizer& l, nb::handle map) {
            if (nb::isinstance<VoxelMap>(map)) {
              auto v = nb::cast<std::shared_ptr<VoxelMap>>(map);
              Working working(l.mutex);
              l.set_map(std::shared_ptr<const VoxelMap>(v));
              return;
            }
            CloudArg c(map, "map");
            Working working(l.mutex);
            l.set_map(c.view());
          },
          "map"_a,
          "The map: a PointCloud, a float32 (N, 3) array (world frame; read where it lies, not copied) or a VoxelMap.")
      .def(
          "set_initial_pose",
          [](PyLocalizer& l, nb::handle pose) {
            const Eigen::Matrix4d p = matrix_arg(pose, "pose");
            Working working(l.mutex);
            l.set_initial_pose(p);
          },
          "pose"_a,
          "Starts tracking from the 4x4 T_map_sensor `pose`.")
      .def(
          "set_initial_region",
          [](PyLocalizer& l, nb::handle around, double radius, double yaw_range_deg) {
            const Eigen::Matrix4d a = matrix_arg(around, "around");
            Working working(l.mutex);
            l.set_initial_region(a, radius, yaw_range_deg);
          },
          "around"_a, "radius"_a, "yaw_range_deg"_a = 360.0,
          "Starts tracking with an initial pose search near `around` until a frame is accepted.")
      .def_prop_ro("initialized",
                   [](PyLocalizer& l) {
                     Working working(l.mutex);
                     return l.initialized();
                   })
      .def(
          "localize",
          [](PyLocalizer& l, nb::handle scan, double time, nb::handle prediction, nb::handle covariance) {
            finite_arg(time, "time");
            CloudArg c(scan, "scan");
            if (prediction.is_none() != covariance.is_none()) {
              throw nb::value_error("localize: give prediction and covariance together");
            }
            if (prediction.is_none()) {
              Working working(l.mutex);
              return c.given() ? l.localize(*c.given(), time) : l.localize(c.view(), time);
            }
            const Eigen::Matrix4d p = matrix_arg(prediction, "prediction");
            const auto cov = nb::cast<Eigen::MatrixXd>(covariance);
            if (cov.rows() != 6 || cov.cols() != 6) throw nb::value_error("localize: covariance must be 6x6");
            for (Eigen::Index r = 0; r < 6; ++r) {
              for (Eigen::Index q = 0; q < 6; ++q) {
                if (!std::isfinite(cov(r, q))) {
                  throw nb::value_error(("covariance: non-finite value " + repr_text(cov(r, q)) + " at [" +
                                         std::to_string(r) + ", " + std::to_string(q) + "]")
                                            .c_str());
                }
              }
            }
            const Eigen::Matrix<double, 6, 6> c6 = cov;
            Working working(l.mutex);
            if (c.given()) return l.localize(*c.given(), time, p, c6);
            const PointCloud filtered = l.preprocess(c.view());
            return l.localize_preprocessed(filtered, time, p, c6);
          },
          "scan"_a, "time"_a, "prediction"_a = nb::none(), "covariance"_a = nb::none(),
          "Preprocesses and localizes one scan (sensor frame) taken at `time` (s, finite). The preprocessing crops and "
          "downsamples the scan into a new cloud; an array is read where it lies. With `prediction` (4x4 "
          "T_map_sensor, e.g. from odometry) and its 6x6 `covariance` ([x y z roll pitch yaw]), they replace the "
          "constant-velocity prediction.")
      .def(
          "predict",
          [](PyLocalizer& l, double time) {
            finite_arg(time, "time");
            Eigen::Matrix4d p;
            {
              Working working(l.mutex);
              p = l.predict(time);
            }
            return p;
          },
          "time"_a,
          "The constant-velocity prediction for a scan at `time`.")
      .def_prop_ro("consecutive_lost", [](PyLocalizer& l) {
        Working working(l.mutex);
        return l.consecutive_lost();
      });

  // --- Rosbags ---------------------------------------------------------------------------
  nb::class_<rosbag::BagReader>(m, "BagReader",
                                "Reads sensor_msgs/PointCloud2 messages from ROS 1 .bag files and ROS 2 bags "
                                "(sqlite3 or mcap) without ROS (ndtcu::rosbag).")
      .def(
          "__init__",
          [](rosbag::BagReader* self, nb::handle path_obj) {
            const std::string path = path_arg(path_obj, "path");
            nb::gil_scoped_release release;
            new (self) rosbag::BagReader(path);
          },
          "path"_a,
          "Opens and indexes the bag (a .bag, .mcap or .db3 file, or a folder with metadata.yaml; str, bytes or "
          "os.PathLike).")
      .def_prop_ro("path", [](const rosbag::BagReader& b) { return path_out(b.info().path); },
                   "the path given, as a str (os.fsdecode's for a name that is not UTF-8)")
      .def_prop_ro("format", [](const rosbag::BagReader& b) { return std::string(rosbag::to_string(b.info().format)); })
      .def_prop_ro(
          "topics",
          [](const rosbag::BagReader& b) {
            nb::list out;
            for (const auto& t : b.info().topics) {
              nb::dict d;
              d["name"] = name_out(t.name);
              d["type"] = name_out(t.type);
              d["encoding"] = name_out(t.encoding);
              d["messages"] = t.messages;
              out.append(d);
            }
            return out;
          },
          "[{'name', 'type', 'encoding', 'messages'}], as `ndtcu --json info` lists them; a name that is not UTF-8 "
          "comes as bytes (give it back as bytes to read the topic)")
      .def(
          "point_cloud_topic",
          [](const rosbag::BagReader& b, nb::handle requested) {
            return name_out(b.point_cloud_topic(name_arg(requested, "requested")).name);
          },
          "requested"_a = "",
          "The PointCloud2 topic to read: `requested` (str, or bytes for a name that is not UTF-8), or the bag's only "
          "one.")
      .def(
          "times",
          [](const rosbag::BagReader& b, nb::handle topic) {
            const auto& msgs = b.messages(name_arg(topic, "topic"));
            Eigen::VectorXd t(static_cast<Eigen::Index>(msgs.size()));
            for (std::size_t i = 0; i < msgs.size(); ++i) t(static_cast<Eigen::Index>(i)) = msgs[i].time();
            return t;
          },
          "topic"_a, "Record times (s) of the topic's messages, in time order (the scan times ndtcu localize uses).")
      .def(
          "read_point_cloud",
          [](const rosbag::BagReader& b, nb::handle topic_obj, std::size_t index) {
            const std::string topic = name_arg(topic_obj, "topic");
            nb::gil_scoped_release release;
            return b.read_point_cloud(topic, index);
          },
          "topic"_a, "index"_a, "Decodes message `index` (time order) of a PointCloud2 topic into a PointCloud.");

  m.def(
      "tum_line",
      [](double time, nb::handle pose) {
        StampedPose p;
        p.time = finite_arg(time, "time");
        p.pose = Eigen::Isometry3d(matrix_arg(pose, "pose"));
        std::string line = tum_line(p);
        if (!line.empty() && line.back() == '\n') line.pop_back();
        return line;
      },
      "time"_a, "pose"_a, "The TUM line (t x y z qx qy qz qw) of a 4x4 pose, as ndtcu localize writes it (no newline).");

  m.def("pose_to_matrix", [](const Eigen::Matrix<double, 6, 1>& p) { return Eigen::Matrix4d(pose_to_matrix(p)); }, "xyzrpy"_a,
        "4x4 transform of [x y z roll pitch yaw] (T = Translation * Rx * Ry * Rz)");
  m.def("matrix_to_pose", [](nb::handle t) { return Eigen::VectorXd(matrix_to_pose(matrix_arg(t, "transform"))); },
        "transform"_a, "[x y z roll pitch yaw] of a rigid 4x4 transform");
}
