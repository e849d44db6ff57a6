// The Vulkan backend: one arena buffer sized by the memory plan, every program
// lowered to dispatches and recorded into its own command buffer at prepare,
// replayed by run(). Writes go through the arena's mapping where its memory is
// host-visible, else through a staging buffer in chunks. Reads take the mapping
// where it is host-cached; where it is uncached (a discrete GPU's device-local
// memory: every host load crosses the bus) or missing, the device copies what
// is read, past a few words, into host-cached memory in chunks first.
// SGRT_VULKAN_STAGING=1 forces the staging path; SGRT_VULKAN_READBACK=
// direct|staged how reads go; SGRT_VULKAN_COOP=codes runs
// qmatmuls on E4M3/E2M1 codes on cooperative matrices, =1 f32 matmuls too (FP16
// operands); a device without them fails;
// SGRT_VULKAN_GEMM_TILE=64|128 picks the tiled GEMM's tile for every product
// it runs; SGRT_VULKAN_GEMM_THIN=0 runs products with a side of C of at most 16
// there too (default 1: on gemm_thin);
// SGRT_VULKAN_SPLIT_K=0|1 turns split-K off or on (default: on GPUs);
// SGRT_VULKAN_FUSE=0 keeps scales and adds out of the products' epilogues;
// SGRT_VULKAN_DECODE_FIRST=1 decodes tiled qmatmuls' operands into scratch
// before the product (default 0: in the tiled shader's loads);
// SGRT_VULKAN_ATTENTION_TILES=R,S fixes attention's tiles; SGRT_VULKAN_ARENA=
// binding|address how shaders reach the arena (default: bound where it fits).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../backends.h"
#include "../product_fusion.h"
#include "context.h"
#include "vulkan/table.h"
#include "op_timer.h"
#include "pipelines.h"
#include "recorder.h"

namespace sgrt {
namespace {

constexpr uint64_t kStagingBytes = 64ull << 20;
// Reads up to this size take the arena's mapping even where it is uncached: a
// loss or the train state costs less so than a copy's submit and wait.
constexpr size_t kDirectReadBytes = 4096;

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

// Environment switch `name`: "" when unset, else `a` or `b` (anything else is refused).
Status env_pick(const char* name, const char* a, const char* b, std::string* out) {
  const char* v = std::getenv(name);
  *out = v ? v : "";
  if (out->empty() || *out == a || *out == b) return Status::Ok();
  return Status::Invalid(std::string("vulkan backend: ") + name + " is " + a + " or " + b + ", not '" + *out + "'");
}

// SGRT_VULKAN_ATTENTION_TILES=R,S: attention's tile pair (R owned rows of 8, 16
// or 32; S streamed rows of 4, 8, 16 or 32) for every attention dispatch.
Status attention_tiles_from_env(vk::KernelOptions* opts) {
  const char* v = std::getenv("SGRT_VULKAN_ATTENTION_TILES");
  if (!v || !*v) return Status::Ok();
  unsigned r = 0, s = 0;
  char end = 0;
  auto one_of = [](unsigned x, std::initializer_list<unsigned> set) { return std::find(set.begin(), set.end(), x) != set.end(); };
  if (std::sscanf(v, "%u,%u%c", &r, &s, &end) != 2 || !one_of(r, {8, 16, 32}) || !one_of(s, {4, 8, 16, 32}))
    return Status::Invalid(std::string("vulkan backend: SGRT_VULKAN_ATTENTION_TILES is R,S with R 8, 16 or 32 and S 4, "
                                       "8, 16 or 32, not '") + v + "'");
  opts->attention_rows = r;
  opts->attention_streamed = s;
  return Status::Ok();
}

// Fewer workgroups than this leave a GPU's compute units idle (up to ~150 on
// today's largest): a product whose 128x128 tiles would make fewer runs on
// 64x64 ones (the GPT's [2048, 256] products: 32 groups, then 128), and one
// still under it with a long K splits K (the GPT's weight gradients, K = 2048:
// 16 groups, then 128). Neither on a CPU device (lavapipe): its compute units
// are the cores, and its SIMD runs the larger register tile faster.
constexpr uint32_t kGpuFullGrid = 256;

struct Program {
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  const ProgramInfo* info = nullptr;
  std::unique_ptr<vk::OpTimer> timer;  // when profiling
};

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(std::unique_ptr<vk::Context> ctx) : ctx_(std::move(ctx)) {}
  ~VulkanBackend() override {
    vkDeviceWaitIdle(ctx_->device());
    pipelines_.reset();
    ctx_->destroy_buffer(&staging_);
    ctx_->destroy_buffer(&readback_);
    ctx_->destroy_buffer(&scratch_);
    ctx_->destroy_buffer(&errors_);
    ctx_->destroy_buffer(&address_);
    ctx_->destroy_buffer(&arena_);
  }
  const char* name() const override { return "vulkan"; }

