// sg.data.csv: numeric CSV/TSV, one example a line (own_data.h).
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "sgrt/file_io.h"
#include "sgrt/own_data.h"

namespace sgrt {
namespace {

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// A field without surrounding blanks and double quotes.
std::string trimmed(const std::string& f) {
  size_t b = f.find_first_not_of(" \t"), e = f.find_last_not_of(" \t");
  std::string s = b == std::string::npos ? "" : f.substr(b, e - b + 1);
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
  return s;
}

std::vector<std::string> split(const std::string& line, char delimiter) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t i = 0; i <= line.size(); ++i)
    if (i == line.size() || line[i] == delimiter) {
      fields.push_back(trimmed(line.substr(start, i - start)));
      start = i + 1;
    }
  return fields;
}

bool parse_number(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return *end == '\0' && errno != ERANGE && std::isfinite(*out);
}

bool all_numbers(const std::vector<std::string>& fields) {
  double v;
  for (const std::string& f : fields)
    if (!parse_number(f, &v)) return false;
  return true;
}

// The lines of the file, numbered from 1, without '\r' and blank lines.
std::vector<std::pair<int64_t, std::string>> lines_of(const std::vector<uint8_t>& bytes) {
  std::vector<std::pair<int64_t, std::string>> lines;
  int64_t number = 0;
  size_t start = 0;
  for (size_t i = 0; i <= bytes.size(); ++i)
    if (i == bytes.size() || bytes[i] == '\n') {
      ++number;
      std::string line(bytes.begin() + static_cast<std::ptrdiff_t>(start), bytes.begin() + static_cast<std::ptrdiff_t>(i));
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back({number, line});
      start = i + 1;
    }
  return lines;
}

// The label column's 0-based index in lines of `width` fields.
Status find_label_column(const std::string& path, const CsvOptions& o, const std::vector<std::string>* header,
                         size_t width, size_t* out) {
  if (o.label_column.empty()) {
    *out = width - 1;
    return Status::Ok();
  }
  char* end = nullptr;
  long n = std::strtol(o.label_column.c_str(), &end, 10);
  if (*end == '\0') {
    if (n < 1 || static_cast<size_t>(n) > width)
      return Status::Invalid(path + ": label_column " + o.label_column + " is not a column (1 to " + std::to_string(width) + ")");
    *out = static_cast<size_t>(n - 1);
    return Status::Ok();
  }
  if (header)
    for (size_t i = 0; i < header->size(); ++i)
      if ((*header)[i] == o.label_column) {
        *out = i;
        return Status::Ok();
      }
  return Status::Invalid(path + ": no column named '" + o.label_column + "'" + (header ? "" : " (the file has no header line)"));
}

}  // namespace

Status csv_options(const Model& model, CsvOptions* out) {
  std::string d = data_option(model, "delimiter"), h = data_option(model, "header");
  if (d == "\\t" || d == "tab") d = "\t";
  if (d.size() > 1 || d == "\n" || d == "\"")
    return Status::Invalid(model.label() + ": sg.data.csv's delimiter must be one character, got '" + d + "'");
  if (!h.empty() && h != "true" && h != "false")
    return Status::Invalid(model.label() + ": sg.data.csv's header must be true or false, got '" + h + "'");
  out->delimiter = d.empty() ? 0 : d[0];
  out->header = h.empty() ? -1 : h == "true";
  out->label_column = data_option(model, "label_column");
  return Status::Ok();
}

Status read_csv(const std::string& path, const CsvOptions& o, const TensorInfo& features, const TensorInfo* label,
                ExampleTable* out) {
  if (features.type.dtype != DType::f32 || features.type.shape.empty())
    return Status::Invalid("input " + features.name + " " + type_str(features.type) + " cannot hold CSV features (f32 [batch, ...])");
  if (label && (label->type.dtype != DType::f32 && label->type.dtype != DType::i32))
    return Status::Invalid("input " + label->name + " " + type_str(label->type) + " cannot hold a CSV label (i32 class or f32 target)");
  if (label && numel(label->type.shape) != label->type.shape[0])
    return Status::Invalid("input " + label->name + " " + type_str(label->type) + ": a CSV line has one label ([batch])");
  std::vector<uint8_t> bytes;
  SG_TRY(read_file(path, &bytes));
  char delimiter = o.delimiter ? o.delimiter : ends_with(path, ".tsv") ? '\t' : ',';
  auto lines = lines_of(bytes);
  size_t first = 0;
  std::vector<std::string> header;
  if (!lines.empty() && (o.header == 1 || (o.header == -1 && !all_numbers(split(lines[0].second, delimiter))))) {
    header = split(lines[0].second, delimiter);
    first = 1;
  }
  if (first == lines.size()) return Status::Invalid(path + ": no examples (the file has no data lines)");
  const size_t width = static_cast<size_t>(numel(features.type.shape) / features.type.shape[0]);
  // Without a label input, a line may still carry the label column: skip it.
  bool has_label_column = label || split(lines[first].second, delimiter).size() == width + 1;
  size_t fields_per_line = width + (has_label_column ? 1 : 0), label_at = fields_per_line;
  if (has_label_column) SG_TRY(find_label_column(path, o, first ? &header : nullptr, fields_per_line, &label_at));
  *out = ExampleTable{};
  out->feature_width = static_cast<int64_t>(width);
  out->label_width = label ? 1 : 0;
  out->label_dtype = label ? label->type.dtype : DType::i32;
  std::vector<float> x, y_f32;
  std::vector<int32_t> y_i32;
  for (size_t l = first; l < lines.size(); ++l) {
    const std::string where = path + ":" + std::to_string(lines[l].first);
    std::vector<std::string> f = split(lines[l].second, delimiter);
    if (f.size() != fields_per_line)
      return Status::Invalid(where + ": " + std::to_string(f.size()) + " fields, expected " + std::to_string(fields_per_line) +
                             " (" + std::to_string(width) + " features" + (has_label_column ? " and a label)" : ")"));
    for (size_t c = 0; c < f.size(); ++c) {
      double v;
      if (!parse_number(f[c], &v))
        return Status::Invalid(where + ":" + std::to_string(c + 1) + ": '" + f[c] + "' is not a finite number");
      if (c != label_at) x.push_back(static_cast<float>(v));
      else if (label && label->type.dtype == DType::f32) y_f32.push_back(static_cast<float>(v));
      else if (label && (v != std::floor(v) || v < 0 || v > 2147483647.0))
        return Status::Invalid(where + ":" + std::to_string(c + 1) + ": the class label '" + f[c] + "' is not a whole number >= 0");
      else if (label) y_i32.push_back(static_cast<int32_t>(v));
    }
  }
  out->count = static_cast<int64_t>(lines.size() - first);
  out->features.resize(x.size() * 4);
  std::memcpy(out->features.data(), x.data(), out->features.size());
  const void* y = out->label_dtype == DType::f32 ? static_cast<const void*>(y_f32.data()) : y_i32.data();
  out->labels.resize((y_f32.size() + y_i32.size()) * 4);
  if (!out->labels.empty()) std::memcpy(out->labels.data(), y, out->labels.size());
  return Status::Ok();
}

}  // namespace sgrt
