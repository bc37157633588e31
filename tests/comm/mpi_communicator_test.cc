// MpiCommunicator on host tensors, in f32 and f64, against sums computed locally. Results are checked with
// EXPECT (not ASSERT) after each collective, so that a failing rank still joins the next collective.
#include <mpi.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/mpi_world.h"
#include "comm_test_values.h"
#include "core/errors.h"

namespace zb::test {
namespace {

template <typename T>
class MpiCommunicatorTest : public ::testing::Test {
 protected:
  static constexpr double kTolerance = sizeof(T) == 4 ? 1e-6 : 1e-13;  // relative, for sums that round

  Tensor view(std::vector<T>& values) {
    return Tensor(values.data(), Shape{int64_t(values.size())}, DTypeOf<T>::value, Device::cpu());
  }
  std::vector<T> values_of(int from, int64_t begin, int64_t end) {
    std::vector<T> values;
    for (int64_t i = begin; i < end; ++i) values.push_back(host_value<T>(from, i));
    return values;
  }
  // The sums over ranks of elements [begin, end), each in rank order.
  std::vector<T> expected_sums(int64_t begin, int64_t end) {
    std::vector<T> sums(end - begin, T(0));
    for (int r = 0; r < comm.size(); ++r)
      for (int64_t i = begin; i < end; ++i) sums[i - begin] += host_value<T>(r, i);
    return sums;
  }
  // Every rank's values for elements [0, n), concatenated in rank order.
  std::vector<T> gathered(int64_t n) {
    std::vector<T> values;
    for (int r = 0; r < comm.size(); ++r)
      for (int64_t i = 0; i < n; ++i) values.push_back(host_value<T>(r, i));
    return values;
  }

