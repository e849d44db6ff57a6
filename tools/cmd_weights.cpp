// `sgrt export-weights`: a model's parameters (from a checkpoint, or as
// initialized) to a safetensors file, by name; with --peft its LoRA adapters
// to a PEFT adapter folder (sgrt/peft.h); with -o FILE.gguf a llama GGUF
// (sgrt/gguf_export.h). Without a checkpoint, a script's weights may be a
// GGUF's (--init-weights, with --adapter's LoRA adapters: a conversion between
// adapter formats, or a merged GGUF). The other direction is `sgrt train --init-weights`
// (sgrt/safetensors.h, sgrt/gguf_weights.h).
#include <cstdio>

#include "commands.h"
#include "model_source.h"
#include "run_gguf.h"
#include "sgrt/checkpoint.h"
#include "sgrt/gguf_export.h"
#include "sgrt/peft.h"
#include "sgrt/safetensors.h"

namespace sgrt::tool {
namespace {

// The GGUF-only options against the output's kind, before any work.
// *base: --gguf-base, or by default the GGUF the checkpoint's run started from.
Status check_gguf_options(const Args& a, bool gguf, DType dtype, std::string* base) {
  if (gguf) {
    if (a.has("--peft") || a.has("--trained")) return Status::Invalid("a GGUF holds the whole model: leave out --peft and --trained");
    SG_TRY(gguf_of_run(a, "--gguf-base", base));
    if (base->empty())
      return Status::Invalid("-o FILE.gguf needs --gguf-base BASE.gguf (the GGUF the model came from)" +
                             std::string(a.has("--checkpoint") ? "; " + a.get("--checkpoint") + "'s run did not start from one" : ""));
    return Status::Ok();
  }
  for (const char* flag : {"--gguf-base", "--merge"})
    if (a.has(flag)) return Status::Invalid(std::string(flag) + " writes a GGUF: give -o FILE.gguf (a merged .sg: sgrt export --merge)");
  if (dtype == DType::q8_0) return Status::Invalid("--dtype q8_0 is for a GGUF's matrices (-o FILE.gguf)");
  return Status::Ok();
}

}  // namespace

Status cmd_export_weights(int argc, char** argv) {
  Args a;
  SG_TRY(parse_command(argc, argv, &a));
  if (!a.has("--output")) return Status::Invalid("export-weights needs -o W.safetensors (or -o FILE.gguf)");
  const std::string out = a.get("--output");
  const bool gguf = out.ends_with(".gguf");
  DType dtype;
  std::string dname = a.get("--dtype", "f32");
  if (!dtype_from_name(dname.c_str(), &dtype) ||
      (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16 && dtype != DType::q8_0))
    return Status::Invalid("--dtype takes f32, f16, bf16 or (a GGUF's matrices) q8_0, not '" + dname + "'");
  std::string base;
  SG_TRY(check_gguf_options(a, gguf, dtype, &base));
  int64_t seed;
  SG_TRY(a.get_int("--seed", 1, &seed));
  std::shared_ptr<const Model> m;
  bool gguf_model = false;  // --init-weights FILE.gguf (and --adapter) instead of a checkpoint
  SG_TRY(weights_from_gguf(a, "export-weights", &gguf_model));
  if (gguf_model) {
    SG_TRY(load_gguf_model(&a, /*infer_only=*/false, &m));
  } else {
    SG_TRY(load_checkpoint_model(&a, "MODEL.sg (or MODEL.lua)", &m));
  }
  std::unique_ptr<Backend> be;
  SG_TRY(make_backend("cpu", &be));
  std::unique_ptr<Session> s;
  SG_TRY(Session::create(m, std::move(be), &s));
  if (gguf_model) SG_TRY(init_from_gguf(a, static_cast<uint64_t>(seed), *s));
  else SG_TRY(s->init(static_cast<uint64_t>(seed), 0, checkpoint_supplied(a, s->model())));
  int64_t step = 0;
  if (a.has("--checkpoint")) SG_TRY(load_checkpoint(*s, a.get("--checkpoint"), &step));
  const std::string source = weights_source(a, gguf_model, step);
  if (gguf) {
    GgufExportSummary sum;
    SG_TRY(export_gguf(*s, base, {dtype, a.has("--merge")}, out, &sum));
    std::printf("wrote %s (%s) to %s: %d tensors, %d with their LoRA adapters merged, %d kept as the base's "
                "blocks, matrices as %s, %.1f MB\n",
                m->label().c_str(), source.c_str(), out.c_str(), sum.tensors, sum.merged, sum.kept_blocks,
                dtype_name(dtype), static_cast<double>(sum.bytes) / 1e6);
    return Status::Ok();
  }
  if (a.has("--peft")) {
    if (dtype != DType::f32) return Status::Invalid("--peft writes f32 adapters; leave out --dtype");
    SG_TRY(export_peft_adapter(*s, a.get("--output"), a.get("--base-model")));
    std::printf("wrote the LoRA adapters of %s (%s) to %s/adapter_model.safetensors and adapter_config.json\n",
                m->label().c_str(), source.c_str(), a.get("--output").c_str());
    return Status::Ok();
  }
  const bool trained = a.has("--trained");  // a LoRA run's adapters, for sgrt run --adapter
  SG_TRY(export_safetensors(*s, a.get("--output"), dtype, trained ? ParamSet::trained : ParamSet::all));
  std::printf("wrote the %sparameters of %s (%s) to %s as %s\n", trained ? "trained " : "", m->label().c_str(),
              source.c_str(), a.get("--output").c_str(), dtype_name(dtype));
  return Status::Ok();
}

}  // namespace sgrt::tool
