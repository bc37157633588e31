# Finds libaio (Linux native asynchronous I/O): libaio.h and the library.
# Defines LIBAIO_FOUND, LIBAIO_INCLUDE_DIR, LIBAIO_LIBRARY and the imported target LibAIO::LibAIO.
include(ImportedLibrary)
find_path(LIBAIO_INCLUDE_DIR libaio.h HINTS ${LIBAIO_ROOT} $ENV{LIBAIO_ROOT} PATH_SUFFIXES include)
find_library(LIBAIO_LIBRARY NAMES aio libaio.so.1 libaio.so.1t64
  HINTS ${LIBAIO_ROOT} $ENV{LIBAIO_ROOT} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(LibAIO REQUIRED_VARS LIBAIO_LIBRARY LIBAIO_INCLUDE_DIR)
zb_import_library(LIBAIO LibAIO::LibAIO "${LIBAIO_LIBRARY}" "${LIBAIO_INCLUDE_DIR}")
