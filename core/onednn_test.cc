// The oneDNN loader: it loads on first use (libdnnl2 is installed by tools/setup.sh), reports its
// version and ISA, and leaves no OMP_WAIT_POLICY of its own behind; and a process that never asks
// for it never loads it.
#include "core/onednn.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace mt {
namespace {

bool Loaded(const char* library) {
  void* h = dlopen(library, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

TEST(OneDnnTest, LoadsOnFirstUseOnly) {
  // Nothing in this binary asked for oneDNN yet: linking //core:onednn does not load it.
  EXPECT_FALSE(Loaded("libdnnl.so.2"));
  EXPECT_FALSE(Loaded("libgomp.so.1"));
  ASSERT_EQ(std::getenv("OMP_WAIT_POLICY"), nullptr) << "run without OMP_WAIT_POLICY";
  const OneDnn& dnn = LoadOneDnn();
  ASSERT_TRUE(dnn.status.ok()) << dnn.status;
  EXPECT_TRUE(Loaded("libdnnl.so.2"));
  EXPECT_TRUE(Loaded("libgomp.so.1"));
  // Set for libgomp's start-up only: not inherited by child processes.
  EXPECT_EQ(std::getenv("OMP_WAIT_POLICY"), nullptr);
  EXPECT_EQ(dnn.version.rfind("oneDNN 2.", 0), 0u) << dnn.version;
  EXPECT_FALSE(dnn.isa.empty());
  EXPECT_NE(dnn.engine, nullptr);
  EXPECT_NE(dnn.set_num_threads, nullptr);
  const std::string line = DescribeOneDnn(dnn);
  EXPECT_EQ(line, dnn.version + ", ISA " + dnn.isa) << line;
  EXPECT_EQ(&LoadOneDnn(), &dnn);  // One library per process.
}

}  // namespace
}  // namespace mt
