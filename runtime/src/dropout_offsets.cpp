// A data-parallel rank's dropout masks (sgrt/data_parallel.h): element i of
// rank r's x is element r n + i of the global batch's x (n elements a rank;
// the batch is x's outermost axis), so its counter starts at r n.
#include "sgrt/data_parallel.h"

namespace sgrt {

void place_dropout_masks(Model* m, int rank) {
  for (size_t p = 0; p < m->programs().size(); ++p)
    for (OpInfoLoaded& op : m->program(static_cast<int>(p)).ops)
      if (op.code == OpCode::Dropout)
        op.attrs.set_i("offset", static_cast<int64_t>(rank) * static_cast<int64_t>(m->tensors()[op.in[0]].bytes / sizeof(float)));
}

}  // namespace sgrt
