#include "core/host_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace zb {

namespace {

size_t page_for(size_t bytes, HostPages pages) {
  return pages == HostPages::huge_where_large && bytes >= kHugePageMinimum ? kHugePage : kSmallPage;
}

}  // namespace

size_t host_block_bytes(size_t bytes, HostPages pages) {
  const size_t page = page_for(bytes, pages);
  if (bytes > SIZE_MAX - page) return 0;
  return bytes == 0 ? page : (bytes + page - 1) / page * page;
}

void* allocate_host_pages(size_t bytes, HostPages pages) {
  const size_t rounded = host_block_bytes(bytes, pages);
  if (rounded == 0) return nullptr;
  const size_t page = page_for(bytes, pages);
  void* ptr = std::aligned_alloc(page, rounded);
  // Before the first touch, so that the faults take huge pages. Only advice: where the kernel has no
  // transparent huge pages the call fails and the block keeps small ones.
  if (ptr != nullptr && page == kHugePage) madvise(ptr, rounded, MADV_HUGEPAGE);
  return ptr;
}

}  // namespace zb