  Status prepare(const Model& model) override {
    if (arena_.buffer) return Status::Runtime("vulkan backend: prepare called twice");
    uint64_t bytes;
    SG_TRY(arena_size(model, &bytes));
    bool by_address = false;
    SG_TRY(arena_access(bytes, &by_address));
    // Lower every op first: a missing kernel fails before any allocation.
    vk::KernelOptions opts;
    opts.max_groups = std::min({ctx_->limits().maxComputeWorkGroupCount[0], ctx_->limits().maxComputeWorkGroupCount[1]});
    opts.max_shared = ctx_->limits().maxComputeSharedMemorySize;
    SG_TRY(coop_from_env(&opts));
    SG_TRY(grid_options(&opts));
    SG_TRY(attention_tiles_from_env(&opts));
    opts.coop_threads = 4 * ctx_->coop().subgroup_size;
    std::vector<std::vector<vk::Dispatch>> lowered;
    std::vector<std::vector<size_t>> op_end;  // per program: one past each op's last dispatch
    vk::Scratch scratch;
    bool fuse = false;
    SG_TRY(fusion_from_env(opts, &fuse));
    std::vector<Folds> folds;  // per program, found once for both lowerings
    for (const ProgramInfo& p : model.programs()) folds.push_back(fold_into_products(model, p, fuse));
    auto lower_all = [&]() -> Status {
      lowered.clear();
      op_end.clear();
      for (size_t q = 0; q < model.programs().size(); ++q) {
        const ProgramInfo& p = model.programs()[q];
        const Folds& f = folds[q];
        std::vector<vk::Dispatch> ds;
        op_end.emplace_back();
        for (size_t i = 0; i < p.ops.size(); ++i) {
          if (!f.folded[i])
            SG_TRY(vk::lower_op(p.ops[i], model.tensors(), static_cast<uint32_t>(i), opts, &scratch, &ds, f.epi[i]));
          op_end.back().push_back(ds.size());
        }
        lowered.push_back(std::move(ds));
      }
      return Status::Ok();
    };
    // Once to learn the shared scratch region's size; again with it in front
    // only where an op asked for one (split-K).
    SG_TRY(lower_all());
    if (scratch.region_need > 0) {
      scratch = vk::Scratch{scratch.region_need, 0};
      SG_TRY(lower_all());
    }
    const VkBufferUsageFlags addressed = by_address ? VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT : 0;
    bool direct = !env_on("SGRT_VULKAN_STAGING");
    if (!direct || !ctx_->create_buffer(bytes, vk::Context::Memory::shared, &arena_, addressed).ok()) {
      direct = false;
      SG_TRY(ctx_->create_buffer(bytes, vk::Context::Memory::device, &arena_, addressed));
      SG_TRY(ctx_->create_buffer(std::min(bytes, kStagingBytes), vk::Context::Memory::host, &staging_));
    }
    SG_TRY(readback_buffer(bytes));
    SG_TRY(ctx_->create_buffer(16, vk::Context::Memory::host, &errors_));
    SG_TRY(ctx_->create_buffer(std::max<uint64_t>(16, 4ull * scratch.words), vk::Context::Memory::device, &scratch_));
    SG_TRY(ctx_->run_once([&](VkCommandBuffer cmd) {
      vkCmdFillBuffer(cmd, arena_.buffer, 0, VK_WHOLE_SIZE, 0);
      vkCmdFillBuffer(cmd, scratch_.buffer, 0, VK_WHOLE_SIZE, 0);
    }));
    // common.glsl's ArenaAddress: the arena's address as float, int and uint words (0 when bound).
    SG_TRY(ctx_->create_buffer(3 * sizeof(VkDeviceAddress), vk::Context::Memory::host, &address_,
                               VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT));
    std::fill_n(static_cast<VkDeviceAddress*>(address_.mapped), 3, arena_.address);
    SG_TRY(vk::Pipelines::create(ctx_.get(), arena_, errors_, scratch_, address_, by_address, &pipelines_));
    for (size_t p = 0; p < lowered.size(); ++p) {
      Program prog{VK_NULL_HANDLE, &model.programs()[p], nullptr};
      SG_TRY(ctx_->allocate_command_buffer(&prog.cmd));
      if (profiling()) SG_TRY(vk::OpTimer::create(*ctx_, std::move(op_end[p]), &prog.timer));
      SG_TRY(vk::record_program(prog.cmd, lowered[p], pipelines_.get(), prog.timer.get()).with_context("program " + prog.info->name));
      programs_.push_back(std::move(prog));
    }
    prepared(model);
    return Status::Ok();
  }

