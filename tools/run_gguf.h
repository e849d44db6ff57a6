// The GGUF a training run started from (sgrt train --init-weights FILE.gguf),
// which its checkpoint records by absolute path and header identity: where a
// command needs that file again (export's tokenizer, a GGUF export's base,
// run's tokenizer), it need not be named a second time. And a command whose
// model is a GGUF's, named directly (--init-weights, with --adapter's LoRA
// adapters): run, export, export-weights.
#pragma once
#include <memory>
#include <string>

#include "args.h"

namespace sgrt {
struct CheckpointMeta;
class Model;
class Session;
}

namespace sgrt::tool {

// Ok when meta.init_file (a checkpoint's record) is still there with the same
// header identity; else why not: "which is gone (...)", "which has changed since (...)".
Status check_init_file(const CheckpointMeta& meta);

// `flag`'s value when given. Otherwise, with --checkpoint DIR, the GGUF its
// run started from, checked to be there and unchanged (an error names the
// file and says to give `flag`); without one, --init-weights FILE.gguf; empty
// when there is neither or the run started from no GGUF. *from_run says
// whether it is the run's (may be null). `otherwise` ends the error's advice
// (" (or --no-tokenizer)").
Status gguf_of_run(const Args& a, const char* flag, std::string* path, bool* from_run = nullptr, const char* otherwise = "");

// Whether the command's weights are --init-weights FILE.gguf's rather than
// --checkpoint's (both at once, or --adapter without a GGUF, is refused,
// naming the command).
Status weights_from_gguf(const Args& a, const char* command, bool* yes);

// The GGUF's model: MODEL.lua compiled with the GGUF's config and --adapter's
// LoRA shape as --set defaults (gguf_config.h).
Status load_gguf_model(Args* a, bool infer_only, std::shared_ptr<const Model>* m);

// Where a command's weights came from, for its report: "step N" (of the
// checkpoint, 0 without one) or "FILE.gguf" / "FILE.gguf with the adapters of A".
std::string weights_source(const Args& a, bool from_gguf, int64_t step);

// Those weights into a new session: Session::init(seed) leaving the GGUF's
// tensors to the import, the GGUF's weights, then --adapter's (sgrt/peft.h's
// import_adapters), when given.
Status init_from_gguf(const Args& a, uint64_t seed, Session& s);

}  // namespace sgrt::tool
