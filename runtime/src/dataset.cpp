#include "sg_generated.h"
#include "sgrt/dataset.h"
#include "sgrt/own_data.h"

namespace sgrt {
namespace {

// sg.data.csv and sg.data.npy: read whole, then served from memory.
Status open_table(const std::string& name, const std::string& path, const Model& model, std::unique_ptr<Dataset>* out) {
  ExampleTable t;
  if (name == "npy") {
    SG_TRY(read_npy_examples(path, model, &t));
  } else {
    CsvOptions o;
    SG_TRY(csv_options(model, &o));
    const TensorInfo* x = bound_input(model, "features");
    if (!x) return Status::Invalid(model.label() + ": sg.data.csv binds no features input");
    SG_TRY(read_csv(path, o, *x, bound_input(model, "label"), &t));
  }
  return open_example_dataset(std::move(t), "features", out).with_context(path);
}

}  // namespace

Status open_dataset(const Model& model, const std::string& path, std::unique_ptr<Dataset>* out, const Tokenizer* tokenizer,
                    ImageDatasetOpener images) {
  const sg::DataBinding* d = model.root().data();
  if (!d || !d->dataset() || d->dataset()->str().empty())
    return Status::Invalid(model.label() + ": declares no data set (sg.data...)");
  std::string name = d->dataset()->str();
  std::string where = !path.empty() ? path : (d->path() && d->path()->size() ? d->path()->str() : "");
  if (name == "fashion_mnist") SG_TRY(open_fashion_mnist(where.empty() ? kFashionMnistDir : where, out));
  else if (name == "text") SG_TRY(open_text_dataset(where.empty() ? kDefaultCorpus : where, model, out));
  else if (name == "instruct" && where.empty()) return Status::Invalid(model.label() + ": the instruct data set needs --data FILE.jsonl");
  else if (name == "instruct") SG_TRY(open_instruct_dataset(where, model, tokenizer, out));
  else if ((name == "csv" || name == "npy" || name == "images") && where.empty())
    return Status::Invalid(model.label() + ": sg.data." + name + " needs path = ... or --data " + (name == "images" ? "DIR" : "FILE"));
  else if (name == "csv" || name == "npy") SG_TRY(open_table(name, where, model, out));
  else if (name == "images" && !images)
    return Status::Invalid(model.label() + ": image folders are read by the sgrt tool (libsgrt has no image decoders)");
  else if (name == "images") SG_TRY(images(model, where, out));
  else return Status::Invalid(model.label() + ": unknown data set '" + name + "'");
  if (d->fields())
    for (const sg::DataField* f : *d->fields())
      SG_TRY((*out)->check_field(f->field()->str(), model.tensors()[f->tensor()]).with_context(model.label()));
  return Status::Ok();
}

}  // namespace sgrt
