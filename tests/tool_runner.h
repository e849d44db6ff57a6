// Running the real sgrt command line from a test: a scratch folder and one
// invocation with stdout and stderr captured (tests/test_checkpoint*.cpp,
// tests/test_cli_errors.cpp, tests/test_optimizer.cpp).
#pragma once
#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace sgrt::test {

inline const std::string kTool = SGRT_BINARY_DIR "/tools/sgrt";

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A fresh folder under /tmp; removed with its plain files (one level of
// subfolders) at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/sgrt_tool_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { remove_tree(path, 1); }
  std::string file(const std::string& name, const std::string& content) const {
    std::string p = path + "/" + name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  // The names in the folder (not in its subfolders).
  std::set<std::string> list() const {
    std::set<std::string> names;
    if (DIR* d = opendir(path.c_str())) {
      while (dirent* e = readdir(d))
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) names.insert(e->d_name);
      closedir(d);
    }
    return names;
  }
  static void remove_tree(const std::string& dir, int depth) {
    if (DIR* d = opendir(dir.c_str())) {
      while (dirent* e = readdir(d)) {
        if (!std::strcmp(e->d_name, ".") || !std::strcmp(e->d_name, "..")) continue;
        std::string p = dir + "/" + e->d_name;
        if (std::remove(p.c_str()) != 0 && depth > 0) remove_tree(p, depth - 1);
      }
      closedir(d);
    }
    rmdir(dir.c_str());
  }
};

struct ToolResult {
  bool exited = false;  // exited normally (code holds its status)
  int code = -1, signal = 0;
  std::string out, err;
};

// The tool started in the background from the repository root, its stdout
// and stderr going to files; wait() collects it.
struct RunningTool {
  pid_t pid = -1;
  TempDir io;
  ToolResult wait() {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    ToolResult r;
    r.exited = WIFEXITED(status);
    if (r.exited) r.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    r.out = slurp(io.path + "/stdout");
    r.err = slurp(io.path + "/stderr");
    REQUIRE_MESSAGE(r.code != 127, "could not run the program");
    return r;
  }
};

// `program` with `args`, started from the repository root; in_child runs in
// the child before exec (e.g. to set a resource limit).
inline void start_program(const std::string& program, const std::vector<std::string>& args, RunningTool* t,
                          void (*in_child)() = nullptr) {
  std::string out = t->io.path + "/stdout", err = t->io.path + "/stderr";
  t->pid = fork();
  REQUIRE(t->pid >= 0);
  if (t->pid == 0) {
    int fo = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fe = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fo < 0 || fe < 0 || dup2(fo, 1) < 0 || dup2(fe, 2) < 0 || chdir(SGRT_SOURCE_DIR) != 0) _exit(127);
    if (in_child) in_child();
    std::vector<char*> argv{const_cast<char*>(program.c_str())};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
}

inline void start_tool(const std::vector<std::string>& args, RunningTool* t, void (*in_child)() = nullptr) {
  start_program(kTool, args, t, in_child);
}

// A shell command line run from the repository root (environment assignments,
// mpirun, a `:`-separated MPMD launch), its stdout and stderr captured.
inline ToolResult run_shell(const std::string& command) {
  RunningTool t;
  start_program("/bin/sh", {"-c", command}, &t);
  return t.wait();
}

// Runs the tool with `args` from the repository root.
inline ToolResult run_tool(const std::vector<std::string>& args, void (*in_child)() = nullptr) {
  RunningTool t;
  start_tool(args, &t, in_child);
  return t.wait();
}

}  // namespace sgrt::test
