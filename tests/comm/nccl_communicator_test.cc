// NcclCommunicator on device buffers, in f32 and bf16, one GPU per rank; skipped unless every rank has a
// GPU of its own. Each input is uploaded on the compute stream just before the collective, from pinned
// memory (so the copy really is asynchronous), into a buffer full of NaN, and each result is downloaded
// on the compute stream after wait(ticket): a collective that did not wait for the compute stream, or a
// wait that did not order the download after the collective, shows up as NaN or as the input.
// Values are exact in bf16 and so are their sums, so results are compared exactly.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "comm/mpi_world.h"
#include "comm/nccl_communicator.h"
#include "comm_test_values.h"
#include "core/cuda_check.h"
#include "core/cuda_devices.h"

namespace zb::test {
namespace {

// Owns device or pinned host memory.
class CudaBuffer {
 public:
  CudaBuffer(size_t bytes, bool pinned_host) : pinned_host_(pinned_host) {
    if (pinned_host_) {
      ZB_CUDA_CHECK(cudaMallocHost(&data_, bytes));
    } else {
      ZB_CUDA_CHECK(cudaMalloc(&data_, bytes));
    }
  }
  ~CudaBuffer() {
    if (pinned_host_) {
      cudaFreeHost(data_);
    } else {
      cudaFree(data_);
    }
  }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  bool pinned_host_;
};

std::vector<float> values_of(int rank, int64_t begin, int64_t end) {
  std::vector<float> values;
  for (int64_t i = begin; i < end; ++i) values.push_back(device_value(rank, i));
  return values;
}

class NcclCommunicatorTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    // Decided together, so that all ranks skip or none does.
    if (!host.all_ok(cuda_device_count() >= world.local_size())) {
      GTEST_SKIP() << "needs one GPU per rank on each host (" << world.local_size() << " here)";
    }
    device = world.local_rank();
    ZB_CUDA_CHECK(cudaSetDevice(device));
    ZB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    comm = std::make_unique<NcclCommunicator>(world, device, stream);
  }

  void TearDown() override {
    if (stream != nullptr) cudaStreamSynchronize(stream);  // nothing queued may outlive its buffers
    comm.reset();
    staging.clear();
    buffers.clear();
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  DType dtype() const { return GetParam(); }

  // A device tensor of n elements, every byte 0xFF (NaN in f32 and bf16) before anything is queued.
  Tensor poisoned(int64_t n) {
    const size_t bytes = size_t(n) * dtype_size(dtype());
    buffers.push_back(std::make_unique<CudaBuffer>(bytes, false));
    ZB_CUDA_CHECK(cudaMemset(buffers.back()->data(), 0xFF, bytes));
    ZB_CUDA_CHECK(cudaDeviceSynchronize());
    return Tensor(buffers.back()->data(), Shape{n}, dtype(), Device::cuda(device));
  }

  // Queues the copy of `values` into `target` on the compute stream.
  void upload(const std::vector<float>& values, const Tensor& target) {
    ASSERT_EQ(int64_t(values.size()), target.numel());
    staging.push_back(std::make_unique<CudaBuffer>(target.bytes(), true));
    if (dtype() == DType::bf16) {
      const std::vector<uint16_t> bits = to_bf16(values);
      std::memcpy(staging.back()->data(), bits.data(), target.bytes());
    } else {
      std::memcpy(staging.back()->data(), values.data(), target.bytes());
    }
    ZB_CUDA_CHECK(cudaMemcpyAsync(target.data, staging.back()->data(), target.bytes(), cudaMemcpyHostToDevice, stream));
  }

  // Copies `source` back on the compute stream and waits for it.
  std::vector<float> download(const Tensor& source) {
    CudaBuffer pinned(source.bytes(), true);
    ZB_CUDA_CHECK(cudaMemcpyAsync(pinned.data(), source.data, source.bytes(), cudaMemcpyDeviceToHost, stream));
    ZB_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> values(source.numel());
    if (dtype() == DType::bf16) {
      const auto* bits = static_cast<const uint16_t*>(pinned.data());
      for (size_t i = 0; i < values.size(); ++i) values[i] = bf16_bits_to_float(bits[i]);
    } else {
      std::memcpy(values.data(), pinned.data(), source.bytes());
    }
    return values;
  }

  // The sums over ranks of elements [begin, end).
  std::vector<float> expected_sums(int64_t begin, int64_t end) const {
    std::vector<float> sums(end - begin, 0.0f);
    for (int r = 0; r < ranks; ++r)
      for (int64_t i = begin; i < end; ++i) sums[i - begin] += device_value(r, i);
    return sums;
  }
  // Every rank's values for elements [0, n), concatenated in rank order.
  std::vector<float> gathered(int64_t n) const {
    std::vector<float> values;
    for (int r = 0; r < ranks; ++r)
      for (int64_t i = 0; i < n; ++i) values.push_back(device_value(r, i));
    return values;
  }

  MpiWorld world;  // MPI is already running: this one only reads the job's layout
  MpiCommunicator host{world};
  const int rank = world.rank();
  const int ranks = world.size();
  int device = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<NcclCommunicator> comm;
  std::vector<std::unique_ptr<CudaBuffer>> staging;
  std::vector<std::unique_ptr<CudaBuffer>> buffers;
};

INSTANTIATE_TEST_SUITE_P(Dtypes, NcclCommunicatorTest, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& param_info) { return std::string(dtype_name(param_info.param)); });

