#pragma once
// Benchmarks start and stop their own cluster by running this very executable (`up`, `down`)
// as a child, with its chatter on stdout kept out of the report.
#include "runtime/process.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace dls::cli {

/// Runs `dilaserve ARGS...` and waits; its exit status (128 when it did not exit normally).
inline int run_self(std::vector<std::string> args) {
  args.insert(args.begin(), runtime::self_executable());
  std::vector<char*> c;
  for (auto& a : args) c.push_back(a.data());
  c.push_back(nullptr);
  std::fflush(stdout);
  int pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_WRONLY);
    ::dup2(devnull, 1);
    ::execv(c[0], c.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace dls::cli
