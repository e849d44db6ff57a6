// sgrt's files (.sg models, checkpoints) end in an 8-byte footer: the CRC-32
// of everything before it (little endian) and the magic "SGCK". The footer
// catches bit flips and truncation before any field is trusted. A .sg file is
// a FlatBuffer (identifier "SGIR") followed by the footer.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "sgrt/status.h"

namespace sgrt {

// The schema version this build writes. A reader takes files of its version
// or older (docs/ir.md): 2 made Tensor.scale the only scale plan (quantize and
// qmatmul lost their scale attributes) and added an input's value range; 3
// added gradient accumulation (TrainConfig.accumulate: an older reader would
// run train_step alone) and the q8_0/q4_1 block dtypes.
constexpr uint32_t kSchemaVersion = 3;

// An op's version, the one this build writes and the newest it reads, is
// ops.def's version column (op_info(code).version). quantize and qmatmul are 2:
// their scale plan is their tensors' spec, not attributes (a version-1 one is
// upgraded as it is read, ir/include/sgrt/scale_codec.h).
constexpr size_t kFooterBytes = 8;

// The footer of a file whose bytes before it have CRC-32 `crc` (streamed writers).
void footer_of(uint32_t crc, uint8_t out[kFooterBytes]);
void append_footer(std::vector<uint8_t>* bytes);
// On success *payload is the file's size without its footer. `checked`, when
// given, is told each range (offset, bytes) as soon as it is checksummed: a
// reader of a mapped file releases those pages (sgrt/mapped_file.h).
Status check_footer(const uint8_t* data, size_t size, size_t* payload,
                    const std::function<void(size_t, size_t)>& checked = {});
// Ok for 1 <= version <= kSchemaVersion; newer: "written by schema version N,
// this reader takes ≤ M".
Status check_schema_version(uint32_t version);

}  // namespace sgrt
