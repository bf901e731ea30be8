// File checks: what a path names, inputs opened so they cannot block, output paths checked before the work that
// produces them, and temporary names unique to their writer. Every error is kIo naming `what` (a flag such as "--data",
// or "token file"), the path, and its type or the system error.
#pragma once

#include <cstddef>
#include <string>

namespace strata {

// "regular file", "directory", "FIFO", "socket", "character device", "block device", "symbolic link" or "unknown
// file type", for a stat() st_mode.
const char* file_type_name(unsigned mode);

// Opens `path` read-only and returns the descriptor (close-on-exec). The open is O_NONBLOCK, cleared once the file is
// known to be regular: a FIFO with no writer would otherwise block the caller forever. A FIFO, directory, socket or
// device is refused, naming its type.
int open_input_file(const std::string& path, const std::string& what);
// The same without throwing: -1 and `problem` set to the message (for a caller that throws from its own place).
int try_open_input_file(const std::string& path, const std::string& what, std::string& problem);
// The same check, closing the file again (for a flag checked before its reader runs).
void check_input_file(const std::string& path, const std::string& what);
// The whole of an input file as bytes (open_input_file, then bounded reads). A file of more than `max_bytes` is
// refused before anything is read, naming its size and the bound.
std::string read_input_file(const std::string& path, const std::string& what,
                            std::size_t max_bytes = static_cast<std::size_t>(-1));

// How the writer of an output file commits it.
enum class OutputKind {
  kReplaced,  // a temporary beside it, renamed over it: `path` must be a regular file or absent
  kDirect,    // written in place: a regular file, a character device (/dev/null) or a FIFO with a reader
};

// Checks, before anything is computed for it, that a file can be written at `path`: its directory exists, is a
// directory and is writable; `path` is not a directory; an existing file is writable and of a kind `kind` allows.
// Nothing is created.
void check_output_file(const std::string& path, const std::string& what, OutputKind kind);
// A directory that will be written into: created with its parents when missing; it must then be a writable directory.
void prepare_output_dir(const std::string& path, const std::string& what);

// "host.pid" of this process.
std::string process_tag();
// `path` + ".tmp." + `writer`: the temporary file of `writer` (writers that share one file pass the same string).
std::string tmp_path_for(const std::string& path, const std::string& writer);
// A temporary beside `path` that no other writer uses: tmp_path_for(path, "host.pid.n"), n counting the calls in this
// process, so two writers of one path, in one process or two, never share a temporary file.
std::string unique_tmp_path(const std::string& path);

}  // namespace strata
