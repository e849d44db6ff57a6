// A user's own data without C++ (sg.data.csv, sg.data.npy): values read equal
// the values written (CSV text; .npy files built here byte by byte from the
// NumPy format spec, numpy/doc/neps/nep-0001-npy-format: magic, version,
// little-endian header length, a dict padded to 64 bytes), malformed input
// is refused with the file, line and column, and the examples split and
// train like a built-in data set.
#include <cstring>
#include <set>

#include "harness.h"
#include "sgrt/own_data.h"
#include "sgrt/trainer.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

TensorInfo input(const std::string& name, Shape shape, DType dtype = DType::f32) {
  TensorInfo t;
  t.name = name;
  t.type = {std::move(shape), dtype};
  return t;
}

template <class T>
std::vector<T> as(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// A .npy file per the format spec; `header_len_delta` makes the length field lie.
std::string npy(const std::string& descr, const std::string& shape, const std::string& body, int major = 1,
                const std::string& fortran = "False") {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  size_t prefix = 8 + (major == 1 ? 2 : 4);
  dict += std::string((64 - (prefix + dict.size() + 1) % 64) % 64, ' ') + "\n";
  std::string f = "\x93NUMPY";
  f += static_cast<char>(major);
  f += '\0';
  for (size_t b = 0; b < (major == 1 ? 2u : 4u); ++b) f += static_cast<char>((dict.size() >> (8 * b)) & 0xff);
  return f + dict + body;
}

template <class T>
std::string raw(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

std::string read_npy_error(const std::string& file_bytes, const TensorInfo& t) {
  test::TempDir d;
  std::vector<uint8_t> v;
  int64_t n;
  Status st = read_npy(d.file("x.npy", file_bytes), t, &v, &n);
  CHECK(!st.ok());
  return st.message();
}

}  // namespace

TEST_CASE("CSV: values, header detection, label column by number or name, TSV") {
  test::TempDir d;
  TensorInfo x = input("x", {4, 3}), y = input("y", {4}, DType::i32), target = input("t", {4});
  ExampleTable t;
  REQUIRE(read_csv(d.file("a.csv", "a,b,c,cls\n1.5,-2,3e2,1\n\n0, 0.25 ,7,0\r\n"), {}, x, &y, &t).ok());
  CHECK(t.count == 2);
  CHECK(as<float>(t.features) == std::vector<float>{1.5f, -2.f, 300.f, 0.f, 0.25f, 7.f});
  CHECK(as<int32_t>(t.labels) == std::vector<int32_t>{1, 0});

  CsvOptions first;  // the label first, by number; no header
  first.label_column = "1";
  REQUIRE(read_csv(d.file("b.csv", "2,1,2,3\n3,4,5,6\n"), first, x, &y, &t).ok());
  CHECK(as<float>(t.features) == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(as<int32_t>(t.labels) == std::vector<int32_t>{2, 3});

  CsvOptions named;  // by header name, TSV from the extension, an f32 target
  named.label_column = "price";
  REQUIRE(read_csv(d.file("c.tsv", "price\tp\tq\tr\n0.5\t1\t2\t3\n"), named, x, &target, &t).ok());
  CHECK(as<float>(t.labels) == std::vector<float>{0.5f});
  CHECK(as<float>(t.features) == std::vector<float>{1, 2, 3});

  // Without a label input, a line of features only, or features and a label that is skipped.
  REQUIRE(read_csv(d.file("d.csv", "1,2,3\n"), {}, x, nullptr, &t).ok());
  CHECK(as<float>(t.features) == std::vector<float>{1, 2, 3});
  REQUIRE(read_csv(d.file("e.csv", "1,2,3,9\n"), {}, x, nullptr, &t).ok());
  CHECK(as<float>(t.features) == std::vector<float>{1, 2, 3});
  CHECK(t.labels.empty());
}

TEST_CASE("CSV: malformed lines are named by file, line and column") {
  test::TempDir d;
  TensorInfo x = input("x", {4, 3}), y = input("y", {4}, DType::i32);
  ExampleTable t;
  std::string p = d.file("bad.csv", "1,2,3,0\n\n1,2,0\n");
  CHECK(read_csv(p, {}, x, &y, &t).message() == p + ":3: 3 fields, expected 4 (3 features and a label)");
  p = d.file("word.csv", "f,g,h,l\n1,2,3,0\n1,abc,3,0\n");
  CHECK(read_csv(p, {}, x, &y, &t).message() == p + ":3:2: 'abc' is not a finite number");
  p = d.file("frac.csv", "1,2,3,0.5\n");
  CHECK(read_csv(p, {}, x, &y, &t).message() == p + ":1:4: the class label '0.5' is not a whole number >= 0");
  CsvOptions o;
  o.label_column = "cls";
  p = d.file("nohead.csv", "1,2,3,0\n");
  CHECK(read_csv(p, o, x, &y, &t).message() == p + ": no column named 'cls' (the file has no header line)");
  o.label_column = "9";
  CHECK(read_csv(p, o, x, &y, &t).message() == p + ": label_column 9 is not a column (1 to 4)");
  p = d.file("inf.csv", "1,2,3,0\n1,inf,3,0\n");
  CHECK(read_csv(p, {}, x, &y, &t).message() == p + ":2:2: 'inf' is not a finite number");
}

TEST_CASE(".npy: every dtype into f32, integers into i32, versions 1 to 3") {
  TensorInfo x = input("x", {5, 2}), y = input("y", {5}, DType::i32);
  test::TempDir d;
  std::vector<uint8_t> v;
  int64_t n = 0;
  const std::vector<float> want = {1, -2, 3, 100, -128, 0};
  struct Case { const char* descr; std::string body; };
  for (const Case& c : {Case{"<f4", raw<float>({1, -2, 3, 100, -128, 0})}, Case{"<f8", raw<double>({1, -2, 3, 100, -128, 0})},
                        Case{"|i1", raw<int8_t>({1, -2, 3, 100, -128, 0})}, Case{"<i4", raw<int32_t>({1, -2, 3, 100, -128, 0})},
                        Case{"<i8", raw<int64_t>({1, -2, 3, 100, -128, 0})}}) {
    CAPTURE(c.descr);
    for (int major = 1; major <= 3; ++major) {
      REQUIRE(read_npy(d.file("a.npy", npy(c.descr, "(3, 2)", c.body, major)), x, &v, &n).ok());
      CHECK(n == 3);
      CHECK(as<float>(v) == want);
    }
  }
  REQUIRE(read_npy(d.file("u.npy", npy("|u1", "(3,)", raw<uint8_t>({0, 200, 255}))), y, &v, &n).ok());
  CHECK(as<int32_t>(v) == std::vector<int32_t>{0, 200, 255});
  REQUIRE(read_npy(d.file("l.npy", npy("<i8", "(2,)", raw<int64_t>({7, -3}))), y, &v, &n).ok());
  CHECK(as<int32_t>(v) == std::vector<int32_t>{7, -3});
  // [N, 2, 1] flattens to the input's 2 values per example.
  REQUIRE(read_npy(d.file("r.npy", npy("<f4", "(1, 2, 1)", raw<float>({4, 5}))), x, &v, &n).ok());
  CHECK(as<float>(v) == std::vector<float>{4, 5});
}

TEST_CASE(".npy: malformed or unsuitable files are refused") {
  TensorInfo x = input("x", {5, 2}), y = input("y", {5}, DType::i32);
  std::string six = raw<float>({1, 2, 3, 4, 5, 6});
  CHECK(read_npy_error(npy("<f4", "(3, 2)", six, 1, "True"), x).find("Fortran order") != std::string::npos);
  CHECK(read_npy_error(npy(">f4", "(3, 2)", six), x).find("'>f4' is not little-endian") != std::string::npos);
  CHECK(read_npy_error(npy("<f2", "(3, 2)", six), x).find("'<f2' is not one of f4 f8 i1 u1 i4 i8") != std::string::npos);
  // Cut short, and a header that claims more rows than the file holds.
  CHECK(read_npy_error(npy("<f4", "(3, 2)", six.substr(0, 20)), x).find("more than the file's 20 bytes") != std::string::npos);
  CHECK(read_npy_error(npy("<f4", "(5, 2)", six), x).find("10 elements of 4 bytes, more than the file's 24") != std::string::npos);
  CHECK(read_npy_error(npy("<f4", "(2, 2)", six), x).find("8 bytes past the array") != std::string::npos);
  CHECK(read_npy_error(npy("<f4", "(2, 3)", six), x).find("shape (2, 3) is not examples of 2 values") != std::string::npos);
  CHECK(read_npy_error(npy("<f4", "(4294967296, 4294967296, 4294967296)", six), x).find("overflows") != std::string::npos);
  CHECK(read_npy_error(npy("<f4", "(3, 2)", six).substr(0, 9), x).find("truncated header") != std::string::npos);
  std::string lying = npy("<f4", "(3, 2)", six);
  lying[8] = '\xff';  // the header's length runs past the end
  CHECK(read_npy_error(lying, x).find("runs past the file's end") != std::string::npos);
  CHECK(read_npy_error("PK\x03\x04 not npy", x).find("no \\x93NUMPY magic") != std::string::npos);
  CHECK(read_npy_error(npy("<f4", "(3, 2)", six, 4), x).find("format version 4") != std::string::npos);
  std::string no_shape = npy("<f4", "(3, 2)", six);
  no_shape.replace(no_shape.find("'shape'"), 7, "'shapf'");
  CHECK(read_npy_error(no_shape, x).find("unknown header key 'shapf'") != std::string::npos);
  CHECK(read_npy_error(npy("<f4", "(6,)", six), y).find("f4 values cannot fill i32 input y") != std::string::npos);
  CHECK(read_npy_error(npy("<i8", "(1,)", raw<int64_t>({int64_t(1) << 40})), y).find("out of i32's range") != std::string::npos);
}

namespace {

// 2-D points, class 1 when x1 + x2 > 0 (a linearly separable set), as CSV lines.
std::string separable_csv(int n, bool header) {
  std::string s = header ? "x1,x2,cls\n" : "";
  uint32_t r = 12345;
  auto next = [&r] { return (r = r * 1664525u + 1013904223u) / 4294967296.0 * 2 - 1; };
  for (int i = 0; i < n; ++i) {
    double a = next(), b = next();
    s += std::to_string(a) + "," + std::to_string(b) + "," + (a + b > 0 ? "1" : "0") + "\n";
  }
  return s;
}

std::string csv_model(const std::string& path, int batch) {
  return "local sg = require 'sg'\n"
         "local x = sg.input('x', {" + std::to_string(batch) + ", 2})\n"
         "local y = sg.input('y', {" + std::to_string(batch) + "}, 'i32')\n"
         "local logits = sg.nn.linear(x, 2, {name = 'fc'})\n"
         "sg.loss(sg.softmax_cross_entropy(logits, y))\n"
         "sg.metric('accuracy', sg.accuracy(logits, y))\n"
         "sg.output('logits', logits)\n"
         "sg.data.csv{features = x, label = y, path = '" + path + "', header = true, label_column = 'cls'}\n"
         "sg.optimizer.adamw{lr = 0.05}\n"
         "sg.train{epochs = 20}\n";
}

}  // namespace

TEST_CASE("a CSV data set splits into train and test covering every example once, and trains to high accuracy") {
  test::TempDir d;
  std::string csv = d.file("points.csv", separable_csv(403, true));
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua(csv_model(csv, 16), &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  std::unique_ptr<Dataset> data;
  st = open_dataset(*m, "", &data, nullptr, open_own_dataset);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(data->size(Split::test) == 40);
  CHECK(data->size(Split::train) == 363);
  // Every example once: the features of both splits are the file's 403 rows.
  std::multiset<std::pair<float, float>> seen;
  TensorInfo x = input("x", {403, 2});
  for (Split s : {Split::train, Split::test}) {
    std::vector<int64_t> idx(static_cast<size_t>(data->size(s)));
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int64_t>(i);
    std::vector<float> f(idx.size() * 2);
    REQUIRE(data->gather(s, idx.data(), static_cast<int64_t>(idx.size()), "features", x, f.data()).ok());
    for (size_t i = 0; i < idx.size(); ++i) seen.insert({f[2 * i], f[2 * i + 1]});
  }
  ExampleTable all;
  REQUIRE(read_csv(csv, {}, x, nullptr, &all).ok());
  std::vector<float> rows = as<float>(all.features);
  std::multiset<std::pair<float, float>> written;
  for (size_t i = 0; i < rows.size(); i += 2) written.insert({rows[i], rows[i + 1]});
  CHECK(seen == written);

  // Batch 16 over 40 test examples (a partial last batch): eval counts all 40.
  auto s = test::open_session(m, "cpu", 1);
  TrainOptions o;
  TrainResult r;
  st = train(*s, *data, o, &r);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(r.final_eval.samples == 40);
  REQUIRE(r.final_eval.metrics.size() == 1);
  CHECK(r.final_eval.metrics[0].second >= 0.95);

  // --val-split holds out the end of the (mixed) training order.
  std::unique_ptr<Dataset> train_part, validation;
  REQUIRE(split_validation(std::shared_ptr<const Dataset>(std::move(data)), 0.25, 0, &train_part, &validation).ok());
  CHECK(train_part->size(Split::train) + validation->size(Split::test) == 363);
}

TEST_CASE("sg.data.csv and sg.data.npy check their options and inputs when compiled and opened") {
  std::shared_ptr<const Model> m;
  Status st = test::compile_lua("local sg = require 'sg'\nlocal x = sg.input('x', {4, 2})\n"
                                "sg.data.csv{features = x, delimeter = ';'}\n", &m);
  CHECK(st.message().find("unknown option 'delimeter' (did you mean 'delimiter'?") != std::string::npos);
  test::TempDir d;
  std::string csv = d.file("p.csv", "a,b,c,cls\n1,2,3,0\n4,5,6,1\n");
  REQUIRE(test::compile_lua(csv_model(csv, 4), &m).ok());
  std::unique_ptr<Dataset> data;
  st = open_dataset(*m, "", &data, nullptr, open_own_dataset);  // the model's x holds 2 features, the file 3
  CHECK(st.message() == csv + ":2: 4 fields, expected 3 (2 features and a label)");

  // npy: labels beside the features file; --data moves both.
  d.file("x.npy", npy("<f4", "(3, 2)", raw<float>({1, 2, 3, 4, 5, 6})));
  d.file("y.npy", npy("|u1", "(3,)", raw<uint8_t>({0, 1, 0})));
  st = test::compile_lua("local sg = require 'sg'\nlocal x = sg.input('x', {2, 2})\nlocal y = sg.input('y', {2}, 'i32')\n"
                         "sg.loss(sg.softmax_cross_entropy(sg.nn.linear(x, 2, {name = 'fc'}), y))\n"
                         "sg.data.npy{features = x, label = y, labels = 'y.npy'}\nsg.optimizer.sgd{lr = 0.1}\n", &m);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(open_dataset(*m, "", &data, nullptr, open_own_dataset).message() == "test.sg: sg.data.npy needs path = ... or --data FILE");
  st = open_dataset(*m, d.path + "/x.npy", &data, nullptr, open_own_dataset);
  REQUIRE_MESSAGE(st.ok(), st.message());
  CHECK(data->size(Split::train) + data->size(Split::test) == 3);
  std::vector<int32_t> labels(3);
  std::vector<float> feats(6);
  int64_t idx[2] = {0, 1};
  TensorInfo t;
  REQUIRE(data->gather(Split::train, idx, 2, "label", t, labels.data()).ok());
  REQUIRE(data->gather(Split::train, idx, 2, "features", t, feats.data()).ok());
  // Each example keeps its own label: features (1,2)->0, (3,4)->1, (5,6)->0.
  for (int i = 0; i < 2; ++i) CHECK(labels[i] == (feats[2 * i] == 3 ? 1 : 0));
}
