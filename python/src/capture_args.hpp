// python/src/capture_args.hpp: what a bare capture lacks, as the Python module's keywords give
// it (load_trace, bias_test(traces=...)): the CLI's --source --model --scale --causal --dtype
// --layout (tools/capture_options.cpp), checked with the keywords' names.
//
// Contract: each optional given is checked (ValueError naming the keyword) and set; `layout`
// is auto, bhsd or bshd. The notes the reader gives (an assumed alignment, a layout read) are
// appended to `notes`, under a lock: bias_test reads its traces in threads. `notes` must
// outlive every use of the options returned.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "traces/capture_import.hpp"

namespace fb::py {

struct CollectedNotes {
  std::mutex lock;
  std::vector<std::string> lines;
};

CaptureOptions capture_options_from(const std::optional<std::string>& source, const std::optional<std::string>& model,
                                    std::optional<double> scale, const std::optional<std::string>& causal,
                                    const std::optional<std::string>& dtype, const std::string& layout,
                                    CollectedNotes& notes);

}  // namespace fb::py
