// What the tool says about itself, and what the README and docs say about it:
//  - sgrt --version; sgrt COMMAND --help explains every flag the command
//    accepts, and the README's command-line synopsis lists exactly those;
//  - --threads N (by default the cores the affinity mask allows); the start header
//    and the progress lines (ETA, tokens/s);
//  - every relative link in README.md and docs/ resolves inside the repository.
#include <dirent.h>
#include <sched.h>
#include <sys/stat.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "harness.h"
#include "tool_runner.h"

using namespace sgrt;

namespace {

const std::vector<std::string> kCommands = {"compile", "info", "train", "eval", "predict", "export", "run", "export-weights", "ops"};

std::set<std::string> flags_in(const std::string& text) {
  std::set<std::string> r;
  static const std::regex flag("(^|[ \\[])(--[a-z][a-z-]*|-o)\\b");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), flag); it != std::sregex_iterator(); ++it)
    r.insert((*it)[2] == "-o" ? "--output" : (*it)[2].str());
  return r;
}

// The README's "## Command line" block: each `sgrt COMMAND` synopsis with its continuation lines.
std::map<std::string, std::string> readme_synopses() {
  std::istringstream in(test::slurp(SGRT_SOURCE_DIR "/README.md"));
  std::map<std::string, std::string> r;
  std::string line, current;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) inside = line == "## Command line";
    if (!inside) continue;
    std::smatch m;
    if (std::regex_match(line, m, std::regex(" {4}sgrt ([a-z-]+) .*"))) current = m[1];
    else if (line.rfind("     ", 0) != 0) current.clear();  // a continuation is indented further
    if (!current.empty()) r[current] += line + "\n";
  }
  return r;
}

}  // namespace

TEST_CASE("sgrt --version names the version, the formats it reads and its backends") {
  test::ToolResult r = test::run_tool({"--version"});
  CHECK(r.code == 0);
  CHECK(std::regex_search(r.out, std::regex("^sgrt [0-9]+\\.[0-9]+\\.[0-9]+ \\(model schema v3, checkpoint format v5, backends: cpu")));
}

TEST_CASE("every command's --help explains each flag it accepts, and the README lists the same flags") {
  std::map<std::string, std::string> readme = readme_synopses();
  for (const std::string& cmd : kCommands) {
    CAPTURE(cmd);
    test::ToolResult r = test::run_tool({cmd, "--help"});
    REQUIRE(r.code == 0);
    std::set<std::string> explained;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_match(line, m, std::regex("  (--[a-z-]+)( [^ ]+)? {2,}[a-zA-Z(].*"))) explained.insert(m[1]);
    }
    explained.erase("--help");
    CHECK((cmd == "ops" || !explained.empty()));  // ops alone takes no flag
    CHECK(flags_in(r.out.substr(0, r.out.find('\n'))) == explained);  // the usage line lists each explained flag
    // Each explained flag is accepted (a bad value or a missing model may fail, but not as an unknown flag).
    for (const std::string& f : explained) {
      test::ToolResult t = test::run_tool({cmd, f, "x"});
      CHECK_MESSAGE(t.err.find("unknown flag") == std::string::npos, f << ": " << t.err);
    }
    REQUIRE_MESSAGE(readme.count(cmd), "README.md has no synopsis of sgrt " << cmd);
    CHECK(flags_in(readme[cmd]) == explained);
  }
}

