# Finds cuDNN: libcudnn and cudnn_version.h, inside the CUDA toolkit or the system's library folders.
# Defines CUDNN_FOUND, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY, CUDNN_VERSION and the imported target CUDNN::CUDNN.
include(ImportedLibrary)
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_HOME} ${CUDAToolkit_LIBRARY_ROOT})
find_path(CUDNN_INCLUDE_DIR cudnn_version.h
  HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
  HINTS ${_cudnn_hints} ${CUDAToolkit_LIBRARY_DIR}
  PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
if(CUDNN_INCLUDE_DIR AND EXISTS "${CUDNN_INCLUDE_DIR}/cudnn_version.h")
  zb_version_from_header(CUDNN_VERSION "${CUDNN_INCLUDE_DIR}/cudnn_version.h" CUDNN_ MAJOR MINOR PATCHLEVEL)
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR VERSION_VAR CUDNN_VERSION)
zb_import_library(CUDNN CUDNN::CUDNN "${CUDNN_LIBRARY}" "${CUDNN_INCLUDE_DIR}")
