// The C API (sgrt.h) over Session. Every entry point runs inside guard(): a
// Status becomes an sgrt_status plus this thread's message, and any exception
// (std::bad_alloc included) is caught here, never crossing into C.
#include "sgrt/sgrt.h"

#include <algorithm>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "sgrt/checkpoint.h"
#include "sgrt/export.h"
#include "sgrt/session.h"
#include "sgrt/text_generate.h"
#include "sgrt/tokenizer_model.h"

struct sgrt_session {
  std::unique_ptr<sgrt::Session> session;
  std::string last_program;  // the last program run since load / reset ("" if none)
  std::unique_ptr<sgrt::Tokenizer> tokenizer;  // the graph's, made by the first sgrt_generate
};

namespace {

using sgrt::Status;
using sgrt::StatusCode;

thread_local std::string g_error;

// A failure with a code that Status has no name for.
struct Failure {
  sgrt_status code;
  std::string msg;
};

sgrt_status code_of(StatusCode c) {
  switch (c) {
    case StatusCode::ok: return SGRT_OK;
    case StatusCode::invalid_input: return SGRT_INVALID_ARGUMENT;
    case StatusCode::runtime_error: return SGRT_RUNTIME_ERROR;
    case StatusCode::io_error: return SGRT_IO_ERROR;
    case StatusCode::unsupported: return SGRT_UNSUPPORTED;
  }
  return SGRT_INTERNAL;
}

template <class F>
sgrt_status guard(const char* fn, F&& body) {
  try {
    Failure f{SGRT_OK, ""};
    Status st = body(&f);
    if (f.code == SGRT_OK && !st.ok()) f = Failure{code_of(st.code()), st.message()};
    g_error = f.code == SGRT_OK ? "" : std::string(fn) + ": " + f.msg;
    return f.code;
  } catch (const std::bad_alloc&) {
    g_error = std::string(fn) + ": out of memory";
    return SGRT_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    g_error = std::string(fn) + ": internal error: " + e.what();
  } catch (...) {
    g_error = std::string(fn) + ": internal error";
  }
  return SGRT_INTERNAL;
}

// Sets *f and returns a failed Status, so bodies can `return fail(...)`.
Status fail(Failure* f, sgrt_status code, std::string msg) {
  *f = Failure{code, std::move(msg)};
  return Status::Invalid(f->msg);
}

#define SGRT_NEED(p) \
  if (!(p)) return fail(f, SGRT_INVALID_ARGUMENT, "argument '" #p "' is NULL")
#define SGRT_NEED_LOADED(s) \
  if (!(s)->session) return fail(f, SGRT_BAD_STATE, "no graph loaded (call sgrt_load_file or sgrt_load_memory first)")

// The tensor an input, output, metric or "loss" names; -1 if none.
int named_tensor(const sgrt::Model& m, const std::string& name, bool inputs_only) {
  int id = m.find_tensor(name);
  if (id >= 0 && m.tensors()[id].role == sgrt::Role::input) return id;
  if (inputs_only) return -1;
  if (int t = m.find_output(name); t >= 0) return t;
  for (const auto& [n, t] : m.metrics()) if (n == name) return t;
  return name == "loss" ? m.loss() : -1;
}

Status find(const sgrt_session* s, const char* name, bool inputs_only, Failure* f, int* id) {
  *id = named_tensor(s->session->model(), name, inputs_only);
  if (*id < 0)
    return fail(f, SGRT_INVALID_ARGUMENT, std::string("the graph has no ") + (inputs_only ? "input" : "input, output or metric") +
                                              " named '" + name + "'");
  return Status::Ok();
}

// Outputs and metrics hold a result only once a program has run since load / reset.
Status need_result(const sgrt_session* s, const char* name, Failure* f) {
  if (s->last_program.empty()) return fail(f, SGRT_BAD_STATE, std::string("no program has run yet, so '") + name + "' holds no result");
  return Status::Ok();
}

Status load(sgrt_session* s, std::unique_ptr<sgrt::Model> m, const char* backend, Failure* f) {
  std::unique_ptr<sgrt::Backend> be;
  Status st = sgrt::make_backend(backend && *backend ? backend : "cpu", &be);
  if (!st.ok()) return fail(f, SGRT_UNSUPPORTED, st.message());
  std::unique_ptr<sgrt::Session> session;
  SG_TRY(sgrt::Session::create(std::move(m), std::move(be), &session));
  SG_TRY(session->init(0, 0));
  s->session = std::move(session);
  s->last_program.clear();
  s->tokenizer.reset();
  return Status::Ok();
}

// sgrt_generate's options, checked; NULL: the defaults.
Status generate_options(const sgrt_generate_options* in, Failure* f, sgrt_generate_options* out) {
  *out = in ? *in : sgrt_generate_options{0, nullptr, 200, 0.0, 0, 1.0, 1};
  if (out->max_tokens < 1) return fail(f, SGRT_INVALID_ARGUMENT, "max_tokens must be at least 1");
  if (!(out->temperature >= 0 && out->temperature <= 100))
    return fail(f, SGRT_INVALID_ARGUMENT, "temperature must be in [0, 100]");
  if (out->top_k < 0) return fail(f, SGRT_INVALID_ARGUMENT, "top_k must be 0 (all) or more");
  if (!(out->top_p > 0 && out->top_p <= 1)) return fail(f, SGRT_INVALID_ARGUMENT, "top_p must be in (0, 1]");
  return Status::Ok();
}

}  // namespace

extern "C" {

int sgrt_api_version(void) { return SGRT_API_VERSION; }

const char* sgrt_last_error(void) { return g_error.c_str(); }

const char* sgrt_backends(void) {
#if defined(SGRT_WITH_VULKAN) && defined(SGRT_WITH_CUDA)
  return "cpu,vulkan,cuda";
#elif defined(SGRT_WITH_VULKAN)
  return "cpu,vulkan";
#elif defined(SGRT_WITH_CUDA)
  return "cpu,cuda";
#else
  return "cpu";
#endif
}

sgrt_status sgrt_create(sgrt_session** out) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(out);
    *out = new sgrt_session();
    return Status::Ok();
  });
}

