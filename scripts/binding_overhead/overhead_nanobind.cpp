// nanobind side of the call-overhead comparison: a function of nothing, and one that
// takes a C-contiguous float32 (N, 3) array without copying it.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

namespace nb = nanobind;

NB_MODULE(overhead_nanobind, m) {
  m.def("noop", [] {});
  m.def("first_x", [](nb::ndarray<const float, nb::numpy, nb::shape<-1, 3>, nb::c_contig, nb::device::cpu> a) {
    return a.shape(0) > 0 ? a.data()[0] : 0.0f;
  });
}
