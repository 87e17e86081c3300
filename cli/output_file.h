// Output files that appear only when everything succeeded. The content goes to a temporary file in the
// destination's directory; Commit() renames it over the destination, so an existing file is replaced
// atomically and is left untouched when the program fails before committing.
#ifndef FLASHATTN_CLI_OUTPUT_FILE_H_
#define FLASHATTN_CLI_OUTPUT_FILE_H_

#include <string>
#include <string_view>

namespace flashattn::cli {

class PendingFile {
 public:
  // Creates the temporary file; throws std::runtime_error naming `argument` and `path` if it cannot.
  PendingFile(std::string path, std::string argument);
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  // Removes the temporary file unless it was committed.
  ~PendingFile();

  void Write(std::string_view bytes);
  // Flushes, closes and renames the temporary file to the destination.
  void Commit();

 private:
  [[noreturn]] void Fail(std::string_view what) const;

  std::string path_, argument_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace flashattn::cli

#endif  // FLASHATTN_CLI_OUTPUT_FILE_H_
