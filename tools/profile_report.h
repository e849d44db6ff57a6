// `sgrt train --profile`: where each program's time went, op by op.
#pragma once
#include <cstdio>
#include <vector>

#include "sgrt/backend.h"

namespace sgrt::tool {

// For each program that ran: its time per run summed over ops, then the ops
// grouped by kind and the slowest ops with their outputs and script lines.
void print_profile(const Model& m, const char* backend, const std::vector<ProgramProfile>& profile, std::FILE* out);

}  // namespace sgrt::tool
