// The backend options' table: defaults, every value of every variable read from the environment, a bad value
// refused with the variable and its accepted values, and the record's order.
#include "kernels/backend_options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/errors.h"

namespace zb {
namespace {

// Sets an environment variable for the scope of one check.
class ScopedVariable {
 public:
  ScopedVariable(const std::string& name, const std::string& value) : name_(name) {
    setenv(name.c_str(), value.c_str(), 1);
  }
  ~ScopedVariable() { unsetenv(name_.c_str()); }

 private:
  std::string name_;
};

TEST(BackendOptions, DefaultsWhereNothingIsSet) {
  EXPECT_EQ(BackendOptions::from_environment(), BackendOptions{});
  EXPECT_EQ(BackendOptions{}.summary(),
            "attention=cudnn gemm_algorithms=timed gemm_epilogues=fused norm_rows=teams pass_recording=graphs "
            "log_level=info");
}

TEST(BackendOptions, EveryValueOfEveryRowIsReadBack) {
  for (const BackendOptionRow& row : backend_option_rows()) {
    EXPECT_FALSE(row.meaning.empty()) << row.variable;
    for (const std::string& value : row.values) {
      const ScopedVariable set(row.variable, value);
      const BackendOptions options = BackendOptions::from_environment();
      int matches = 0;
      for (const auto& [name, read] : options.settings()) {
        if (name == row.name) {
          EXPECT_EQ(read, value) << row.variable;
          ++matches;
        } else {
          const auto defaults = BackendOptions{}.settings();
          const auto it =
              std::find_if(defaults.begin(), defaults.end(), [&](const auto& d) { return d.first == name; });
          EXPECT_EQ(read, it->second) << row.variable << "=" << value << " changed " << name;
        }
      }
      EXPECT_EQ(matches, 1) << row.variable;
    }
  }
}

TEST(BackendOptions, AnEmptyValueIsTheDefaultAndABadOneIsRefused) {
  {
    const ScopedVariable set("ZB_NORM_ROWS", "");
    EXPECT_EQ(BackendOptions::from_environment().norm_rows, NormRows::teams);
  }
  const ScopedVariable set("ZB_PASS_RECORDING", "sometimes");
  try {
    BackendOptions::from_environment();
    FAIL() << "expected a UsageError";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "ZB_PASS_RECORDING=sometimes: accepted values are graphs, eager (default graphs)");
  }
}

TEST(BackendOptions, HelpHasEveryRow) {
  const std::string help = backend_options_help();
  for (const BackendOptionRow& row : backend_option_rows()) {
    EXPECT_NE(help.find(row.variable + "="), std::string::npos) << row.variable;
    EXPECT_NE(help.find(row.meaning.substr(0, 40)), std::string::npos) << row.variable;
  }
}

}  // namespace
}  // namespace zb