TEST_CASE("--threads N, the start header and the progress lines") {
  test::ToolResult r = test::run_tool({"train", "models/fashion_mlp.lua", "--set", "hidden=16", "--set", "batch=6000",
                                       "--steps", "4", "--log-every", "2", "--threads", "1"});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  // 784 x 16 + 16 + 16 x 10 + 10 parameters.
  CHECK_MESSAGE(std::regex_search(r.err, std::regex("^sgrt train: models/fashion_mlp.lua, 12730 parameters, backend cpu, "
                                                    "recipe fp32, threads 1, arena [0-9.]+ MiB\n")),
                r.err);
  // Not a terminal: one line per logged step, with the time left.
  CHECK(std::regex_search(r.err, std::regex("\nstep 2/4  epoch 0  loss [0-9.]+  lr [0-9.e-]+  [0-9]+ samples/s  ETA 0m0[0-9]s\n")));
  CHECK(std::regex_search(r.err, std::regex("\nstep 4/4 .* ETA 0m00s\n")));
  test::ToolResult bad = test::run_tool({"train", "models/fashion_mlp.lua", "--threads", "0"});
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--threads expects a count from 1") != std::string::npos);
  // Without --threads: the cores the process may use, one under `taskset -c CPU`;
  // more threads than that are taken, with a warning.
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0 && CPU_COUNT(&mask) >= 2) {
    auto on_one_core = [](std::vector<std::string> extra) {
      std::vector<std::string> args = {"train", "models/fashion_mlp.lua", "--set", "hidden=16", "--set", "batch=6000",
                                       "--steps", "1"};
      args.insert(args.end(), extra.begin(), extra.end());
      return test::run_tool(args, [] {
        unsetenv("SGRT_NUM_THREADS");
        cpu_set_t all, one;
        sched_getaffinity(0, sizeof all, &all);
        int first = 0;
        while (!CPU_ISSET(first, &all)) ++first;
        CPU_ZERO(&one);
        CPU_SET(first, &one);
        sched_setaffinity(0, sizeof one, &one);
      });
    };
    r = on_one_core({});
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK_MESSAGE(r.err.find(", threads 1, arena") != std::string::npos, r.err);
    CHECK(r.err.find("warning") == std::string::npos);
    r = on_one_core({"--threads", "2"});
    REQUIRE_MESSAGE(r.code == 0, r.err);
    CHECK_MESSAGE(r.err.find(", threads 2, arena") != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find("sgrt: warning: --threads 2 is more than the 1 core this process may use") !=
                      std::string::npos,
                  r.err);
  } else {
    MESSAGE("skipped the one-core run: this process's mask allows one core");
  }

  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  test::TempFile corpus(".txt", text);
  r = test::run_tool({"train", "models/gpt.lua", "--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2", "--set",
                      "block=8", "--set", "batch=4", "--steps", "2", "--log-every", "1", "--data", corpus.path});
  REQUIRE_MESSAGE(r.code == 0, r.err);
  CHECK_MESSAGE(std::regex_search(r.err, std::regex("\nstep 1/2 .*  [0-9]+ tokens/s  ETA")), r.err);
}

TEST_CASE("every relative link in README.md and docs/ resolves inside the repository") {
  std::vector<std::string> pages = {"README.md"};
  if (DIR* d = opendir(SGRT_SOURCE_DIR "/docs")) {
    while (dirent* e = readdir(d))
      if (std::regex_match(e->d_name, std::regex(".*\\.md"))) pages.push_back(std::string("docs/") + e->d_name);
    closedir(d);
  }
  // Markdown links, and paths from the repository root in code spans (`docs/recipes.md`).
  static const std::regex link("\\]\\(([^)#:]+)(#[^)]*)?\\)|`((bench|compiler|docs|dsl|examples|kernels|models|runtime|scripts|"
                               "tests|tools)/[A-Za-z0-9_./-]+\\.[a-z]+)`");
  for (const std::string& page : pages) {
    std::string text = test::slurp(SGRT_SOURCE_DIR "/" + page);
    CHECK_MESSAGE(text.find("../shared") == std::string::npos, page << " points outside the repository");
    std::string base = page.find('/') == std::string::npos ? "" : page.substr(0, page.rfind('/') + 1);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), link); it != std::sregex_iterator(); ++it) {
      std::string target = (*it)[1].matched ? (*it)[1].str() : (*it)[3].str();
      bool found = false;  // from the page's folder or the repository root
      for (const std::string& from : {base, std::string()}) {
        struct stat st {};
        found |= ::stat((SGRT_SOURCE_DIR "/" + from + target).c_str(), &st) == 0;
      }
      CHECK_MESSAGE(found, page << " refers to missing " << target);
    }
  }
}

TEST_CASE("the README's first command builds only the sgrt tool; scripts/test.sh builds in its own folder") {
  std::string readme = test::slurp(SGRT_SOURCE_DIR "/README.md");
  std::smatch first;
  REQUIRE(std::regex_search(readme, first, std::regex("\n    (bash scripts/setup.sh [^\n]*)\n")));
  CHECK_MESSAGE(first[1].str().find("cmake --build build --target sgrt &&") != std::string::npos, first[1]);
  std::string script = test::slurp(SGRT_SOURCE_DIR "/scripts/test.sh");
  CHECK(script.find("build=${BUILD_DIR:-build-test}") != std::string::npos);
  CHECK(script.find(":-build}") == std::string::npos);
}
