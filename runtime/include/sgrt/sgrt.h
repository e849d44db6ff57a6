/* sgrt.h: the C API of the sgrt runtime (C99; libsgrt.a / libsgrt.so).
 *
 * Load a compiled or exported graph (.sg), pick a backend, bind inputs by
 * name, run its programs (train_step, eval, infer), read outputs and metrics
 * by name, save and load checkpoints, export a deployable graph, and generate
 * text from a graph that carries its tokenizer.
 *
 * Every call returns an sgrt_status; on failure sgrt_last_error() says why.
 * Nothing aborts and no C++ exception crosses this boundary. A session is not
 * thread-safe; distinct sessions may be used from distinct threads.
 * docs/c_api.md has a walk-through; examples/edge/main.c a complete program. */
#ifndef SGRT_H
#define SGRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a declaration here changes incompatibly. Compare it with
 * sgrt_api_version() to catch a header / library mismatch. */
#define SGRT_API_VERSION 2

#if defined(__GNUC__)
#define SGRT_API __attribute__((visibility("default")))
#else
#define SGRT_API
#endif

typedef enum sgrt_status {
  SGRT_OK = 0,
  SGRT_INVALID_ARGUMENT = 1, /* NULL pointer, unknown name, wrong dtype / shape, bad file */
  SGRT_RUNTIME_ERROR = 2,    /* a program failed while running */
  SGRT_IO_ERROR = 3,         /* a file could not be read or written */
  SGRT_UNSUPPORTED = 4,      /* a backend this library lacks, an op it has no kernel for */
  SGRT_BAD_STATE = 5,        /* a call out of order (run before load, ...) */
  SGRT_OUT_OF_MEMORY = 6,
  SGRT_INTERNAL = 7          /* an unexpected failure inside the library */
} sgrt_status;

/* Element types; values are those of the IR (ir/schema/sg.fbs). */
typedef enum sgrt_dtype {
  SGRT_F32 = 0, SGRT_F16, SGRT_BF16, SGRT_E4M3, SGRT_E5M2, SGRT_E2M1, SGRT_E8M0, SGRT_I32,
  SGRT_DTYPE_MAX_ENUM = 0x7FFFFFFF /* not a dtype: makes any int value a valid sgrt_dtype in C++, so a bad one is rejected, not undefined */
} sgrt_dtype;

#define SGRT_MAX_RANK 8

typedef struct sgrt_tensor_info {
  sgrt_dtype dtype;
  int rank;
  int64_t shape[SGRT_MAX_RANK];
  size_t bytes; /* storage size: what sgrt_get_output writes */
} sgrt_tensor_info;

/* Export flags (sgrt_export). */
#define SGRT_EXPORT_INFER_ONLY 1u /* keep the programs that do not train; drop gradients and optimizer state */

typedef struct sgrt_session sgrt_session;

/* SGRT_API_VERSION of the library that is linked. */
SGRT_API int sgrt_api_version(void);
/* The message of this thread's last failed call ("" after a success). Valid
 * until the next sgrt_* call on this thread. */
SGRT_API const char* sgrt_last_error(void);
/* The backends built into this library, comma separated ("cpu", "cpu,vulkan"). */
SGRT_API const char* sgrt_backends(void);

/* An empty session; load a graph into it next. */
SGRT_API sgrt_status sgrt_create(sgrt_session** out);
/* Frees the session and everything it holds; NULL is a no-op. */
SGRT_API void sgrt_destroy(sgrt_session* s);

/* Loads a graph (replacing any loaded one) onto a backend ("cpu", "vulkan",
 * "cuda"; NULL or "" means "cpu"), then initializes it as sgrt_reset(s, 0, 0):
 * an exported graph starts from the weights it carries. */
SGRT_API sgrt_status sgrt_load_file(sgrt_session* s, const char* path, const char* backend);
SGRT_API sgrt_status sgrt_load_memory(sgrt_session* s, const void* data, size_t size, const char* backend);

