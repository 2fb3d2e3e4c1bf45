#pragma once
// What the files of the Python module share: the argument checks (points, paths, names,
// transforms, guesses, settings as keyword arguments), results as dicts, the locked
// Aligner and Localizer, and the define_*() function of each file, which module.cpp calls.
#include <ndtcu/aligner.hpp>
#include <ndtcu/cuda_device.hpp>
#include <ndtcu/error.hpp>
#include <ndtcu/fields.hpp>
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
#include <limits>
#include <deque>
#include <type_traits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace ndtcu::python {

// A dtype as numpy spells it, for messages.
std::string dtype_name(const nb::dlpack::dtype& d);

template <typename... Config>
std::string shape_text(const nb::ndarray<Config...>& a) {
  std::string s = "(";
  for (std::size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// A number as Python writes it (nan, inf, 1e-09), for messages.
std::string repr_text(double v);

// A time or another scalar that must be finite: a ValueError naming the argument
// otherwise (a NaN time was taken, and predicted from, without a word).
double finite_arg(double v, const char* name);

// A path argument: str, bytes or os.PathLike (pathlib.Path), as os.fsencode spells it in
// bytes: a str through the file-system encoding (a name that is not UTF-8, as os.listdir
// gives it, comes back to its own bytes), bytes as they are.
std::string path_arg(nb::handle obj, const char* name);

// A path for Python: a str as os.fsdecode makes it (a name that is not UTF-8 keeps its
// bytes as surrogates, and path_arg gives them back).
nb::object path_out(const std::string& path);

// A name from a bag (topic, message type, encoding): a str when it is UTF-8, as ROS
// requires, else its bytes as the bag holds them (decoded as text, such a topic raised
// UnicodeDecodeError and could be neither listed nor read). Given back as bytes, it
// reaches the topic.
nb::object name_out(const std::string& name);

// A topic argument: a str (UTF-8) or the bytes of a name (as name_out gives a name that
// is not UTF-8).
std::string name_arg(nb::handle obj, const char* name);

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
Eigen::Matrix4d matrix_arg(nb::handle obj, const char* name);

// Guesses: a (K, 4, 4) float64 array of transforms, or a (K, 6) one of poses
// [x y z roll pitch yaw].
std::vector<Pose6> guesses_arg(nb::handle obj, const char* name);

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

// Settings and how the work runs, given as keyword arguments together (Aligner(resolution=1.0,
// backend="cpu")): each key is set on a copy of `base` when it is one of its attributes,
// else on a copy of `execution` when it is one of ExecutionOptions' (backend, threads,
// device, gpu_loop), else a TypeError names it.
template <typename Settings>
std::pair<Settings, ExecutionOptions> apply_kwargs(const Settings& base, const ExecutionOptions& execution,
                                                   const nb::kwargs& kwargs, const char* what) {
  nb::object s = nb::cast(base, nb::rv_policy::copy);
  nb::object e = nb::cast(execution, nb::rv_policy::copy);
  for (auto [key, value] : kwargs) {
    if (nb::hasattr(s, key)) {
      nb::setattr(s, key, value);
    } else if (nb::hasattr(e, key)) {
      nb::setattr(e, key, value);
    } else {
      throw nb::type_error((std::string(what) + ": unknown setting '" + nb::cast<std::string>(key) + "'").c_str());
    }
  }
  return {nb::cast<Settings>(s), nb::cast<ExecutionOptions>(e)};
}

// The alignment's trace as a list of dicts, as the CLI's JSON "trace".
nb::list trace_list(const AlignResult& r);

// Localizability as a dict with the CLI's JSON names (condition None when infinite).
nb::dict localizability_dict(const Localizability& l);

// AlignResult as a dict with the CLI's JSON names.
nb::dict result_dict(const AlignResult& r);

// An enum setting exposed as its name (the CLI's spelling), set from a name.
template <typename S, typename E>
void enum_setting(nb::class_<S>& cls, const char* name, E S::*member, E (*parse)(const std::string&), const char* doc) {
  cls.def_prop_rw(
      name, [member](const S& s) { return std::string(to_string(s.*member)); },
      [member, parse](S& s, const std::string& v) { s.*member = parse(v); }, doc);
}

// A docstring kept for the life of the module (nanobind keeps the pointer of some).
inline const char* kept_doc(std::string doc) {
  static std::deque<std::string> docs;
  docs.push_back(std::move(doc));
  return docs.back().c_str();
}

// An integer setting's value from Python: an int (or anything with __index__, a numpy
// integer) that the field's C++ type holds, else a ValueError naming the field and its
// range (`range`, else the type's): max_iterations=2**40 gave nanobind's TypeError
// "incompatible function arguments". Not an integer: a TypeError naming the field. A value
// the type holds but the range does not is refused where the settings are validated.
template <typename T>
T integer_setting(nb::handle value, const char* name, const FieldRange& range) {
  if (PyFloat_Check(value.ptr()) || !PyIndex_Check(value.ptr())) {
    throw nb::type_error((std::string(name) + ": expected an integer, got " + nb::type_name(value.type()).c_str()).c_str());
  }
  nb::object index = nb::steal(PyNumber_Index(value.ptr()));
  if (!index.is_valid()) throw nb::python_error();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  const bool fits =
      overflow == 0 &&
      (v < 0 ? std::numeric_limits<T>::is_signed && v >= static_cast<long long>(std::numeric_limits<T>::min())
             : static_cast<unsigned long long>(v) <= static_cast<unsigned long long>(std::numeric_limits<T>::max()));
  if (!fits) {  // in the type but out of the field's range: validate() names it, as for C++ callers
    const std::string allowed = range.bounded() ? range.text()
                                                : "in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                                                      std::to_string(std::numeric_limits<T>::max()) + "]";
    throw nb::value_error((std::string(name) + ": " + nb::cast<std::string>(nb::repr(index)) + " is out of range; it must be " +
                           allowed)
                              .c_str());
  }
  return static_cast<T>(v);
}

// One read-write attribute per field of the settings struct S (ndtcu/fields.hpp): numbers
// and flags as they are (integers checked against their field's range as they are set),
// enums by name. Keyword arguments (apply_kwargs) set the same.
template <typename S>
void def_settings_fields(nb::class_<S>& cls) {
  visit_fields<S>([&](const auto& f) {
    using T = typename std::decay_t<decltype(f)>::Type;
    if constexpr (std::is_enum_v<T>) {
      std::string names;
      for (const std::string& n : enum_names<T>()) names += (names.empty() ? "" : "|") + n;
      enum_setting(cls, f.name, f.member, &EnumValues<T>::parse, kept_doc(std::string(f.doc) + ": " + names));
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const char* name = f.name;
      const FieldRange range = f.range;
      auto member = f.member;
      cls.def_prop_rw(
          name, [member](const S& s) { return s.*member; },
          [member, name, range](S& s, nb::handle v) { s.*member = integer_setting<T>(v, name, range); }, f.doc);
    } else {
      cls.def_rw(f.name, f.member, f.doc);
    }
  });
}

// "Type(name=repr, ...)" of every field of S, then the attributes `extra` names, as
// keywords the constructors take.
template <typename S>
std::string fields_repr(nb::handle self, const char* type, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> names = field_names<S>();
  names.insert(names.end(), extra.begin(), extra.end());
  std::string out = std::string(type) + "(";
  bool first = true;
  for (const std::string& n : names) {
    out += (first ? "" : ", ") + n + "=" + nb::cast<std::string>(nb::repr(self.attr(n.c_str())));
    first = false;
  }
  return out + ")";
}

// One read-only attribute per AlignResult field: matrices as numpy arrays, enums by name.
void def_result_fields(nb::class_<AlignResult>& cls);

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

// Each registers one concept's classes and functions on the module `m` (module.cpp calls
// them in this order: a type is registered before a default argument holds one).
void define_errors(nb::module_& m);
void define_devices(nb::module_& m);
void define_cloud(nb::module_& m);
void define_settings(nb::module_& m);
void define_align_result(nb::module_& m);
void define_aligner(nb::module_& m);
void define_map(nb::module_& m);
void define_initial_pose(nb::module_& m);
void define_localizer_settings(nb::module_& m);
void define_localizer(nb::module_& m);
void define_rosbag(nb::module_& m);
void define_pose(nb::module_& m);
void define_command(nb::module_& m);  // command.cpp: run_command, check_command
void define_scan_matcher(nb::module_& m);  // scan_matcher.cpp: the ROS 2 node's work (ndtcu.ros2)

}  // namespace ndtcu::python