  MpiWorld world;  // MPI is already running: this one only reads the job's layout
  MpiCommunicator comm{world};
  const int rank = comm.rank();
  const int ranks = comm.size();
};

using HostTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MpiCommunicatorTest, HostTypes);

TYPED_TEST(MpiCommunicatorTest, AllReduceSumsAndEveryRankHoldsTheSameBits) {
  for (const int64_t n : {int64_t(1), int64_t(7), int64_t(1000)}) {
    std::vector<TypeParam> data = this->values_of(this->rank, 0, n);
    Tensor tensor = this->view(data);
    const CommTicket ticket = this->comm.all_reduce_sum(tensor);
    this->comm.wait(ticket);
    EXPECT_TRUE(all_close(data, this->expected_sums(0, n), this->kTolerance)) << "n " << n;

    // Bit identity: every rank's hash of its result, gathered independently of the code under test.
    const uint64_t mine = bits_hash(data.data(), data.size() * sizeof(TypeParam));
    std::vector<uint64_t> all(this->ranks);
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < this->ranks; ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << "'s bits differ, n " << n;
  }
}

TYPED_TEST(MpiCommunicatorTest, TicketsCountUp) {
  std::vector<TypeParam> data = this->values_of(this->rank, 0, 3);
  Tensor tensor = this->view(data);
  const CommTicket first = this->comm.broadcast(tensor, 0);
  const CommTicket second = this->comm.broadcast(tensor, 0);
  EXPECT_GT(first, 0);
  EXPECT_EQ(second, first + 1);
  EXPECT_THROW(this->comm.wait(second + 1), Error);
}

TYPED_TEST(MpiCommunicatorTest, ReduceScatterGivesEachRankItsSlice) {
  for (const int64_t n : {int64_t(7), int64_t(513)}) {
    std::vector<TypeParam> in = this->values_of(this->rank, 0, this->ranks * n);
    std::vector<TypeParam> out(n, std::numeric_limits<TypeParam>::quiet_NaN());
    Tensor in_tensor = this->view(in);
    Tensor out_tensor = this->view(out);
    this->comm.wait(this->comm.reduce_scatter_sum(in_tensor, out_tensor));
    EXPECT_TRUE(all_close(out, this->expected_sums(this->rank * n, (this->rank + 1) * n), this->kTolerance))
        << "n " << n;
    EXPECT_EQ(in, this->values_of(this->rank, 0, this->ranks * n)) << "in must not change";
  }
}

TYPED_TEST(MpiCommunicatorTest, ReduceScatterInPlaceChangesOnlyItsSlice) {
  const int64_t n = 7;
  std::vector<TypeParam> in = this->values_of(this->rank, 0, this->ranks * n);
  Tensor in_tensor = this->view(in);
  Tensor out_tensor = in_tensor.flat_slice(this->rank * n, (this->rank + 1) * n);
  this->comm.reduce_scatter_sum(in_tensor, out_tensor);
  // This rank's slice holds the sums; the rest of `in` is as it was.
  std::vector<TypeParam> expected = this->values_of(this->rank, 0, this->ranks * n);
  const std::vector<TypeParam> sums = this->expected_sums(this->rank * n, (this->rank + 1) * n);
  std::copy(sums.begin(), sums.end(), expected.begin() + this->rank * n);
  EXPECT_TRUE(all_close(in, expected, this->kTolerance));
}

TYPED_TEST(MpiCommunicatorTest, AllGatherConcatenatesInRankOrder) {
  for (const int64_t n : {int64_t(7), int64_t(513)}) {
    std::vector<TypeParam> in = this->values_of(this->rank, 0, n);
    std::vector<TypeParam> out(this->ranks * n, std::numeric_limits<TypeParam>::quiet_NaN());
    Tensor in_tensor = this->view(in);
    Tensor out_tensor = this->view(out);
    this->comm.all_gather(in_tensor, out_tensor);
    EXPECT_TRUE(all_close(out, this->gathered(n), 0)) << "n " << n;
  }
}

TYPED_TEST(MpiCommunicatorTest, AllGatherInPlace) {
  const int64_t n = 7;
  std::vector<TypeParam> out(this->ranks * n, std::numeric_limits<TypeParam>::quiet_NaN());
  for (int64_t i = 0; i < n; ++i) out[this->rank * n + i] = host_value<TypeParam>(this->rank, i);
  Tensor out_tensor = this->view(out);
  const Tensor in_tensor = out_tensor.flat_slice(this->rank * n, (this->rank + 1) * n);
  this->comm.all_gather(in_tensor, out_tensor);
  EXPECT_TRUE(all_close(out, this->gathered(n), 0));
}

TYPED_TEST(MpiCommunicatorTest, BroadcastFromTheLastRank) {
  const int root = this->ranks - 1;
  std::vector<TypeParam> data = this->values_of(this->rank, 0, 7);
  Tensor tensor = this->view(data);
  this->comm.broadcast(tensor, root);
  EXPECT_EQ(data, this->values_of(root, 0, 7));
  EXPECT_THROW(this->comm.broadcast(tensor, this->ranks), Error);
  EXPECT_THROW(this->comm.broadcast(tensor, -1), Error);
}

TYPED_TEST(MpiCommunicatorTest, RejectsWrongSizesAndPartialOverlap) {
  std::vector<TypeParam> in(this->ranks * 7 + 1), out(7);
  Tensor in_tensor = this->view(in);
  Tensor out_tensor = this->view(out);
  EXPECT_THROW(this->comm.reduce_scatter_sum(in_tensor, out_tensor), Error);
  EXPECT_THROW(this->comm.all_gather(out_tensor, in_tensor), Error);
  if (this->ranks > 1) {
    // A slice of the right length at the wrong place: another rank's slice, shifted by one element.
    Tensor whole = in_tensor.flat_slice(0, this->ranks * 7);
    Tensor shifted = whole.flat_slice(1, 8);
    EXPECT_THROW(this->comm.reduce_scatter_sum(whole, shifted), Error);
    EXPECT_THROW(this->comm.all_gather(shifted, whole), Error);
  }
}

class MpiCommunicatorHost : public ::testing::Test {
 protected:
  MpiWorld world;
  MpiCommunicator comm{world};
};

TEST_F(MpiCommunicatorHost, RejectsOtherDtypesByName) {
  std::vector<uint16_t> bits(4);
  Tensor bf16(bits.data(), Shape{4}, DType::bf16, Device::cpu());
  try {
    comm.all_reduce_sum(bf16);
    ADD_FAILURE() << "bf16 was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("bf16"), std::string::npos) << error.what();
  }
  Tensor on_gpu(bits.data(), Shape{2}, DType::f32, Device::cuda(0));
  EXPECT_THROW(comm.all_reduce_sum(on_gpu), Error);
}

TEST_F(MpiCommunicatorHost, SumOverRanks) {
  const int n = comm.size();
  EXPECT_DOUBLE_EQ(comm.sum_over_ranks(comm.rank() + 0.5), n * (n - 1) / 2.0 + 0.5 * n);
}

TEST_F(MpiCommunicatorHost, AllOkIsFalseWhenAnyRankFails) {
  EXPECT_TRUE(comm.all_ok(true));
  for (int failing = 0; failing < comm.size(); ++failing)
    EXPECT_FALSE(comm.all_ok(comm.rank() != failing)) << "rank " << failing << " said no";
  comm.barrier();
}

TEST_F(MpiCommunicatorHost, Describes) {
  const std::string text = comm.describe();
  EXPECT_EQ(text.rfind("MPI (", 0), 0u) << text;
  const std::string ending = comm.size() == 1 ? "), 1 rank" : cat("), ", comm.size(), " ranks");
  ASSERT_GE(text.size(), ending.size());
  EXPECT_EQ(text.substr(text.size() - ending.size()), ending) << text;
}

}  // namespace
}  // namespace zb::test
