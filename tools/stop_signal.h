// SIGINT and SIGTERM during `sgrt train`: the first one asks the trainer to
// finish its step, save and stop; a second one ends the process at once.
#pragma once
#include <csignal>

namespace sgrt::tool {

// Installs the handlers; the flag holds the signal's number once one came.
const volatile std::sig_atomic_t* catch_stop_signals();
// 128 + the signal's number once one came (the shell's convention), else 0.
int stop_exit_code();
const char* stop_signal_name();

}  // namespace sgrt::tool
