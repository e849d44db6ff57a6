// ggml's type tables: tensor type names and block layouts (ggml.c's
// type_traits), metadata value type names (gguf.cpp).
#include <iterator>

#include "sgrt/gguf.h"

namespace sgrt {
namespace {

struct TypeInfo { const char* name; int64_t block_elems, block_bytes; };

// Indexed by ggml type id; nullptr names mark removed ids (Q4_2, Q4_3, the
// repacked Q4_0_4_4 family, IQ4_NL_4_x). Q8_1 is ggml-common.h's block_q8_1
// (two f16 + 32 int8 = 36 bytes); gguf-py's table still says 40.
constexpr TypeInfo kTypes[] = {
    {"F32", 1, 4},        {"F16", 1, 2},       {"Q4_0", 32, 18},    {"Q4_1", 32, 20},
    {nullptr, 0, 0},      {nullptr, 0, 0},     {"Q5_0", 32, 22},    {"Q5_1", 32, 24},
    {"Q8_0", 32, 34},     {"Q8_1", 32, 36},    {"Q2_K", 256, 84},   {"Q3_K", 256, 110},
    {"Q4_K", 256, 144},   {"Q5_K", 256, 176},  {"Q6_K", 256, 210},  {"Q8_K", 256, 292},
    {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74}, {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
    {"IQ4_NL", 32, 18},   {"IQ3_S", 256, 110}, {"IQ2_S", 256, 82},  {"IQ4_XS", 256, 136},
    {"I8", 1, 1},         {"I16", 1, 2},       {"I32", 1, 4},       {"I64", 1, 8},
    {"F64", 1, 8},        {"IQ1_M", 256, 56},  {"BF16", 1, 2},      {nullptr, 0, 0},
    {nullptr, 0, 0},      {nullptr, 0, 0},     {"TQ1_0", 256, 54},  {"TQ2_0", 256, 66},
    {nullptr, 0, 0},      {nullptr, 0, 0},     {nullptr, 0, 0},     {"MXFP4", 32, 17},
    {"NVFP4", 64, 36},    {"Q1_0", 128, 18},
};

constexpr const char* kValueTypes[] = {"U8", "I8", "U16", "I16", "U32", "I32", "F32",
                                       "BOOL", "STRING", "ARRAY", "U64", "I64", "F64"};

}  // namespace

const char* gguf_type_name(uint32_t type) {
  return type < std::size(kTypes) ? kTypes[type].name : nullptr;
}

bool gguf_type_layout(uint32_t type, int64_t* block_elems, int64_t* block_bytes) {
  if (!gguf_type_name(type)) return false;
  *block_elems = kTypes[type].block_elems;
  *block_bytes = kTypes[type].block_bytes;
  return true;
}

const char* gguf_value_type_name(uint32_t type) {
  return type < std::size(kValueTypes) ? kValueTypes[type] : nullptr;
}

}  // namespace sgrt
