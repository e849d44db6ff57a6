#!/bin/sh
# Size and dependencies of the deployable runtime, libsgrt (static and shared),
# for each build directory given: stripped sizes, the backends inside, the
# shared library's dynamic dependencies, and what it must not contain (Lua,
# the compiler).
#
#   scripts/size_report.sh [--check] BUILD_DIR...
#
# --check fails (exit 1) when a library holds Lua or compiler symbols, depends
# on anything beyond libc, libstdc++, libm, zlib (plus libgcc_s and the GPU
# runtime of a built-in GPU backend), or when a CPU-only static library is
# 3.10 MB (aarch64) or 3.95 MB (x86-64) or more once stripped (the limits
# below). ctest runs it on the build tree.
set -eu

check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
[ $# -gt 0 ] || { echo "usage: $0 [--check] BUILD_DIR..." >&2; exit 2; }

# 2 MB until issue 14: the GGUF reader, the BPE tokenizer, GGUF weight binding
# and text generation (pretrained LLMs on the edge) added ~0.15 MB of objects;
# then the KV-cache decode ops and fine-tuning on the device (instruction data
# with its JSON reader, frozen parameters, LoRA's PEFT export) ~0.13 MB more
# (aarch64: 2,276,438 bytes); then a QLoRA base on the device (q8_0/q4_1
# blocks decoded inside the CPU GEMM, their init and GGUF binding), gradient
# accumulation and the vectorized quantizers' three ISA copies ~0.12 MB more
# (aarch64: 2,393,668 bytes); then conv/pooling (im2col), slice/pad, the LoRA
# merge in export and liveness re-planning ~0.18 MB more (aarch64: 2,571,370
# bytes; libsgrt.so 854,824); then the vectorized f32 reductions and AdamW
# (40 KB), the data-parallel trainer with its communicator (47 KB of text:
# data_parallel.o 34 KB, communicator.o 13 KB; MPI itself stays outside),
# fp8-block's tiles and chunked GEMM and the flushed-share monitor ~0.11 MB
# more (aarch64: 2,764,306 bytes; libsgrt.so 920,352); then ZeRO-1 (the
# sharding plan, the weight all-gather, gathered checkpoints), resuming on
# another number of ranks (checkpoint format 4), data-parallel dropout offsets
# and the E4M3 gradient wire, and nvfp4-train's 16x16 blocks, Hadamard transform
# and stochastic rounding ~60 KB more (aarch64: 2,824,346 bytes); then the CPU
# speed work of issue 22 (row reductions, fused activations) ~70 KB more
# (aarch64: 2,894,092 bytes) and per-op profiling on every backend
# (Backend::request_profile, the CPU's timed run: backends.o +4.3 KB and
# cpu_backend.o +3.1 KB of text; aarch64: 2,903,846 bytes); then the
# fine-tune shipped as one file (a tokenizer in the .sg: tokenizer_model.o
# 12 KB of text and the FlatBuffers table's code in every user of the schema;
# text generation in the runtime for the C API's sgrt_generate: text_generate.o
# 7 KB; the mapped .sg, chunked prefill) ~79 KB more (aarch64: 2,982,730
# bytes; libsgrt.so 985,920 -> 1,117,056, since sgrt_generate reaches the
# tokenizer and its Unicode tables); then the fine-tune written back as GGUF
# (gguf_export.o 44 KB of text on x86-64; lora_merge's merge_adapters, file_io's
# AtomicFile) and the GEMM's one-row path (gemv in each f32 driver, the AVX-512
# FP8/FP4 decode) ~89 KB more (aarch64: 3,072,058 bytes; libsgrt.so unchanged,
# since the C API reaches neither the export nor the GGUF reader; building
# gguf_export.cpp with -Os made it 15 KB but pulled 200 KB of GGUF and
# safetensors code into libsgrt.so through its out-of-line COMDAT copies), and
# the CPU's replayed quantizations 11.5 KB (3,083,628; a std::map keyed by a
# tuple and shared_ptr entries had made them 35 KB, mostly symbol names); then
# checkpoint format 5 (the run's init file and its header identity,
# read_checkpoint_meta) 10.7 KB, the range checks' error text made once for all
# fields -3.9 KB (3,094,330); checkpoints streamed and mapped, loads into an
# inference-only session, exports written from the FlatBuffer builder +8 KB,
# then checkpoint.cpp built with -Os (-O3 had inlined every error message's
# string concatenations: checkpoint.o 94 -> 71 KB) -20 KB (3,082,258;
# libsgrt.so unchanged on aarch64, 1,665,944 -> 1,629,080 on x86-64); CI read
# 3,092,158 on 2026-12-05, before the thread pool's core checks
# (core_affinity.o) and the GEMM's 4-row kernel for cut tiles in both NEON
# drivers added ~4.4 KB (3,096,826); the pool's default size from the affinity
# mask and cgroup quota (usable_cores) and its late helpers' join +2.7 KB
# (3,099,502); then gguf.cpp, instruct_dataset.cpp and run_files.cpp built with
# -Os, as checkpoint.cpp, -60 KB (3,039,630; libsgrt.so unchanged); 3,074,446
# in session 34; Session::init's supplied tensors (weights_file_tensors,
# checkpoint_tensors, read_safetensors_header) +25 KB (3,099,442); the one-row
# GEMM's q8_0/q4_1 blocks decoded in registers, 4 rows at a time, +10 KB, and
# safetensors.cpp built with -Os -13 KB (3,096,498); the masked_cross_entropy
# op +10 KB (3,106,682: most of it its two rows of the op table, which was an
# inline array copied into each of the ~90 objects that read it); the table
# defined once, in core/src/ops.cpp, -148 KB (2,958,522; libsgrt.so
# unchanged: the linker had already kept one copy); a cross-entropy gradient
# placed over its logits (liveness groups) and O2 masters decoded into an
# inference-only session's parameters, the PEFT export on the merge's tracer
# +21.6 KB (2,980,138); PEFT adapters in (import_peft_adapter, its config
# reader) +60 KB, peft.cpp then built with -Os -7 KB (3,040,550). Leaving the
# data-parallel step out of an edge build (data_parallel.o is 48 KB of text,
# but train() runs every step through its RankStep) is a further saving. The
# archive holds every object; a program linking it statically takes only the
# ones it calls.
limit=3100000
# x86-64 carries the CPU kernels three times (AVX-512, AVX2, baseline; chosen at
# run time): 3,668,732 bytes CPU-only on 2026-12-03, when its check was added
# (until then a CPU-only x86-64 build failed the aarch64 limit); 3,712,060 with
# the row reductions' x86 copies (session 21); 3,803,440 with the tokenizer and
# text generation of sgrt_generate (session 22, +91 KB; libsgrt.so 1,518,416 ->
# 1,637,256); 3,915,238 with the GGUF export, the one-row GEMM path and the
# replayed quantizations (session 23; libsgrt.so 1,657,752).
limit_x86=3950000
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
problem() { echo "  FAIL: $*"; fail=1; }

for build in "$@"; do
  a="$build/runtime/libsgrt.a" so="$build/runtime/libsgrt.so"
  [ -f "$a" ] && [ -f "$so" ] || { echo "$build: no libsgrt.a / libsgrt.so (build sgrt_static sgrt_shared)" >&2; exit 2; }
  # A cross build (aarch64) is read with its own binutils (binutils-aarch64-linux-gnu).
  tools= cap=$limit
  readelf -h "$so" | grep -q AArch64 && [ "$(uname -m)" != aarch64 ] && tools=aarch64-linux-gnu-
  readelf -h "$so" | grep -q 'X86-64' && cap=$limit_x86
  nm() { command "${tools}nm" "$@"; }
  strip() { command "${tools}strip" "$@"; }
  backends=cpu
  nm -C "$a" 2>/dev/null | grep -q 'T sgrt::make_vulkan_backend' && backends="$backends,vulkan"
  nm -C "$a" 2>/dev/null | grep -q 'T sgrt::make_cuda_backend' && backends="$backends,cuda"
  strip --strip-unneeded -o "$tmp/libsgrt.a" "$a"
  strip --strip-unneeded -o "$tmp/libsgrt.so" "$so"
  sa=$(stat -c %s "$tmp/libsgrt.a") sso=$(stat -c %s "$tmp/libsgrt.so")
  needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  echo "$build (backends: $backends)"
  printf '  libsgrt.a   %9d bytes stripped (%d unstripped)\n' "$sa" "$(stat -c %s "$a")"
  printf '  libsgrt.so  %9d bytes stripped (%d unstripped)\n' "$sso" "$(stat -c %s "$so")"
  echo "  libsgrt.so needs: $needed"
  others=$(nm -D --defined-only "$so" | awk '$2 == "T" && $3 !~ /^sgrt_/' | wc -l)
  echo "  libsgrt.so exports $(nm -D --defined-only "$so" | awk '$2 == "T"' | wc -l) functions, $others of them not sgrt_*"
  [ "$others" -eq 0 ] || problem "libsgrt.so exports functions beyond the C API"

  allowed='libc\.so|libstdc\+\+\.so|libm\.so|libz\.so|libgcc_s\.so|ld-linux'
  case $backends in *vulkan*) allowed="$allowed|libvulkan\.so" ;; esac
  case $backends in *cuda*) allowed="$allowed|libcuda\.so|libcudart\.so|libcublas(Lt)?\.so|libnccl\.so" ;; esac
  for lib in $needed; do
    echo "$lib" | grep -Eq "^($allowed)" || problem "libsgrt.so depends on $lib"
  done
  if nm "$a" 2>/dev/null | grep -Eq ' [TUDB] _?(lua_|luaL_|luaopen_)'; then problem "libsgrt.a holds Lua symbols"; fi
  if nm -C "$a" 2>/dev/null | grep -q 'sgrt::compiler::\|sgrt::dsl::'; then problem "libsgrt.a holds the compiler or the DSL"; fi
  if [ "$backends" = cpu ] && [ "$sa" -ge "$cap" ]; then problem "CPU-only libsgrt.a is $sa bytes stripped (limit $cap)"; fi
done

[ $check -eq 0 ] || [ $fail -eq 0 ] || exit 1