/* Parameters from their initializers (random ones mixed with seed; the file's
 * values for an exported graph), optimizer state zero, step counter 0, and
 * total_steps as the length of the learning-rate schedule. */
SGRT_API sgrt_status sgrt_reset(sgrt_session* s, uint64_t seed, int64_t total_steps);

/* dtype, shape and byte size of an input, output or metric ("loss" included). */
SGRT_API sgrt_status sgrt_tensor(const sgrt_session* s, const char* name, sgrt_tensor_info* out);

/* Copies data (laid out row-major as dtype[shape]) into the input `name`; the
 * dtype and shape must be the input's own and bytes, the size of the buffer at
 * data, must be its byte size (sgrt_tensor_info.bytes). Since API version 2. */
SGRT_API sgrt_status sgrt_set_input(sgrt_session* s, const char* name, sgrt_dtype dtype, const int64_t* shape,
                                    int rank, const void* data, size_t bytes);

/* Runs a program: "train_step", "eval" or "infer" (sgrt info lists a graph's). */
SGRT_API sgrt_status sgrt_run(sgrt_session* s, const char* program);

/* Copies an output, metric or the loss into dst; bytes must be its size. Fails
 * with SGRT_BAD_STATE before any program has run. */
SGRT_API sgrt_status sgrt_get_output(const sgrt_session* s, const char* name, void* dst, size_t bytes);
/* A scalar metric or "loss" of the last program run. */
SGRT_API sgrt_status sgrt_get_metric(const sgrt_session* s, const char* name, float* out);

/* Checkpoints: DIR/checkpoint.sgck, every persistent tensor (sgrt train --checkpoint). */
SGRT_API sgrt_status sgrt_save_checkpoint(const sgrt_session* s, const char* dir, int64_t step);
SGRT_API sgrt_status sgrt_load_checkpoint(sgrt_session* s, const char* dir, int64_t* step);

/* Writes the loaded graph with the session's current weights folded in (sgrt
 * export). flags: SGRT_EXPORT_*; quantize: NULL or "" for none, else "fp8",
 * "fp8-channel", "fp4" or "nvfp4" (needs SGRT_EXPORT_INFER_ONLY). */
SGRT_API sgrt_status sgrt_export(const sgrt_session* s, const char* path, unsigned flags, const char* quantize);

/* Text generation from a graph that carries its tokenizer (sgrt export
 * --tokenizer) and maps an input "tokens" [1, block] to an output "logits"
 * (with a KV cache when it has the programs prefill and decode_step;
 * docs/c_api.md). */
typedef struct sgrt_generate_options {
  int chat;            /* nonzero: the prompt is one user message in the model's chat template, the assistant's turn opened */
  const char* system;  /* with chat: a system message first; NULL: none */
  int64_t max_tokens;  /* new tokens at most (>= 1); fewer when EOS comes or the block is full */
  double temperature;  /* 0: greedy; else sample from softmax(logits / temperature), at most 100 */
  int64_t top_k;       /* sample among the top_k most likely tokens; 0: all */
  double top_p;        /* within the smallest set of probability top_p, in (0, 1]; 1: all */
  uint64_t seed;
} sgrt_generate_options;

/* Receives the new text as it is generated, a piece per call: whole UTF-8
 * characters (an invalid sequence as U+FFFD), not NUL-terminated, EOS not shown. */
typedef void (*sgrt_text_callback)(const char* text, size_t len, void* user);

/* Tokenizes prompt (UTF-8; BOS first when the tokenizer asks) and generates.
 * options NULL: greedy, 200 tokens, no chat. A prompt that leaves no room in
 * the block, a graph without a tokenizer or for a batch of more than one
 * sequence: SGRT_INVALID_ARGUMENT. */
SGRT_API sgrt_status sgrt_generate(sgrt_session* s, const char* prompt, const sgrt_generate_options* options,
                                   sgrt_text_callback on_text, void* user);

#ifdef __cplusplus
}
#endif

#endif /* SGRT_H */