  // SGRT_VULKAN_FUSE=0: every op its own dispatches; else scales and adds fold
  // into the products before them (runtime/src/product_fusion.h), but where
  // cooperative matrices were asked for (gemm_coop has no such epilogue).
  Status fusion_from_env(const vk::KernelOptions& opts, bool* fuse) const {
    std::string v;
    SG_TRY(env_pick("SGRT_VULKAN_FUSE", "0", "1", &v));
    *fuse = v != "0" && !opts.coop && !opts.coop_codes;
    return Status::Ok();
  }

  // Each product's fused epilogue (by op index): a scale after it, or an add of
  // it to an earlier tensor (without a bias after: the shaders add none); the
  // fused ops are `folded` (no dispatches of their own). None unless `fuse`.
  struct Folds {
    std::vector<vk::Epilogue> epi;
    std::vector<bool> folded;
  };
  static Folds fold_into_products(const Model& model, const ProgramInfo& p, bool fuse) {
    Folds r{std::vector<vk::Epilogue>(p.ops.size()), std::vector<bool>(p.ops.size(), false)};
    if (!fuse) return r;
    for (const ScaleFusion& f : find_scale_fusions(model, p)) {
      r.epi[f.product] = {p.ops[f.scale].out[0], static_cast<float>(p.ops[f.scale].attrs.f("alpha")), -1};
      r.folded[f.scale] = true;
    }
    for (const AddendFusion& f : find_addend_fusions(model, p, {}, true))
      if (f.bias_add < 0) {
        r.epi[f.matmul] = {p.ops[f.add].out[0], 1.0f, f.addend};
        r.folded[f.add] = true;
      }
    return r;
  }

  // How shaders reach the arena: bound as one storage buffer where it fits the
  // device's maxStorageBufferRange (Vulkan's floor is 128 MiB: lavapipe's, many
  // mobile GPUs'), else by its device address (the *_addr shaders; Vulkan 1.2's
  // bufferDeviceAddress). SGRT_VULKAN_ARENA=binding|address fixes it.
  // Host-cached memory that reads come back through, where the arena's own
  // mapping is missing or uncached (SGRT_VULKAN_READBACK=staged: always;
  // =direct: never, where the arena is mapped).
  Status readback_buffer(uint64_t arena_bytes) {
    std::string v;
    SG_TRY(env_pick("SGRT_VULKAN_READBACK", "direct", "staged", &v));
    if (v == "direct" && !arena_.mapped)
      return Status::Invalid("vulkan backend: SGRT_VULKAN_READBACK=direct, but the arena is not host-visible here");
    if (v == "direct" || (v.empty() && arena_.mapped && arena_.cached)) return Status::Ok();
    return ctx_->create_buffer(std::min(arena_bytes, kStagingBytes), vk::Context::Memory::readback, &readback_);
  }

