// api/output_file.hpp: files a face writes for the user, written whole or not at all, and
// never over one of the run's inputs.
//
// Contract: every function throws InputError (one line naming the option or path and why) on
// failure; on failure no partial file stands where a complete one is claimed.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/input_error.hpp"

namespace fb::api {

// Writes `content` to `path` whole or not at all. A regular file (or a new one) is written to
// a temporary file in the same directory, flushed and closed with every error checked, then
// renamed over `path`; on any failure the temporary is removed and `path` is left as it was.
// A path naming something other than a regular file (a device such as /dev/full or
// /dev/stdout, a pipe) cannot be renamed into: it is written directly, and the write, flush
// and close are checked. Throws InputError "PATH: cannot write WHAT: REASON" (exit 2).
void write_output_file(const std::string& path, std::string_view content, std::string_view what);
// Refuses (InputError, exit 2) an output path that names one of the inputs (or another
// output): the same file by std::filesystem::equivalent when both exist, else the same
// weakly_canonical path. `inputs`: (option or role, path) pairs; empty paths are skipped.
void refuse_output_over_inputs(std::string_view output_option, const std::string& output,
                               const std::vector<std::pair<std::string, std::string>>& inputs);
// Checks an output option's path before any work is done, so that a run never computes for
// an hour to find its output unwritable: the directory it would be written in exists, is a
// directory and is writable, and the path is not a directory (an existing device or pipe must
// be writable). "-" is standard output where `stdout_allowed` (sweep and merge --csv); for
// other options it is refused (a file named - is written as ./-). An empty path is an option
// not given and passes. A name ending in .npy or .npz is refused: flashbits writes no numpy
// file, and a plot or trace written as DIR/out.npy would become a tensor of the folder capture
// DIR. Throws InputError "OPTION PATH: ..." (exit 2). write_output_file still
// checks every write: the disk may fill up meanwhile.
void check_output_path(std::string_view option, const std::string& path, bool stdout_allowed = false);

}  // namespace fb::api
