#include "sg_generated.h"
#include "sgrt/dataset.h"

namespace sgrt {

Status open_dataset(const Model& model, const std::string& path, std::unique_ptr<Dataset>* out, const Tokenizer* tokenizer,
                    OwnDataOpener own) {
  const sg::DataBinding* d = model.root().data();
  if (!d || !d->dataset() || d->dataset()->str().empty())
    return Status::Invalid(model.label() + ": declares no data set (sg.data...)");
  std::string name = d->dataset()->str();
  std::string where = !path.empty() ? path : (d->path() && d->path()->size() ? d->path()->str() : "");
  if (name == "fashion_mnist") SG_TRY(open_fashion_mnist(where.empty() ? kFashionMnistDir : where, out));
  else if (name == "text") SG_TRY(open_text_dataset(where.empty() ? kDefaultCorpus : where, model, out));
  else if (name == "instruct" && where.empty()) return Status::Invalid(model.label() + ": the instruct data set needs --data FILE.jsonl");
  else if (name == "instruct") SG_TRY(open_instruct_dataset(where, model, tokenizer, out));
  else if (bool mine = name == "csv" || name == "npy" || name == "images"; mine && where.empty())
    return Status::Invalid(model.label() + ": sg.data." + name + " needs path = ... or --data " + (name == "images" ? "DIR" : "FILE"));
  else if (mine && !own)
    return Status::Invalid(model.label() + ": sg.data." + name + " is read by the sgrt_data library (the sgrt tool), not libsgrt alone");
  else if (mine) SG_TRY(own(model, where, out));
  else return Status::Invalid(model.label() + ": unknown data set '" + name + "'");
  if (d->fields())
    for (const sg::DataField* f : *d->fields())
      SG_TRY((*out)->check_field(f->field()->str(), model.tensors()[f->tensor()]).with_context(model.label()));
  return Status::Ok();
}

}  // namespace sgrt
