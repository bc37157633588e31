# Finds cuDNN: libcudnn and cudnn_version.h, inside the CUDA toolkit or the system's library folders.
# Defines CUDNN_FOUND, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY, CUDNN_VERSION and the imported target CUDNN::CUDNN.
include(ImportedLibrary)
zb_find_library(CUDNN HEADER cudnn_version.h NAMES cudnn libcudnn.so.9 VERSION CUDNN_ MAJOR MINOR PATCHLEVEL)
