// im2col and col2im (semantics: core/include/sgrt/im2col.h): im2col.comp, one
// invocation per output element, the geometry in the push constants.
#include "lowering.h"
#include "sgrt/im2col.h"

namespace sgrt::vk {

Status im2col(const Ctx& c, Dispatch* d, std::vector<Dispatch>*) {
  Im2colGeometry g;
  SG_TRY(im2col_geometry(c.op.code, c.in(0).type.shape, c.op.attrs, &g));
  // The shader indexes in 32 bits.
  if (g.patches_numel() >= (int64_t{1} << 32))
    return Status::Unsupported("the vulkan backend's im2col indexes fewer than 2^32 patch elements");
  const int64_t dims[8] = {g.n, g.h, g.w, g.c, g.kh, g.kw, g.sh, g.sw}, rest[4] = {g.ph, g.pw, g.ho, g.wo};
  for (int k = 0; k < 8; ++k) d->push.dim[k] = static_cast<uint32_t>(dims[k]);
  for (int k = 0; k < 4; ++k) d->push.stride[k] = static_cast<uint32_t>(rest[k]);
  d->shader = "im2col";
  d->push.off[0] = c.word(c.in(0));
  d->push.off[2] = c.word(c.out(0));
  d->push.n = static_cast<uint32_t>(numel(c.out(0).type.shape));
  d->groups[0] = groups_for(d->push.n, c.opts);
  return Status::Ok();
}

}  // namespace sgrt::vk