void sgrt_destroy(sgrt_session* s) {
  (void)guard(__func__, [&](Failure*) {
    delete s;
    return Status::Ok();
  });
}

sgrt_status sgrt_load_file(sgrt_session* s, const char* path, const char* backend) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(path);
    std::unique_ptr<sgrt::Model> m;
    SG_TRY(sgrt::Model::load_file(path, &m));  // mapped: the weights' pages go once in the arena
    return load(s, std::move(m), backend, f);
  });
}

sgrt_status sgrt_load_memory(sgrt_session* s, const void* data, size_t size, const char* backend) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(data);
    const uint8_t* p = static_cast<const uint8_t*>(data);
    std::unique_ptr<sgrt::Model> m;
    SG_TRY(sgrt::Model::load_bytes(std::vector<uint8_t>(p, p + size), "<memory>", &m));
    return load(s, std::move(m), backend, f);
  });
}

sgrt_status sgrt_reset(sgrt_session* s, uint64_t seed, int64_t total_steps) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED_LOADED(s);
    if (total_steps < 0) return fail(f, SGRT_INVALID_ARGUMENT, "total_steps is negative");
    s->last_program.clear();
    return s->session->init(seed, total_steps);
  });
}

sgrt_status sgrt_tensor(const sgrt_session* s, const char* name, sgrt_tensor_info* out) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(name);
    SGRT_NEED(out);
    SGRT_NEED_LOADED(s);
    int id;
    SG_TRY(find(s, name, false, f, &id));
    const sgrt::TensorInfo& t = s->session->model().tensors()[id];
    if (t.type.shape.size() > SGRT_MAX_RANK) return fail(f, SGRT_UNSUPPORTED, "tensor '" + t.name + "' has rank > SGRT_MAX_RANK");
    *out = sgrt_tensor_info{};
    out->dtype = static_cast<sgrt_dtype>(t.type.dtype);
    out->rank = static_cast<int>(t.type.shape.size());
    for (int i = 0; i < out->rank; ++i) out->shape[i] = t.type.shape[i];
    out->bytes = t.bytes;
    return Status::Ok();
  });
}

sgrt_status sgrt_set_input(sgrt_session* s, const char* name, sgrt_dtype dtype, const int64_t* shape, int rank,
                           const void* data, size_t bytes) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(name);
    SGRT_NEED(shape);
    SGRT_NEED(data);
    SGRT_NEED_LOADED(s);
    int id;
    SG_TRY(find(s, name, true, f, &id));
    const sgrt::TensorInfo& t = s->session->model().tensors()[id];
    if (rank < 0 || rank > SGRT_MAX_RANK) return fail(f, SGRT_INVALID_ARGUMENT, "rank " + std::to_string(rank) + " is out of range");
    sgrt::TensorType given{sgrt::Shape(shape, shape + rank), static_cast<sgrt::DType>(dtype)};
    if (static_cast<int>(dtype) < 0 || static_cast<int>(dtype) >= sgrt::kNumDTypes || !(given == t.type))
      return fail(f, SGRT_INVALID_ARGUMENT,
                  "input '" + t.name + "' is " + sgrt::type_str(t.type) + ", got " +
                      (static_cast<int>(dtype) >= 0 && static_cast<int>(dtype) < sgrt::kNumDTypes ? sgrt::type_str(given)
                                                                                                 : "an invalid dtype"));
    if (bytes != t.bytes)  // the caller's buffer is smaller or larger than the input: never read past it
      return fail(f, SGRT_INVALID_ARGUMENT, "input '" + t.name + "' is " + std::to_string(t.bytes) + " bytes, the buffer " +
                                                std::to_string(bytes));
    return s->session->write(id, data, bytes);
  });
}