TEST_P(NcclCommunicatorTest, AllReduceSumsAndEveryRankHoldsTheSameBits) {
  for (const int64_t n : {int64_t(7), int64_t(1 << 20) + 3}) {
    Tensor data = poisoned(n);
    upload(values_of(rank, 0, n), data);
    comm->wait(comm->all_reduce_sum(data));
    const std::vector<float> result = download(data);
    EXPECT_TRUE(all_close(result, expected_sums(0, n), 0)) << "n " << n;

    const uint64_t mine = bits_hash(result.data(), result.size() * sizeof(float));
    std::vector<uint64_t> all(ranks);
    MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << "'s bits differ";
  }
}

TEST_P(NcclCommunicatorTest, ReduceScatterGivesEachRankItsSlice) {
  for (const int64_t n : {int64_t(7), int64_t(1 << 18) + 1}) {
    Tensor in = poisoned(ranks * n);
    Tensor out = poisoned(n);
    upload(values_of(rank, 0, ranks * n), in);
    comm->wait(comm->reduce_scatter_sum(in, out));
    const std::vector<float> result = download(out);
    EXPECT_TRUE(all_close(result, expected_sums(rank * n, (rank + 1) * n), 0)) << "n " << n;
  }
}

TEST_P(NcclCommunicatorTest, ReduceScatterInPlace) {
  const int64_t n = 7;
  Tensor in = poisoned(ranks * n);
  Tensor out = in.flat_slice(rank * n, (rank + 1) * n);
  upload(values_of(rank, 0, ranks * n), in);
  comm->wait(comm->reduce_scatter_sum(in, out));
  const std::vector<float> result = download(out);
  EXPECT_TRUE(all_close(result, expected_sums(rank * n, (rank + 1) * n), 0));
}

TEST_P(NcclCommunicatorTest, AllGatherConcatenatesInRankOrder) {
  for (const int64_t n : {int64_t(7), int64_t(1 << 18) + 1}) {
    Tensor in = poisoned(n);
    Tensor out = poisoned(ranks * n);
    upload(values_of(rank, 0, n), in);
    comm->wait(comm->all_gather(in, out));
    const std::vector<float> result = download(out);
    EXPECT_TRUE(all_close(result, gathered(n), 0)) << "n " << n;
  }
}

TEST_P(NcclCommunicatorTest, AllGatherInPlace) {
  const int64_t n = 7;
  Tensor out = poisoned(ranks * n);
  Tensor in = out.flat_slice(rank * n, (rank + 1) * n);
  upload(values_of(rank, 0, n), in);
  comm->wait(comm->all_gather(in, out));
  const std::vector<float> result = download(out);
  EXPECT_TRUE(all_close(result, gathered(n), 0));
}

TEST_P(NcclCommunicatorTest, BroadcastFromTheLastRank) {
  const int root = ranks - 1;
  Tensor data = poisoned(1000);
  upload(values_of(rank, 0, 1000), data);
  comm->wait(comm->broadcast(data, root));
  EXPECT_TRUE(all_close(download(data), values_of(root, 0, 1000), 0));
}

