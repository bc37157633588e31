# Finds NCCL: the library and nccl.h, inside the CUDA toolkit or the system's library folders.
# Defines NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY, NCCL_VERSION and the imported target NCCL::NCCL.
include(ImportedLibrary)
zb_find_library(NCCL HEADER nccl.h NAMES nccl libnccl.so.2 VERSION NCCL_ MAJOR MINOR PATCH)