  Status arena_access(uint64_t bytes, bool* by_address) const {
    std::string v;
    SG_TRY(env_pick("SGRT_VULKAN_ARENA", "binding", "address", &v));
    const uint64_t range = ctx_->limits().maxStorageBufferRange;
    const std::string exceeds = "the " + std::to_string(bytes) + "-byte arena exceeds " + ctx_->device_name() +
                                "'s maxStorageBufferRange (" + std::to_string(range) + ")";
    if (v == "binding" || (v.empty() && bytes <= range)) {
      if (bytes > range) return Status::Unsupported("vulkan backend: SGRT_VULKAN_ARENA=binding, but " + exceeds);
      return Status::Ok();
    }
    if (!ctx_->buffer_address())
      return Status::Unsupported("vulkan backend: " + (v.empty() ? exceeds + " and" : "SGRT_VULKAN_ARENA=address, but") +
                                 " the device lacks bufferDeviceAddress (Vulkan 1.2) to reach it by address");
    *by_address = true;
    return Status::Ok();
  }

  // SGRT_VULKAN_COOP=codes: qmatmuls whose operands are FP16 values exactly
  // (E4M3, E2M1 codes) on cooperative matrices; =1: f32 matmuls too (rounded to
  // FP16). A device without them is an error, not the tiled shader in silence.
  Status coop_from_env(vk::KernelOptions* opts) const {
    const char* env = std::getenv("SGRT_VULKAN_COOP");
    const std::string v = env ? env : "";
    if (v.empty() || v == "0") return Status::Ok();
    if (v != "1" && v != "codes")
      return Status::Invalid("vulkan backend: SGRT_VULKAN_COOP is 0, codes or 1, not '" + v + "'");
    if (!ctx_->coop().available)
      return Status::Unsupported("vulkan backend: SGRT_VULKAN_COOP=" + v + ", but " + ctx_->device_name() +
                                 " offers no 16x16x16 FP16 cooperative matrices at subgroup scope (" +
                                 ctx_->coop().extension + " with shaderFloat16)");
    opts->coop = v == "1";
    opts->coop_codes = true;
    return Status::Ok();
  }

  // Where products move to 64x64 tiles and to split-K: kGpuFullGrid on a GPU, 0
  // on a CPU device; SGRT_VULKAN_GEMM_TILE=64|128 and SGRT_VULKAN_SPLIT_K=0|1
  // override. SGRT_VULKAN_GEMM_THIN=0 keeps thin products off gemm_thin.
  Status grid_options(vk::KernelOptions* opts) const {
    const uint32_t gpu = ctx_->device_type() == VK_PHYSICAL_DEVICE_TYPE_CPU ? 0 : kGpuFullGrid;
    std::string tile, split, decode, thin;
    SG_TRY(env_pick("SGRT_VULKAN_GEMM_TILE", "64", "128", &tile));
    SG_TRY(env_pick("SGRT_VULKAN_SPLIT_K", "0", "1", &split));
    SG_TRY(env_pick("SGRT_VULKAN_DECODE_FIRST", "0", "1", &decode));
    SG_TRY(env_pick("SGRT_VULKAN_GEMM_THIN", "0", "1", &thin));
    opts->gemm_small_grid = tile.empty() ? gpu : tile == "64" ? UINT32_MAX : 0;
    opts->split_k_grid = split.empty() ? gpu : split == "1" ? kGpuFullGrid : 0;
    opts->decode_first = decode == "1";
    opts->gemm_thin = thin != "0";
    return Status::Ok();
  }

  uint64_t device_bytes() const override { return arena_.size + scratch_.size + errors_.size; }

