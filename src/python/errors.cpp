// The Python module: Python exceptions for ndtcu::Error, IoError and CudaError, and the translator to them.
#include "common.hpp"

using namespace nb::literals;

namespace ndtcu::python {

void define_errors(nb::module_& m) {
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
}

}  // namespace ndtcu::python
