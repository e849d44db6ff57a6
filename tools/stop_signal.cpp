#include "stop_signal.h"

#include <signal.h>

namespace sgrt::tool {
namespace {

volatile std::sig_atomic_t g_signal = 0;

void on_signal(int sig) { g_signal = sig; }

}  // namespace

const volatile std::sig_atomic_t* catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESETHAND;  // the second signal takes its default action
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return &g_signal;
}

int stop_exit_code() { return g_signal ? 128 + g_signal : 0; }

const char* stop_signal_name() { return g_signal == SIGINT ? "SIGINT" : g_signal == SIGTERM ? "SIGTERM" : "a signal"; }

}  // namespace sgrt::tool
