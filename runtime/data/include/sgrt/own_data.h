// A user's own data (sg.data.csv, sg.data.npy, sg.data.images; docs/dsl.md):
// every example read into memory in file order, already in its inputs' dtypes,
// then served as a Dataset. The sgrt_data library (runtime/data), outside
// libsgrt: libsgrt keeps its size and its dependencies (libc, zlib); images
// need libpng and libjpeg (image_data.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "sgrt/dataset.h"

namespace sgrt {

struct ExampleTable {
  int64_t count = 0;
  int64_t feature_width = 0, label_width = 0;  // elements per example; label_width 0: no labels
  DType feature_dtype = DType::f32, label_dtype = DType::i32;
  std::vector<uint8_t> features, labels;  // count * width elements of 4 bytes (f32 or i32)
  std::vector<std::string> names;         // one per example (image files); empty otherwise
  std::vector<std::string> classes;       // class names by label (image folders); empty otherwise
};

// The input bound to `field` in the model's data binding, or null.
const TensorInfo* bound_input(const Model& model, const std::string& field);
// The binding's option `key` (sg.data.csv's delimiter, ...), or def.
std::string data_option(const Model& model, const std::string& key, const std::string& def = "");

// open_dataset's opener (dataset.h) for sg.data.csv, npy and images.
Status open_own_dataset(const Model& model, const std::string& path, std::unique_ptr<Dataset>* out);

// The table as a data set whose fields are feature_field ("features" or
// "image") and "label". Examples take a fixed pseudo-random order (the same
// every run, so a file sorted by class mixes); the last tenth of it (at least
// one example) is the test split, the rest the training split.
Status open_example_dataset(ExampleTable table, const std::string& feature_field, std::unique_ptr<Dataset>* out);

// CSV or TSV: one example a line, numbers only (features f32; the label i32
// class or an f32 target, as the label input's dtype says).
struct CsvOptions {
  char delimiter = 0;          // 0: tab for a .tsv file, else ','
  int header = -1;             // 1 yes, 0 no, -1: yes when the first line has a field that is not a number
  std::string label_column;    // 1-based number, or a header name; empty: the last column
};
Status csv_options(const Model& model, CsvOptions* out);  // from the binding's options, checked
// label null: no label column is read; a line with one field more than the
// features holds a label column that is skipped (sgrt predict on training data).
Status read_csv(const std::string& path, const CsvOptions& o, const TensorInfo& features, const TensorInfo* label,
                ExampleTable* out);

// NumPy .npy (format versions 1 to 3): little-endian f4 f8 i1 u1 i4 i8 in C
// order, first axis the examples, the rest flattening to the input's example
// size. Converted to the input's dtype: any of them to f32; integers to i32
// (an i8 value out of i32's range is an error), floats to i32 never.
struct NpyHeader {
  char kind = 0;         // 'f' float, 'i' signed, 'u' unsigned
  int item_bytes = 0;
  std::vector<int64_t> shape;
  size_t data_offset = 0;  // where the array's bytes start
  int64_t count = 0;       // elements
};
// Checks the magic, version, header dictionary and that the file holds the
// array's bytes (`size`: the whole file's). Errors name what is wrong, not the file.
Status parse_npy_header(const uint8_t* data, size_t size, NpyHeader* out);
// The file's examples as t's dtype into *values (4 bytes each); *examples: its first axis.
Status read_npy(const std::string& path, const TensorInfo& t, std::vector<uint8_t>* values, int64_t* examples);
// sg.data.npy: features from `path`, labels from the binding's "labels" file
// (a relative name is beside the features file).
Status read_npy_examples(const std::string& path, const Model& model, ExampleTable* out);

}  // namespace sgrt
