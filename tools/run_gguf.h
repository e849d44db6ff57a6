// The GGUF a training run started from (sgrt train --init-weights FILE.gguf),
// which its checkpoint records by absolute path and header identity: where a
// command needs that file again (export's tokenizer, a GGUF export's base,
// run's tokenizer), it need not be named a second time.
#pragma once
#include <string>

#include "args.h"

namespace sgrt {
struct CheckpointMeta;
}

namespace sgrt::tool {

// Ok when meta.init_file (a checkpoint's record) is still there with the same
// header identity; else why not: "which is gone (...)", "which has changed since (...)".
Status check_init_file(const CheckpointMeta& meta);

// `flag`'s value when given. Otherwise, with --checkpoint DIR, the GGUF its
// run started from, checked to be there and unchanged (an error names the
// file and says to give `flag`); empty when there is no checkpoint or its run
// started from no GGUF. *from_run says which (may be null). `otherwise` ends
// the error's advice (" (or --no-tokenizer)").
Status gguf_of_run(const Args& a, const char* flag, std::string* path, bool* from_run = nullptr, const char* otherwise = "");

}  // namespace sgrt::tool
