#pragma once
/// \file
/// Files written whole or not at all. Every file ndtcu writes (point clouds, trajectories,
/// tiled maps, the simulator's sequences, the command-line tool's results) goes through
/// OutputFile: the bytes go to a new temporary file in the destination's folder, and a
/// rename puts it in place once it is complete. A reader of the destination sees its old
/// content or all of the new one, never a part; a writer stopped half-way (killed, an
/// error) leaves the destination as it was.
///
/// The destination is never opened: the rename replaces whatever entry it is, a symbolic
/// link included (the link goes, its target is untouched), so no output is written
/// through a link planted in its place.

#include <cstddef>
#include <string>
#include <string_view>

namespace ndtcu {

/// A file being written whole: created as a temporary file beside `path`, renamed onto
/// `path` by commit(). Failures throw IoError naming `path`. Move-only; one thread at a time.
class OutputFile {
 public:
  /// Creates the temporary file in `path`'s folder (which must exist). Its name is the
  /// destination's, hidden, with ".ndtcu-tmp.PID.N" appended (is_output_temporary()).
  explicit OutputFile(std::string path);
  /// Removes the temporary file unless commit() succeeded; never throws.
  ~OutputFile();
  /// Moves the file being written; `other` is left empty (its destructor does nothing).
  OutputFile(OutputFile&& other) noexcept;
  /// Drops this file (as the destructor does) and takes `other`'s.
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// Appends `size` bytes (buffered).
  void write(const void* data, std::size_t size);
  /// Appends `text` (buffered).
  void write(std::string_view text);
  /// Hands the buffered bytes to the temporary file (a reader of that file sees them;
  /// the destination does not change).
  void flush();
  /// Flushes, closes and renames the temporary file onto the destination. After it, the
  /// destination holds exactly the bytes written; a failure leaves the destination as it
  /// was and removes the temporary file.
  void commit();

  /// The destination.
  const std::string& path() const noexcept { return path_; }
  /// The temporary file the bytes go to until commit().
  const std::string& temporary_path() const noexcept { return temporary_; }
  /// Whether commit() has put the file in place.
  bool committed() const noexcept { return committed_; }

 private:
  void discard() noexcept;

  std::string path_, temporary_, buffer_;
  int fd_ = -1;
  bool committed_ = false;
};

/// Writes `bytes` to `path` whole (through an OutputFile).
void write_file_whole(const std::string& path, std::string_view bytes);

/// Whether `file_name` (a name, not a path) is an OutputFile's temporary file: one left by
/// a writer that was killed before its commit, safe to remove when nothing writes into
/// the folder.
bool is_output_temporary(std::string_view file_name);

}  // namespace ndtcu
