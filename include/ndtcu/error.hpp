#pragma once
/// \file
/// Exceptions thrown at ndtcu's API boundary for misuse and bad input. Not converging is
/// a result, never an exception.
///
/// Messages are safe to print on a terminal: text from a file or a user that they quote
/// (a path, a field name, a token) cannot carry terminal commands (see printable()).

#include <ndtcu/text.hpp>

#include <stdexcept>
#include <string>

namespace ndtcu {

/// Base of every exception ndtcu throws; the message says what to fix.
class Error : public std::runtime_error {
 public:
  /// Wraps a message a person can act on (which file, which field, which value). Control
  /// characters other than newline and tab are escaped (printable_lines()).
  explicit Error(const std::string& message) : std::runtime_error(printable_lines(message)) {}
};

/// A point-cloud or pose file that cannot be read or written.
class IoError : public Error {
 public:
  /// `path` is the file concerned; `what_is_wrong` the reason, without the path. The
  /// message shows the path through printable() (a newline in a file name included).
  IoError(std::string path, const std::string& what_is_wrong)
      : Error(printable(path) + ": " + what_is_wrong), path_(std::move(path)), reason_(printable_lines(what_is_wrong)) {}
  /// The file the error is about, as given (its bytes unchanged).
  const std::string& path() const noexcept { return path_; }
  /// The reason, without the path (control characters escaped as in what()).
  const std::string& reason() const noexcept { return reason_; }

 private:
  std::string path_;
  std::string reason_;
};

/// A CUDA runtime failure, or a CUDA request in a build or on a machine without CUDA.
class CudaError : public Error {
 public:
  /// Wraps a message that names the call, the CUDA error and the place it happened.
  explicit CudaError(const std::string& message) : Error(message) {}
};

}  // namespace ndtcu