sgrt_status sgrt_run(sgrt_session* s, const char* program) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(program);
    SGRT_NEED_LOADED(s);
    int p;
    SG_TRY(s->session->find_program(program, &p));
    s->last_program.clear();  // a failed run leaves no valid outputs
    SG_TRY(s->session->run(p));
    s->last_program = program;
    return Status::Ok();
  });
}

sgrt_status sgrt_generate(sgrt_session* s, const char* prompt, const sgrt_generate_options* options,
                          sgrt_text_callback on_text, void* user) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(prompt);
    SGRT_NEED(on_text);
    SGRT_NEED_LOADED(s);
    sgrt_generate_options o;
    SG_TRY(generate_options(options, f, &o));
    const sgrt::Model& m = s->session->model();
    if (!s->tokenizer) SG_TRY(sgrt::tokenizer_from_model(m, &s->tokenizer));
    int64_t block, vocab;
    SG_TRY(sgrt::generation_shape(m, &block, &vocab));
    std::vector<int32_t> ids;
    SG_TRY(sgrt::prompt_ids(*s->tokenizer, prompt, {o.chat != 0, o.chat ? o.system : nullptr}, m.label(), &ids));
    const int64_t n = static_cast<int64_t>(ids.size());
    if (n >= block)
      return fail(f, SGRT_INVALID_ARGUMENT, "the prompt is " + std::to_string(n) + " tokens, the graph's block " +
                                                std::to_string(block) + " (leave room for at least one new token)");
    s->last_program.clear();  // generation overwrites the outputs
    sgrt::GenerateStats stats;
    return sgrt::generate_text(*s->session, *s->tokenizer, ids, std::min(o.max_tokens, block - n),
                               sgrt::SamplingOptions{o.temperature, o.top_k, o.top_p, o.seed},
                               [&](std::string_view piece) { on_text(piece.data(), piece.size(), user); }, &stats);
  });
}

sgrt_status sgrt_get_output(const sgrt_session* s, const char* name, void* dst, size_t bytes) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(name);
    SGRT_NEED(dst);
    SGRT_NEED_LOADED(s);
    int id;
    SG_TRY(find(s, name, false, f, &id));
    SG_TRY(need_result(s, name, f));
    return s->session->read(id, dst, bytes);
  });
}

sgrt_status sgrt_get_metric(const sgrt_session* s, const char* name, float* out) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(name);
    SGRT_NEED(out);
    SGRT_NEED_LOADED(s);
    int id;
    SG_TRY(find(s, name, false, f, &id));
    const sgrt::TensorInfo& t = s->session->model().tensors()[id];
    if (t.type.dtype != sgrt::DType::f32 || t.bytes != sizeof(float))
      return fail(f, SGRT_INVALID_ARGUMENT, "'" + std::string(name) + "' is " + sgrt::type_str(t.type) + ", not a scalar (use sgrt_get_output)");
    SG_TRY(need_result(s, name, f));
    return s->session->read_scalar(id, out);
  });
}

sgrt_status sgrt_save_checkpoint(const sgrt_session* s, const char* dir, int64_t step) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(dir);
    SGRT_NEED_LOADED(s);
    return sgrt::save_checkpoint(*s->session, dir, step);
  });
}

sgrt_status sgrt_load_checkpoint(sgrt_session* s, const char* dir, int64_t* step) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(dir);
    SGRT_NEED(step);
    SGRT_NEED_LOADED(s);
    return sgrt::load_checkpoint(*s->session, dir, step);
  });
}

sgrt_status sgrt_export(const sgrt_session* s, const char* path, unsigned flags, const char* quantize) {
  return guard(__func__, [&](Failure* f) {
    SGRT_NEED(s);
    SGRT_NEED(path);
    SGRT_NEED_LOADED(s);
    if (flags & ~SGRT_EXPORT_INFER_ONLY) return fail(f, SGRT_INVALID_ARGUMENT, "unknown flags " + std::to_string(flags));
    sgrt::ExportOptions o;
    o.infer_only = flags & SGRT_EXPORT_INFER_ONLY;
    SG_TRY(sgrt::parse_export_quant(quantize ? quantize : "", &o.quantize));
    return sgrt::export_to_file(*s->session, o, path);
  });
}

}  // extern "C"
