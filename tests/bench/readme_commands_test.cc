// Every command in README.md that runs without a GPU (a command line of a code block that says --device cpu)
// runs as written, from a folder of its own, with the programs of this build: the README's advice to a new
// user cannot rot. Step counts are lowered (ZB_README_STEPS, default 2) to keep the suite quick; nothing else
// is changed. As root, Open MPI needs the two variables the README names; the test sets them as a user would.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "support/run_program.h"
#include "support/temp_dir.h"

namespace zb::test {
namespace {

// The command lines of the README's indented code blocks that run the project's programs on the CPU (a line
// ending in a backslash continues on the next).
std::vector<std::string> cpu_commands() {
  std::ifstream in(std::string(ZB_SOURCE_DIR) + "/README.md");
  std::vector<std::string> out;
  std::string line, command;
  while (std::getline(in, line)) {
    if (!command.empty()) {
      command += ' ';
      command.append(line, line.find_first_not_of(' '));
    } else if (line.rfind("    ", 0) == 0 &&
               (line.rfind("    build/bin/", 0) == 0 || line.rfind("    mpirun ", 0) == 0)) {
      command = line.substr(4);
    } else {
      continue;
    }
    if (!command.empty() && command.back() == '\\') {
      command.pop_back();
      continue;
    }
    if (command.find("--device cpu") != std::string::npos) out.push_back(command);
    command.clear();
  }
  return out;
}

TEST(ReadmeCommands, EveryCommandWithoutAGpuRunsAsWritten) {
  const std::vector<std::string> commands = cpu_commands();
  ASSERT_GE(commands.size(), 3u) << "the README's no-GPU commands were not found";
  const char* steps_variable = std::getenv("ZB_README_STEPS");
  const std::string steps = steps_variable ? steps_variable : "2";
  for (const std::string& written : commands) {
    SCOPED_TRACE(written);
    const std::string programs = std::string("$1") + ZB_BINARY_DIR + "/";
    std::string command = std::regex_replace(written, std::regex("(^|\\s)build/bin/"), programs);
    command = std::regex_replace(command, std::regex("--num-steps [0-9]+"), "--num-steps " + steps);
    if (command.find("--num-steps") == std::string::npos && command.find("_bench") != std::string::npos)
      command += " --num-steps " + steps + " --warmup-steps 1";
    TempDir dir;
    const ProgramResult r =
        run_command("cd " + dir.path().string() +
                    " && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 " + command);
    EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  }
}

}  // namespace
}  // namespace zb::test