  Status write(uint64_t offset, const void* src, size_t bytes) override {
    SG_TRY(check_range("write", offset, bytes));
    if (arena_.mapped) {
      std::memcpy(static_cast<uint8_t*>(arena_.mapped) + offset, src, bytes);
      return Status::Ok();
    }
    for (size_t done = 0; done < bytes;) {
      size_t n = std::min<size_t>(bytes - done, staging_.size);
      std::memcpy(staging_.mapped, static_cast<const uint8_t*>(src) + done, n);
      SG_TRY(copy(staging_.buffer, 0, arena_.buffer, offset + done, n));
      done += n;
    }
    return Status::Ok();
  }

  Status read(uint64_t offset, void* dst, size_t bytes) override {
    SG_TRY(check_range("read", offset, bytes));
    if (arena_.mapped && (!readback_.buffer || bytes <= kDirectReadBytes)) {
      std::memcpy(dst, static_cast<const uint8_t*>(arena_.mapped) + offset, bytes);
      return Status::Ok();
    }
    for (size_t done = 0; done < bytes;) {
      size_t n = std::min<size_t>(bytes - done, readback_.size);
      SG_TRY(copy(arena_.buffer, offset + done, readback_.buffer, 0, n));
      std::memcpy(static_cast<uint8_t*>(dst) + done, readback_.mapped, n);
      done += n;
    }
    return Status::Ok();
  }

  Status run(int program) override {
    if (program < 0 || program >= static_cast<int>(programs_.size())) return Status::Runtime("vulkan backend: no such program");
    const Program& p = programs_[program];
    uint32_t* tag = static_cast<uint32_t*>(errors_.mapped);
    *tag = 0;
    SG_TRY(ctx_->submit_and_wait(p.cmd).with_context("program " + p.info->name));
    if (p.timer) {
      ProgramProfile& prof = profile_of(program);
      SG_TRY(p.timer->read(&prof.op_seconds));
      ++prof.runs;
    }
    if (*tag == 0) return Status::Ok();
    const OpInfoLoaded& op = p.info->ops.at(*tag - 1);
    bool ids = op.code == OpCode::Embedding || op.code == OpCode::EmbeddingGrad;
    bool pos = op.code == OpCode::RopeAt || op.code == OpCode::KvAttention;
    return Status::Runtime(op.loc + ": " + std::string(op_info(op.code).name) +
                           (pos   ? ": its positions are negative or past the KV cache"
                            : ids ? ": an id is outside [0, vocabulary size)"
                                  : ": a label is outside [0, number of classes)"));
  }

  Status sync() override { return Status::Ok(); }  // run() waits for its program

 private:
  Status check_range(const char* what, uint64_t offset, size_t bytes) const {
    if (!arena_.buffer) return Status::Runtime(std::string("vulkan backend: ") + what + " before prepare");
    if (offset > arena_.size || bytes > arena_.size - offset)
      return Status::Runtime(std::string("vulkan backend: ") + what + " outside the arena");
    return Status::Ok();
  }

  // A transfer ordered after all earlier device work and visible to the host after.
  Status copy(VkBuffer src, uint64_t src_off, VkBuffer dst, uint64_t dst_off, uint64_t bytes) {
    return ctx_->run_once([&](VkCommandBuffer cmd) {
      vk::memory_barrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                         VK_ACCESS_MEMORY_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
      VkBufferCopy region{src_off, dst_off, bytes};
      vkCmdCopyBuffer(cmd, src, dst, 1, &region);
      vk::memory_barrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                         VK_ACCESS_HOST_READ_BIT);
    });
  }

  std::unique_ptr<vk::Context> ctx_;
  vk::Buffer arena_, staging_, readback_, errors_, scratch_, address_;
  std::unique_ptr<vk::Pipelines> pipelines_;
  std::vector<Program> programs_;
};

}  // namespace

Status make_vulkan_backend(std::unique_ptr<Backend>* out) {
  std::unique_ptr<vk::Context> ctx;
  SG_TRY(vk::Context::create(&ctx));
  *out = std::make_unique<VulkanBackend>(std::move(ctx));
  return Status::Ok();
}

}  // namespace sgrt
