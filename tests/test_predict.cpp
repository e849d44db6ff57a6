// `sgrt predict` end to end: a linear classifier trained by `sgrt train` on a
// CSV of linearly separable points (class 1 when x1 + x2 > 0) predicts the
// class of new points, given as CSV and as a hand-written .npy, from the
// checkpoint alone. (Image folders: tests/test_image_data.cpp.)
#include <cstring>
#include <regex>
#include <sstream>

#include "tool_runner.h"

using namespace sgrt;

namespace {

double uniform(uint32_t* r) { return (*r = *r * 1664525u + 1013904223u) / 4294967296.0 * 2 - 1; }

std::string points_csv(int n, uint32_t seed, bool labels, std::vector<int>* classes) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    double a = uniform(&seed), b = uniform(&seed);
    if (std::abs(a + b) < 0.05) b += a + b > 0 ? 0.1 : -0.1;  // keep a margin from the boundary
    int c = a + b > 0 ? 1 : 0;
    if (classes) classes->push_back(c);
    s += std::to_string(a) + "," + std::to_string(b) + (labels ? "," + std::to_string(c) : "") + "\n";
  }
  return s;
}

const char* kCsvModel =
    "local sg = require 'sg'\n"
    "local x = sg.input('x', {16, 2})\n"
    "local y = sg.input('y', {16}, 'i32')\n"
    "local logits = sg.nn.linear(x, 2, {name = 'fc'})\n"
    "sg.loss(sg.softmax_cross_entropy(logits, y))\n"
    "sg.metric('accuracy', sg.accuracy(logits, y))\n"
    "sg.output('logits', logits)\n"
    "sg.data.csv{features = x, label = y}\n"
    "sg.optimizer.adamw{lr = 0.05}\n"
    "sg.train{epochs = 30}\n";

// The class column of predict's tab-separated lines "example<TAB>class<TAB>p".
std::vector<int> predicted(const std::string& out) {
  std::vector<int> r;
  std::istringstream in(out);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    REQUIRE_MESSAGE(std::regex_match(line, m, std::regex("([0-9]+)\t([01])\t(0\\.[5-9][0-9]{3}|1\\.0000)")), line);
    CHECK(std::stoul(m[1]) == r.size());
    r.push_back(std::stoi(m[2]));
  }
  return r;
}

}  // namespace

TEST_CASE("sgrt predict: a CSV-trained classifier gets new CSV and .npy points right from its checkpoint") {
  test::TempDir d;
  std::string model = d.file("points.lua", kCsvModel), train = d.file("train.csv", points_csv(300, 7, true, nullptr));
  test::ToolResult r = test::run_tool({"train", model, "--data", train, "--checkpoint", d.path + "/ck", "--quiet"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex("accuracy ([0-9.]+) \\(")));
  CHECK(std::stod(m[1]) >= 0.95);

  std::vector<int> truth;
  std::string fresh = d.file("new.csv", points_csv(50, 99, false, &truth));
  r = test::run_tool({"predict", "--checkpoint", d.path + "/ck", "--input", fresh});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::vector<int> got = predicted(r.out);
  REQUIRE(got.size() == truth.size());
  int right = 0;
  for (size_t i = 0; i < got.size(); ++i) right += got[i] == truth[i];
  CHECK(right >= 48);

  // The same points as a .npy of f8 (format version 1, written per the spec).
  std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (50, 2), }";
  dict += std::string((64 - (10 + dict.size() + 1) % 64) % 64, ' ') + "\n";
  std::string npy = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(dict.size()) + '\0' + dict;
  uint32_t seed = 99;
  for (int i = 0; i < 50; ++i) {
    double a = uniform(&seed), b = uniform(&seed);
    if (std::abs(a + b) < 0.05) b += a + b > 0 ? 0.1 : -0.1;
    npy.append(reinterpret_cast<const char*>(&a), 8).append(reinterpret_cast<const char*>(&b), 8);
  }
  r = test::run_tool({"predict", model, "--checkpoint", d.path + "/ck", "--input", d.file("new.npy", npy), "--json"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  std::istringstream in(r.out);
  size_t i = 0, agree = 0;
  for (std::string line; std::getline(in, line); ++i) {
    REQUIRE_MESSAGE(std::regex_match(line, m, std::regex("\\{\"example\":([0-9]+),\"class\":([01]),\"probability\":[0-9.]+\\}")), line);
    CHECK(std::stoul(m[1]) == i);
    agree += i < got.size() && std::stoi(m[2]) == got[i];
  }
  CHECK(i == 50);
  CHECK(agree == 50);  // the same points, the same classes

  r = test::run_tool({"predict", "--checkpoint", d.path + "/ck", "--input", d.file("bad.csv", "1,2\n1,x\n")});
  CHECK(r.code == 2);
  CHECK(r.err.find("bad.csv:2:2: 'x' is not a finite number") != std::string::npos);
  r = test::run_tool({"predict", "--checkpoint", d.path + "/ck"});
  CHECK(r.code == 2);
  CHECK(r.err.find("predict needs --input FILE") != std::string::npos);
}
