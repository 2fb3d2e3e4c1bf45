// pybind11 side of the call-overhead comparison: the same two functions as
// overhead_nanobind.cpp (the array is taken without a copy: forcecast is not asked for).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>

namespace py = pybind11;

PYBIND11_MODULE(overhead_pybind11, m) {
  m.def("noop", [] {});
  m.def("first_x", [](py::array_t<float, py::array::c_style> a) {
    if (a.ndim() != 2 || a.shape(1) != 3) throw std::invalid_argument("expected an (N, 3) array");
    return a.shape(0) > 0 ? a.data()[0] : 0.0f;
  });
}