TEST_P(NcclCommunicatorTest, GroupedReduceScattersShareOneTicket) {
  const int64_t n_a = 7, n_b = 4099;
  Tensor in_a = poisoned(ranks * n_a), out_a = poisoned(n_a);
  Tensor in_b = poisoned(ranks * n_b), out_b = poisoned(n_b);
  upload(values_of(rank, 0, ranks * n_a), in_a);
  upload(values_of(rank, 0, ranks * n_b), in_b);
  comm->begin_group();
  const CommTicket a = comm->reduce_scatter_sum(in_a, out_a);
  const CommTicket b = comm->reduce_scatter_sum(in_b, out_b);
  EXPECT_THROW(comm->wait(a), Error) << "a group's ticket is not recorded before end_group";
  comm->end_group();
  EXPECT_EQ(a, b);
  comm->wait(b);
  EXPECT_TRUE(all_close(download(out_a), expected_sums(rank * n_a, (rank + 1) * n_a), 0));
  EXPECT_TRUE(all_close(download(out_b), expected_sums(rank * n_b, (rank + 1) * n_b), 0));

  // A collective after the group takes a new ticket.
  Tensor data = poisoned(3);
  upload(values_of(rank, 0, 3), data);
  const CommTicket c = comm->all_reduce_sum(data);
  EXPECT_EQ(c, b + 1);
  comm->wait(c);
  EXPECT_THROW(comm->wait(c + 1), Error);
  EXPECT_TRUE(all_close(download(data), expected_sums(0, 3), 0));
}

// after_issued's callback runs once the copy issued before it has landed: it finds the whole copy in host
// memory (a callback that ran early would find the poison of the last elements), and the caller never blocked.
TEST_P(NcclCommunicatorTest, AfterIssuedRunsOnceTheCopyHasLanded) {
  const int64_t n = 16 << 20;  // long enough for the copy to be in flight when the callback is queued
  Tensor data = poisoned(n);
  upload(values_of(rank, 0, n), data);
  CudaBuffer pinned(data.bytes(), true);
  std::memset(pinned.data(), 0xFF, data.bytes());
  Tensor on_host(pinned.data(), Shape{n}, dtype(), Device::cpu());
  comm->copy(data, on_host);
  std::promise<bool> landed;
  comm->after_issued([&] {
    const auto* bytes = static_cast<const uint8_t*>(pinned.data());
    const size_t size = size_t(data.bytes());
    // The last elements are the last to land; values_of never gives all-ones bytes.
    landed.set_value(std::memcmp(bytes + size - 64, std::vector<uint8_t>(64, 0xFF).data(), 64) != 0);
  });
  auto result = landed.get_future();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_TRUE(result.get());
  std::vector<float> expected = values_of(rank, n - 16, n), last(16);
  if (dtype() == DType::bf16) {
    const auto* bits = static_cast<const uint16_t*>(pinned.data());
    for (int i = 0; i < 16; ++i) last[i] = bf16_bits_to_float(bits[n - 16 + i]);
  } else {
    std::memcpy(last.data(), static_cast<const float*>(pinned.data()) + n - 16, 16 * sizeof(float));
  }
  EXPECT_TRUE(all_close(last, expected, 0));
}

TEST_P(NcclCommunicatorTest, DescribesAndAgreesOnTheHost) {
  const std::string text = comm->describe();
  EXPECT_EQ(text.rfind("NCCL 2.", 0), 0u) << text;
  EXPECT_NE(text.find(cat(", ", ranks, ranks == 1 ? " rank" : " ranks")), std::string::npos) << text;
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->size(), ranks);
  EXPECT_DOUBLE_EQ(comm->sum_over_ranks(rank + 1.0), ranks * (ranks + 1) / 2.0);
  EXPECT_FALSE(comm->all_ok(rank != ranks - 1));
  EXPECT_TRUE(comm->all_ok(true));
  comm->barrier();
  Tensor on_host(nullptr, Shape{1}, dtype(), Device::cpu());
  EXPECT_THROW(comm->all_reduce_sum(on_host), Error);
}

}  // namespace
}  // namespace zb::test
