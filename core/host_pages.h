// Page-aligned host memory for the large arrays of offloaded state. Blocks of kHugePageMinimum bytes and more
// are aligned to 2 MiB and advised as transparent huge pages (where the kernel offers them only on request,
// its "madvise" setting): the CPU optimizer streams through tens of GB of master weights, moments and
// gradients, and with 4 KiB pages every 4 KiB of every array costs a TLB miss and a page walk, a
// two-dimensional one under a hypervisor.
#pragma once

#include <cstddef>

namespace zb {

enum class HostPages { small, huge_where_large };

constexpr size_t kSmallPage = size_t(4) << 10;
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kHugePageMinimum = size_t(32) << 20;  // rounding up to 2 MiB wastes at most 6% of such a block

// The bytes a block of `bytes` takes: rounded up to its page size. A block of 0 bytes takes one small page.
size_t host_block_bytes(size_t bytes, HostPages pages);
// Null where the memory is not there. Free with std::free.
void* allocate_host_pages(size_t bytes, HostPages pages);

}  // namespace zb
