// Training and evaluation data, gathered into a model's input tensors.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "sgrt/model.h"
#include "sgrt/tokenizer.h"

namespace sgrt {

enum class Split { train, test };

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size(Split s) const = 0;
  // Writes examples indices[0..n) of `field` into dst, laid out as tensor t
  // (t's first dimension is the batch).
  virtual Status gather(Split s, const int64_t* indices, int64_t n, const std::string& field, const TensorInfo& t,
                        void* dst) const = 0;
  // Fails when the tensor cannot hold this field (wrong dtype or example size).
  virtual Status check_field(const std::string& field, const TensorInfo& t) const = 0;
};

// Holds out the last `fraction` of data's training examples for evaluation
// during training. *train trains on the rest (its test split is data's own);
// *validation's test split is the held-out part, thinned to at most
// max_examples evenly spaced examples (a text corpus has one window per byte,
// mostly overlapping). Text windows at the boundary share up to a block of bytes.
Status split_validation(std::shared_ptr<const Dataset> data, double fraction, int64_t max_examples,
                        std::unique_ptr<Dataset>* train, std::unique_ptr<Dataset>* validation);

// Opens a user's own data (sg.data.csv, npy, images) at path: open_own_dataset
// of the sgrt_data library (sgrt/own_data.h), which the sgrt tool links and
// libsgrt leaves out.
using OwnDataOpener = Status (*)(const Model& model, const std::string& path, std::unique_ptr<Dataset>* out);

// The data set a model's DataBinding names; `path` overrides its location.
// `tokenizer`: the model's, for data sets of text in its tokens (instruct).
Status open_dataset(const Model& model, const std::string& path, std::unique_ptr<Dataset>* out,
                    const Tokenizer* tokenizer = nullptr, OwnDataOpener own = nullptr);

// Fashion-MNIST from IDX files (gzip or plain): train-* and t10k-* in `dir`.
Status open_fashion_mnist(const std::string& dir, std::unique_ptr<Dataset>* out);
constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Byte-level text (plain or gzip'd), split 90/10 into train and validation.
// Fields "tokens" and "targets", i32 [batch, block]: the window's bytes and the
// same bytes shifted by one. Train examples are every window start (the trainer
// shuffles them: seeded random windows); validation is a fixed set of
// non-overlapping windows. The block comes from the model's bound inputs.
Status open_text_dataset(const std::string& path, const Model& model, std::unique_ptr<Dataset>* out);
// The default corpus: The Jargon File, Debian's jargon-text package.
constexpr const char* kDefaultCorpus = "/usr/share/doc/jargon-text/jargon.txt.gz";

// JSON-lines instruction data (docs/lora.md): one conversation a line,
// {"prompt": ..., "response": ...} (optional "system") or {"messages": [{"role":
// "system"|"user"|"assistant", "content": ...}, ...]}, rendered with the
// tokenizer's chat template and tokenized. Fields, [batch, block]: "tokens" and
// "targets" i32 (the ids and the ids shifted by one), "mask" f32 (1 where the
// target is an assistant's content or turn end, else 0); one example a row,
// cut to block + 1 ids, padded with EOS under mask 0. The last tenth (at least
// one) is the test split. A bad line is an error naming path:line.
Status open_instruct_dataset(const std::string& path, const Model& model, const Tokenizer* tokenizer,
                             std::unique_ptr<Dataset>* out);

}  // namespace sgrt
