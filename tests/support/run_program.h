// Runs one of the built programs with arguments and captures its exit code and output (stdout and stderr).
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace zb::test {

struct ProgramResult {
  int exit_code = -1;
  std::string output;
};

// A shell command line, its stderr merged into the output.
inline ProgramResult run_command(const std::string& command_line) {
  const std::string command = command_line + " 2>&1";
  ProgramResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> chunk{};
  while (size_t n = std::fread(chunk.data(), 1, chunk.size(), pipe)) result.output.append(chunk.data(), n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline ProgramResult run_program(const std::string& program, const std::string& arguments) {
  return run_command(std::string(ZB_BINARY_DIR) + "/" + program + " " + arguments);
}

}  // namespace zb::test
