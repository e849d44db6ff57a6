// `sgrt export`: a deployable graph with the checkpoint's weights folded in
// (runtime/include/sgrt/export.h does the work; the C API exposes the same).
#include <cstdio>

#include "commands.h"
#include "model_source.h"
#include "sgrt/checkpoint.h"
#include "sgrt/export.h"

namespace sgrt::tool {

Status cmd_export(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  if (!a.has("--output")) return Status::Invalid("export needs -o DEPLOY.sg");
  ExportOptions opts;
  opts.merge_lora = a.has("--merge");
  opts.infer_only = a.has("--infer-only") || opts.merge_lora;
  SG_TRY(parse_export_quant(a.get("--quantize"), &opts.quantize).with_context("--quantize"));
  std::shared_ptr<const Model> m;
  SG_TRY(load_checkpoint_model(&a, "MODEL.sg (or MODEL.lua)", &m));
  if (!a.has("--checkpoint") && !carries_weights(*m))
    return Status::Invalid(m->label() + ": export needs --checkpoint DIR (its weights are not in the file)");
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend("cpu", &be));
  std::unique_ptr<Session> s;
  SG_TRY(Session::create(m, std::move(be), &s));
  SG_TRY(s->init(0, 0));
  int64_t step = 0;
  if (a.has("--checkpoint")) SG_TRY(load_checkpoint(*s, a.get("--checkpoint"), &step));
  SG_TRY(export_to_file(*s, opts, a.get("--output")));
  std::printf("exported %s (step %lld%s%s%s%s) to %s\n", m->label().c_str(), static_cast<long long>(step),
              opts.infer_only ? ", inference only" : "", opts.merge_lora ? ", adapters merged" : "", a.has("--quantize") ? ", weights " : "",
              a.get("--quantize").c_str(), a.get("--output").c_str());
  return Status::Ok();
}

}  // namespace sgrt::tool
