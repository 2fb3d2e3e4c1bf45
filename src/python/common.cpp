// The Python module's shared argument checks and result dicts.
#include "common.hpp"

namespace ndtcu::python {

std::string dtype_name(const nb::dlpack::dtype& d) {
  const char* kind = d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Float)  ? "float"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Int)  ? "int"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt) ? "uint"
                     : d.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::Bool) ? "bool"
                                                                                         : "complex";
  return std::string(kind) + std::to_string(d.bits);
}

std::string repr_text(double v) { return nb::cast<std::string>(nb::repr(nb::float_(v))); }

double finite_arg(double v, const char* name) {
  if (!std::isfinite(v)) {
    throw nb::value_error((std::string(name) + ": expected a finite number, got " + repr_text(v)).c_str());
  }
  return v;
}

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

nb::object path_out(const std::string& path) {
  PyObject* s = PyUnicode_DecodeFSDefaultAndSize(path.data(), static_cast<Py_ssize_t>(path.size()));
  if (!s) throw nb::python_error();
  return nb::steal(s);
}

nb::object name_out(const std::string& name) {
  PyObject* s = PyUnicode_DecodeUTF8(name.data(), static_cast<Py_ssize_t>(name.size()), "strict");
  if (s) return nb::steal(s);
  PyErr_Clear();
  return nb::steal(PyBytes_FromStringAndSize(name.data(), static_cast<Py_ssize_t>(name.size())));
}

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

nb::dict result_dict(const AlignResult& r) {
  // Every listed field (as its attribute gives it), then the derived ones.
  nb::object self = nb::cast(r, nb::rv_policy::reference);
  nb::dict d;
  for (const std::string& name : field_names<AlignResult>()) d[name.c_str()] = self.attr(name.c_str());
  d["localizability"] = localizability_dict(r.localizability);
  d["time_ms"] = r.timings.total_ms;
  d["per_iteration_ms"] = r.timings.per_iteration_ms;
  d["evaluations"] = r.timings.evaluations;
  d["trace"] = trace_list(r);
  d["covariance_ms"] = r.timings.covariance_ms;
  return d;
}

}  // namespace ndtcu::python
