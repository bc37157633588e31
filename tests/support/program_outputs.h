// What the program tests share: running a program as an MPI job on the CPU backend, and reading the files it
// left. (ZB_MPIEXEC: the mpiexec CMake found, defined for the test executable.)
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/run_program.h"

namespace zb::test {

// Ranks waiting in MPI yield the core: ctest runs other jobs beside this one, and a spinning rank would take
// the core its peer needs to reach the same collective.
inline ProgramResult run_job(const std::string& program, const std::string& arguments, int ranks = 2) {
  return run_command(std::string("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 ") +
                     ZB_MPIEXEC + " -np " + std::to_string(ranks) + " --oversubscribe --mca mpi_yield_when_idle 1 " +
                     ZB_BINARY_DIR + "/" + program + " " + arguments);
}

// The one file in `dir` whose name starts with `prefix` and ends with `suffix`.
inline std::filesystem::path only_file(const std::filesystem::path& dir, const std::string& prefix,
                                       const std::string& suffix) {
  std::vector<std::filesystem::path> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      found.push_back(entry.path());
  }
  EXPECT_EQ(found.size(), 1u) << prefix << "*" << suffix << " in " << dir;
  return found.empty() ? std::filesystem::path() : found[0];
}

inline nlohmann::ordered_json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  return nlohmann::ordered_json::parse(in);
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace zb::test
